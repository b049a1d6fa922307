"""Soak test of the daemon: mixed load for `--minutes` (default 10) with a SIGKILL and restart
every `--kill-every` seconds (default 60), sampling the daemon's memory, threads and file
descriptors, then checking that every acknowledged record is there, once.

    cargo build --release --locked -p shoal-server
    .venv/bin/python bench/soak.py [--minutes 10] [--kill-every 60] [--out bench/results/soak-results.md]

Load, all through pyarrow Flight clients against the release binary (`serve`, tables with
`durability = group_commit`, so an acknowledged batch is durable):

* `--writers` (2) DoPut streams, each a writer with serial numbers (exactly once across
  resends): a batch that was not acknowledged (the daemon was killed) is resent with the same
  serial once the daemon is back; GitHub Archive events (`data/github/events.ndjson`) with an
  added unique `soak_id`;
* one querying client: count, PSF lookups, a filter no PSF covers, a projection of a few
  columns, with `limit`;
* one client that registers and deregisters a PSF every few seconds, and asks for a
  checkpoint every `--checkpoint-every` (10) s;
* samples every 2 s of the daemon's resident memory (`VmRSS`), threads and open file
  descriptors (`/proc/PID`), and the data directory's size.

At the end: `count(*)` must equal the records acknowledged, and the `soak_id`s read back must
be distinct and exactly the acknowledged ones. The report (a Markdown table per daemon
lifetime: peaks and last samples) goes to `--out`; the exit status is non-zero when a
record is missing or duplicated. Not part of CI: it takes `--minutes`.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
READY = "shoal ready: listening on "
SCHEMA = pa.schema([("json", pa.string())])
TABLE = "soak"


class Daemon:
    """The release daemon on a data directory, restarted after each SIGKILL on a new port."""

    def __init__(self, binary: Path, data_dir: Path):
        self.binary, self.data_dir = binary, data_dir
        self.process: subprocess.Popen | None = None
        self.location = ""
        self.generation = 0
        self.lock = threading.Lock()

    def start(self):
        process = subprocess.Popen(
            [str(self.binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.data_dir),
             "--durability", "group_commit", "--checkpoint-interval-secs", "30"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        started = time.monotonic()
        for line in process.stdout:
            if line.startswith(READY):
                port = line[len(READY):].split()[0].rsplit(":", 1)[1]
                break
        else:
            raise SystemExit(f"the daemon exited before it was ready (status {process.wait()})")
        # Keep draining its output so that it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
        with self.lock:
            self.process, self.location = process, f"grpc://127.0.0.1:{port}"
            self.generation += 1
        print(f"soak: daemon {self.generation} ready in {time.monotonic() - started:.1f} s (pid {process.pid})", flush=True)

    def kill(self):
        with self.lock:
            process = self.process
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop(self):
        with self.lock:
            process = self.process
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)

    def client(self) -> flight.FlightClient:
        with self.lock:
            return flight.FlightClient(self.location)


def action(client, name: str, body: dict, timeout: float = 30):
    options = flight.FlightCallOptions(timeout=timeout)
    results = list(client.do_action(flight.Action(name, json.dumps(body).encode()), options=options))
    return json.loads(results[0].body.to_pybytes())


def query(client, command: dict, timeout: float = 60) -> pa.Table | None:
    options = flight.FlightCallOptions(timeout=timeout)
    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)), options)
    tables = [client.do_get(e.ticket, options).read_all() for e in info.endpoints]
    return pa.concat_tables(tables) if tables else None


def events(path: Path) -> list[dict]:
    if not path.exists():
        raise SystemExit(f"{path} is missing: run scripts/fetch-data.sh")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Soak:
    def __init__(self, args, daemon: Daemon, corpus: list[dict]):
        self.args, self.daemon, self.corpus = args, daemon, corpus
        self.stop = threading.Event()
        self.acknowledged: dict[str, int] = {}  # writer -> records acknowledged
        self.ack_lock = threading.Lock()
        self.counters = {"batches": 0, "resends": 0, "queries": 0, "query_errors": 0, "psf_changes": 0,
                         "checkpoints": 0, "kills": 0}
        self.samples: list[dict] = []
        self.errors: list[str] = []

    def count(self, key: str, n: int = 1):
        with self.ack_lock:
            self.counters[key] += n

    def writer(self, index: int):
        name = f"soak-writer-{index}"
        serial, offset, batch_rows = 0, 0, self.args.batch_rows
        pending: list[str] | None = None
        acked = 0
        while not self.stop.is_set():
            if pending is None:
                serial += 1
                pending = []
                for i in range(batch_rows):
                    record = dict(self.corpus[(offset + i) % len(self.corpus)])
                    record["soak_id"] = f"{index}-{serial}-{i}"
                    pending.append(json.dumps(record))
                offset += batch_rows
            try:
                client = self.daemon.client()
                writer, reader = client.do_put(flight.FlightDescriptor.for_path(TABLE), SCHEMA,
                                               flight.FlightCallOptions(timeout=30))
                with writer:
                    metadata = json.dumps({"writer": name, "serial": serial}).encode()
                    writer.write_with_metadata(pa.record_batch([pa.array(pending, pa.string())], schema=SCHEMA),
                                               pa.py_buffer(metadata))
                    ack = json.loads(reader.read().to_pybytes())
                    writer.done_writing()
                # A duplicate: the batch was ingested before a kill cut its acknowledgement.
                acked += len(pending) if ack.get("duplicate") else ack["records"]
                with self.ack_lock:
                    self.acknowledged[name] = acked
                    self.counters["batches"] += 1
                pending = None
                time.sleep(self.args.writer_pause)
            except (pa.ArrowException, flight.FlightError, OSError):
                # The daemon was killed (or refused the batch): resend the same serial.
                self.count("resends")
                time.sleep(0.2)

    def querier(self):
        commands = [
            {"table": TABLE, "aggregates": [{"function": "count"}]},
            {"table": TABLE, "filter": "type = 'PushEvent'", "columns": ["soak_id", "actor.login"], "limit": 100},
            {"table": TABLE, "filter": "actor.id = 1", "columns": ["soak_id"]},
            {"table": TABLE, "filter": "payload.size > 5", "columns": ["soak_id"], "limit": 1000},
            {"table": TABLE, "columns": ["soak_id", "type", "repo.name"], "limit": 5000},
        ]
        i = 0
        while not self.stop.is_set():
            try:
                query(self.daemon.client(), commands[i % len(commands)])
                self.count("queries")
            except (pa.ArrowException, flight.FlightError, OSError):
                self.count("query_errors")
                time.sleep(0.2)
            i += 1
            time.sleep(0.05)

    def maintainer(self):
        last_checkpoint = time.monotonic()
        registered = False
        while not self.stop.wait(2):
            try:
                client = self.daemon.client()
                if registered:
                    action(client, "deregister_psf", {"table": TABLE, "name": "opened"})
                else:
                    action(client, "register_psf", {"table": TABLE, "name": "opened", "kind": "predicate",
                                                    "expr": "type = 'IssuesEvent' AND payload.action = 'opened'"})
                registered = not registered
                self.count("psf_changes")
                if time.monotonic() - last_checkpoint >= self.args.checkpoint_every:
                    action(client, "checkpoint", {"table": TABLE})
                    last_checkpoint = time.monotonic()
                    self.count("checkpoints")
            except (pa.ArrowException, flight.FlightError, OSError) as e:
                # After a restart the PSF may or may not be there: find out.
                if "already" in str(e) or "not found" in str(e).lower() or "NOT_FOUND" in str(e):
                    registered = not registered

    def sample(self):
        with self.daemon.lock:
            process, generation = self.daemon.process, self.daemon.generation
        proc = Path(f"/proc/{process.pid}")
        try:
            status = dict(line.split(":", 1) for line in (proc / "status").read_text().splitlines())
            fds = len(os.listdir(proc / "fd"))
        except (OSError, ValueError):
            return
        size = sum(f.stat().st_size for f in self.daemon.data_dir.rglob("*") if f.is_file())
        with self.ack_lock:
            acked = sum(self.acknowledged.values())
        self.samples.append({
            "t": time.monotonic(), "generation": generation,
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024, "threads": int(status["Threads"]),
            "fds": fds, "data_mib": size / 2**20, "acknowledged": acked,
        })

    def run(self):
        threads = [threading.Thread(target=self.writer, args=(i,), daemon=True) for i in range(self.args.writers)]
        threads += [threading.Thread(target=self.querier, daemon=True), threading.Thread(target=self.maintainer, daemon=True)]
        for t in threads:
            t.start()
        started = time.monotonic()
        end = started + self.args.minutes * 60
        next_kill = started + self.args.kill_every
        while time.monotonic() < end:
            time.sleep(2)
            self.sample()
            if time.monotonic() >= next_kill and time.monotonic() + 5 < end:
                self.daemon.kill()
                self.count("kills")
                print(f"soak: SIGKILL at {time.monotonic() - started:.0f} s, "
                      f"{sum(self.acknowledged.values())} records acknowledged so far", flush=True)
                self.daemon.start()
                next_kill = time.monotonic() + self.args.kill_every
        self.stop.set()
        for t in threads:
            t.join(120)
        self.sample()
        return started


def check(daemon: Daemon, acknowledged: int) -> dict:
    client = daemon.client()
    # One partial count per endpoint.
    counted = sum(query(client, {"table": TABLE, "aggregates": [{"function": "count"}]}).column(0).to_pylist())
    ids = query(client, {"table": TABLE, "columns": ["soak_id"]}, timeout=600).column("soak_id").to_pylist()
    return {"count": counted, "ids": len(ids), "distinct_ids": len(set(ids)), "acknowledged": acknowledged}


def report(soak: Soak, started: float, result: dict, args) -> str:
    lines = [
        f"Soak: {args.minutes} min, SIGKILL + restart every {args.kill_every} s, {args.writers} writers "
        f"({args.batch_rows}-record batches with serials), 1 querying client, PSF register/deregister every 2 s, "
        f"checkpoint every {args.checkpoint_every} s; `durability = group_commit`. Release binary, "
        f"{os.cpu_count()} cores.",
        "",
        "| | " + " | ".join(k for k in soak.counters) + " |",
        "|---|" + "---|" * len(soak.counters),
        "| | " + " | ".join(str(v) for v in soak.counters.values()) + " |",
        "",
        "Per daemon lifetime (samples every 2 s): peak resident memory, threads, file descriptors, and the data "
        "directory at its last sample.",
        "",
        "| daemon | from (s) | samples | peak RSS (MiB) | last RSS (MiB) | peak threads | peak fds | data (MiB) | acknowledged |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    generations = sorted({s["generation"] for s in soak.samples})
    for g in generations:
        rows = [s for s in soak.samples if s["generation"] == g]
        lines.append(
            f"| {g} | {rows[0]['t'] - started:.0f} | {len(rows)} | {max(r['rss_mib'] for r in rows):.0f} | "
            f"{rows[-1]['rss_mib']:.0f} | {max(r['threads'] for r in rows)} | {max(r['fds'] for r in rows)} | "
            f"{rows[-1]['data_mib']:.0f} | {rows[-1]['acknowledged']} |"
        )
    ok = result["count"] == result["acknowledged"] == result["ids"] == result["distinct_ids"]
    lines += [
        "",
        f"At the end: {result['acknowledged']} records acknowledged; `count(*)` {result['count']}; "
        f"{result['ids']} `soak_id`s read back, {result['distinct_ids']} distinct: "
        + ("every acknowledged record is there, once." if ok else "**MISMATCH**."),
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--kill-every", type=float, default=60, help="seconds between SIGKILLs")
    parser.add_argument("--writers", type=int, default=2)
    parser.add_argument("--batch-rows", type=int, default=500)
    parser.add_argument("--writer-pause", type=float, default=0.02, help="seconds between a writer's batches")
    parser.add_argument("--checkpoint-every", type=float, default=10)
    parser.add_argument("--bin", type=Path, default=REPO / "target" / "release" / "shoal")
    parser.add_argument("--events", type=Path, default=REPO / "data" / "github" / "events.ndjson")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "soak-results.md")
    args = parser.parse_args()
    if not args.bin.exists():
        raise SystemExit(f"{args.bin} is missing: cargo build --release --locked -p shoal-server")
    corpus = events(args.events)
    data_dir = Path(tempfile.mkdtemp(prefix="shoal-soak-"))
    daemon = Daemon(args.bin, data_dir)
    try:
        daemon.start()
        action(daemon.client(), "create_table", {"name": TABLE})
        soak = Soak(args, daemon, corpus)
        started = soak.run()
        result = check(daemon, sum(soak.acknowledged.values()))
        text = report(soak, started, result, args)
        daemon.stop()
    finally:
        if daemon.process and daemon.process.poll() is None:
            daemon.process.kill()
        shutil.rmtree(data_dir, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    ok = result["count"] == result["acknowledged"] == result["ids"] == result["distinct_ids"]
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
