"""Fixtures for the daemon's end-to-end tests: the real `shoal` binary started as a
process on a free port, a pyarrow Flight client, and GitHub Archive events."""

import json
import os
import random
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

REPO = Path(__file__).resolve().parents[3]


def shoal_binary() -> Path:
    path = Path(os.environ.get("SHOAL_BIN", REPO / "target" / "debug" / "shoal"))
    if not path.exists():
        pytest.fail(f"shoal binary not found at {path}: run `cargo build -p shoal-server` (or set SHOAL_BIN)")
    return path


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768 and up on Linux): a port the
    kernel picked for `bind(0)` is handed out again as the local port of outgoing connections
    (the remote-store tests make many), which took a cluster node's port between this pick
    and the node's bind ("Address already in use")."""
    rng = random.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(15000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 15000..32000")


READY = "shoal ready: listening on "

# Every daemon the tests started, so that none outlives the test that started it.
STARTED: list = []


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test():
    """Kills the daemons a test started and left running (a test that failed before its own
    stop; a cluster whose later node failed to start); those of module-scoped fixtures, made
    before, are theirs to stop."""
    first = len(STARTED)
    yield
    for daemon in STARTED[first:]:
        if daemon.alive():
            daemon.process.kill()
            daemon.process.wait(30)
    del STARTED[first:]


class Daemon:
    """A running `shoal serve` process."""

    def __init__(self, data_dir: Path, *extra: str, scheme: str = "grpc", host: str = "127.0.0.1", listen: str = "127.0.0.1:0", env: dict | None = None):
        # Port 0: the daemon binds a free port and prints it (no window in which another process
        # could take a port picked here).
        self.log_lines: list[str] = []
        self.process = subprocess.Popen(
            [str(shoal_binary()), "serve", "--listen", listen, "--data-dir", str(data_dir), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
        )
        STARTED.append(self)
        ready = threading.Event()
        bound: list[int] = []

        def pump():
            for line in self.process.stdout:
                self.log_lines.append(line.rstrip())
                if line.startswith(READY):
                    bound.append(int(line[len(READY):].split()[0].rsplit(":", 1)[1]))
                    ready.set()

        self.pump = threading.Thread(target=pump, daemon=True)
        self.pump.start()
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            if self.process.poll() is not None:
                self.pump.join(10)
                raise RuntimeError(f"shoal exited with {self.process.returncode} before it was ready:\n" + "\n".join(self.log_lines))
            if time.monotonic() > deadline:
                self.process.kill()
                raise RuntimeError("shoal did not become ready in 60 s:\n" + "\n".join(self.log_lines))
        self.port = bound[0]
        self.location = f"{scheme}://{host}:{self.port}"

    def client(self, **kwargs) -> flight.FlightClient:
        return flight.FlightClient(self.location, **kwargs)

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                raise
        # The pump ends at the end of the output: after it, log_lines holds the daemon's last lines.
        self.pump.join(30)
        return self.process.returncode


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path / "data")
    yield d
    code = d.stop()
    assert code == 0, "shoal exited with %s:\n%s" % (code, "\n".join(d.log_lines[-30:]))


@pytest.fixture
def start_daemon(tmp_path):
    started = []

    def start(*extra: str, **kwargs) -> Daemon:
        d = Daemon(tmp_path / f"data{len(started)}", *extra, **kwargs)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


def github_events(limit: int | None = None) -> list[str]:
    path = Path(os.environ.get("SHOAL_GITHUB_EVENTS", REPO / "data" / "github" / "events.ndjson"))
    if not path.exists():
        if os.environ.get("SHOAL_REQUIRE_DATA") == "1":
            pytest.fail(f"GitHub events missing at {path}: run scripts/fetch-data.sh")
        pytest.skip(f"GitHub events missing at {path}: run scripts/fetch-data.sh")
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[:limit] if limit else lines


def dig(record, path: str):
    """The value at dotted `path` of a parsed record; None when a step is missing (JSON null
    and missing are alike to the filter language)."""
    for key in path.split("."):
        if not isinstance(record, dict) or key not in record:
            return None
        record = record[key]
    return record


def action(client: flight.FlightClient, name: str, body: dict, **kwargs):
    results = list(client.do_action(flight.Action(name, json.dumps(body).encode()), **kwargs))
    return json.loads(results[0].body.to_pybytes())


def put(client: flight.FlightClient, table: str, records: list[str], batch: int = 500) -> list[dict]:
    """Ingests records through DoPut; returns the PutResult metadata of every batch."""
    schema = pa.schema([("json", pa.string())])
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    acks = []
    with writer:
        for start in range(0, len(records), batch):
            writer.write_batch(pa.record_batch([pa.array(records[start : start + batch], pa.string())], schema=schema))
            acks.append(json.loads(reader.read().to_pybytes()))
        writer.done_writing()
    return acks


def string_literals(count: int) -> list[str]:
    """`count` distinct four-character SQL string literals ('0000', '0001', …): a statement
    `x IN (<them, comma-separated>)` grows by a byte per value when the daemon renders it
    (`IN ('a', 'b')`), so one under the 1 MiB statement limit renders past it."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    return [f"'{digits[i // 46656 % 36]}{digits[i // 1296 % 36]}{digits[i // 36 % 36]}{digits[i % 36]}'" for i in range(count)]


def query_ids(client: flight.FlightClient, table: str, text: str | None = None):
    """The sorted `id`s of the records matching `text` (all records if None) and the plan."""
    command = {"table": table, "columns": ["id"]}
    if text:
        command["filter"] = text
    result, _, meta = query(client, command)
    return (sorted(result.column("id").to_pylist()) if result is not None else []), meta


def query(client: flight.FlightClient, command: dict):
    """Plans with GetFlightInfo and reads every endpoint; returns (table, info, plan metadata)."""
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
    tables = [client.do_get(endpoint.ticket).read_all() for endpoint in info.endpoints]
    table = pa.concat_tables(tables) if tables else None
    return table, info, json.loads(info.app_metadata) if info.app_metadata else {}


def self_signed_cert(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and key for `localhost` / 127.0.0.1 (openssl), valid one day."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key
