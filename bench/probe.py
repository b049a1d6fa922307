"""Re-runs the daemon's outside probes (hostile load, a full disk) that are too long or need
too much of the machine for CI, against the release daemon, and writes a Markdown report:

* `concurrency`: `--clients` (200) pyarrow Flight clients for `--seconds` (120), each in its
  own thread with its own connection, looping over DoPut batches (writer serials, so exactly
  once), one-call counts, PSF lookups, a filter no PSF covers and `stats`; the daemon's
  resident memory, threads and descriptors are sampled every 2 s. It holds when the daemon
  lives, every error is a documented refusal (none here: scans wait for a place), and
  `count(*)` equals the records loaded plus those acknowledged.
* `full-disk`: the data directory on a small tmpfs (`--disk-mb`, 96; needs root to mount),
  a durable table (`group_commit`) fed until the disk is full. It holds when the records
  visible are exactly the acknowledged ones while the disk is full, after a SIGKILL and
  restart on the full disk, and after space returns and ingestion resumes (before the fix,
  this probe saw 7,000 refused records visible, 312 after a restart).

The other probes are CI tests (`flight-server/tests/e2e/test_hardening.py`, one test per
probe, and the JSONTestSuite test in `test_daemon.py`); twenty SIGKILLs under DoPut are
`bench/soak.py --minutes 5 --kill-every 15`.

    cargo build --release --locked -p shoal-server
    .venv/bin/python bench/probe.py [--probes concurrency,full-disk] [--out bench/results/probe-results.md]

Exit status 1 when a probe does not hold.
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
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
READY = "shoal ready: listening on "
SCHEMA = pa.schema([("json", pa.string())])


class Daemon:
    """`shoal serve` on a data directory and a port of its choice."""

    def __init__(self, binary: Path, data_dir: Path, *extra: str):
        self.process = subprocess.Popen(
            [str(binary), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        ready = threading.Event()
        port: list[int] = []

        def pump():
            for line in self.process.stdout:
                self.lines.append(line.rstrip())
                if line.startswith(READY):
                    port.append(int(line[len(READY):].split()[0].rsplit(":", 1)[1]))
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(120):
            self.process.kill()
            raise RuntimeError("the daemon did not start:\n" + "\n".join(self.lines[-20:]))
        self.location = f"grpc://127.0.0.1:{port[0]}"

    def client(self) -> flight.FlightClient:
        return flight.FlightClient(self.location)

    def alive(self) -> bool:
        return self.process.poll() is None

    def sample(self) -> tuple[int, int, int]:
        """Resident MiB, threads, open descriptors."""
        pid = self.process.pid
        status = Path(f"/proc/{pid}/status").read_text()
        rss = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("VmRSS:")) // 1024
        threads = next(int(l.split()[1]) for l in status.splitlines() if l.startswith("Threads:"))
        return rss, threads, len(os.listdir(f"/proc/{pid}/fd"))

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.alive():
            self.process.send_signal(sig)
            self.process.wait(60)
        return self.process.returncode


def action(client, name: str, body: dict):
    results = list(client.do_action(flight.Action(name, json.dumps(body).encode())))
    return json.loads(results[0].body.to_pybytes()) if results else None


def one_call(client, command: dict) -> pa.Table:
    return client.do_get(flight.Ticket(json.dumps(command).encode())).read_all()


def count(client, table: str) -> int:
    return one_call(client, {"table": table, "aggregates": [{"function": "count"}]}).column(0)[0].as_py()


def put(client, table: str, rows: list[str], metadata: dict | None = None) -> dict:
    descriptor = flight.FlightDescriptor.for_path(table)
    writer, reader = client.do_put(descriptor, SCHEMA)
    with writer:
        batch = pa.record_batch([pa.array(rows, pa.string())], schema=SCHEMA)
        if metadata:
            writer.write_with_metadata(batch, pa.py_buffer(json.dumps(metadata).encode()))
        else:
            writer.write_batch(batch)
        ack = json.loads(reader.read().to_pybytes())
        writer.done_writing()
    return ack


def error_class(error: Exception) -> str:
    text = str(error)
    for code in ("RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "UNAVAILABLE", "CANCELLED", "DEADLINE_EXCEEDED",
                 "INTERNAL", "UNKNOWN", "NOT_FOUND", "FAILED_PRECONDITION"):
        if code in text:
            return code
    return type(error).__name__


def events(path: Path, limit: int) -> list[str]:
    rows = []
    with open(path) as f:
        for line in f:
            rows.append(line.strip())
            if len(rows) >= limit:
                break
    return rows


def probe_concurrency(args, report: list[str]) -> bool:
    rows = events(args.events, 20_000)
    with tempfile.TemporaryDirectory(prefix="shoal-probe-") as tmp:
        daemon = Daemon(args.bin, Path(tmp) / "data")
        client = daemon.client()
        action(client, "create_table", {"name": "p"})
        action(client, "register_psf", {"table": "p", "name": "type", "kind": "projection", "field": "type"})
        for start in range(0, len(rows), 2_000):
            put(client, "p", rows[start:start + 2_000])
        loaded = len(rows)
        stop_at = time.monotonic() + args.seconds
        acknowledged = Counter()
        outcomes: dict[str, Counter] = {}
        latencies: dict[str, list[float]] = {}
        lock = threading.Lock()

        def worker(n: int):
            mine = daemon.client()
            serial, i = 0, 0
            while time.monotonic() < stop_at:
                op = ("put", "count", "psf", "no_psf", "stats")[i % 5]
                i += 1
                started = time.monotonic()
                try:
                    if op == "put":
                        serial += 1
                        batch = rows[(n * 50 + serial * 7) % 19_000:][:50]
                        ack = put(mine, "p", batch, {"writer": f"probe-{n}", "serial": serial})
                        if not ack.get("duplicate"):
                            with lock:
                                acknowledged["records"] += ack["records"]
                    elif op == "count":
                        count(mine, "p")
                    elif op == "psf":
                        one_call(mine, {"table": "p", "filter": "type = 'WatchEvent'", "columns": ["id"], "limit": 20})
                    elif op == "no_psf":
                        one_call(mine, {"table": "p", "filter": "payload.size > 5", "columns": ["id", "actor.login"], "limit": 100})
                    else:
                        action(mine, "stats", {"table": "p"})
                    outcome = "ok"
                except Exception as error:  # every failure is counted by its class
                    outcome = error_class(error)
                elapsed = time.monotonic() - started
                with lock:
                    outcomes.setdefault(op, Counter())[outcome] += 1
                    latencies.setdefault(op, []).append(elapsed)

        samples = []
        threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(args.clients)]
        for t in threads:
            t.start()
        while time.monotonic() < stop_at and daemon.alive():
            samples.append(daemon.sample())
            time.sleep(2)
        for t in threads:
            t.join(120)
        alive = daemon.alive()
        final = count(client, "p") if alive else None
        expected = loaded + acknowledged["records"]
        errors = {op: {k: v for k, v in c.items() if k != "ok"} for op, c in outcomes.items()}
        holds = alive and final == expected and not any(errors.values())
        report.append(f"## concurrency: {args.clients} clients for {args.seconds:.0f} s\n")
        report.append("| operation | calls | ok | errors | median ms | p99 ms |\n|---|---:|---:|---|---:|---:|")
        for op in ("put", "count", "psf", "no_psf", "stats"):
            c, lat = outcomes.get(op, Counter()), sorted(latencies.get(op, [0.0]))
            median, p99 = lat[len(lat) // 2] * 1000, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
            report.append(f"| {op} | {sum(c.values())} | {c['ok']} | {dict(errors.get(op, {})) or '-'} | {median:.1f} | {p99:.1f} |")
        if samples:
            rss, thr, fds = zip(*samples)
            report.append(f"\nDaemon samples every 2 s ({len(samples)}): resident {min(rss)}–{max(rss)} MiB, "
                          f"threads {min(thr)}–{max(thr)}, descriptors {min(fds)}–{max(fds)}.")
        report.append(f"\n`count(*)` {final} for {loaded} loaded + {acknowledged['records']} acknowledged = {expected}; "
                      f"daemon alive: {alive}. **{'holds' if holds else 'DOES NOT HOLD'}**\n")
        daemon.stop()
        return holds


def probe_full_disk(args, report: list[str]) -> bool:
    rows = events(args.events, 10_000)
    mount = Path(tempfile.mkdtemp(prefix="shoal-probe-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.disk_mb}m", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        report.append(f"## full disk: not run (mounting a tmpfs failed: {mounted.stderr.strip()}; needs root)\n")
        mount.rmdir()
        return True
    try:
        return full_disk(args, rows, mount, report)
    finally:
        subprocess.run(["umount", str(mount)])
        shutil.rmtree(mount, ignore_errors=True)


def full_disk(args, rows: list[str], mount: Path, report: list[str]) -> bool:
    filler = mount / "filler"
    filler.write_bytes(b"\0" * (16 << 20))  # freed later: space returns
    data = mount / "data"
    extra = ("--memory-budget-mb", "64")
    daemon = Daemon(args.bin, data, *extra)
    client = daemon.client()
    action(client, "create_table", {"name": "d", "durability": "group_commit", "columnar": {"enabled": False}})
    acknowledged, refused, first_error = 0, 0, ""
    i = 0
    while refused < 20 and i < 10_000:
        batch = [rows[(i * 500 + k) % len(rows)] for k in range(500)]
        i += 1
        try:
            acknowledged += put(client, "d", batch)["records"]
        except Exception as error:
            refused += 1
            first_error = first_error or str(error).split(". gRPC client debug context")[0][:300]
    visible_full = count(client, "d")
    stats_full = action(client, "stats", {"table": "d"})["records"]
    daemon.stop(signal.SIGKILL)
    daemon = Daemon(args.bin, data, *extra)
    client = daemon.client()
    visible_restart = count(client, "d")
    filler.unlink()
    resumed = 0
    deadline = time.monotonic() + 30
    while resumed == 0 and time.monotonic() < deadline:
        try:
            resumed = put(client, "d", rows[:500])["records"]
        except Exception:
            time.sleep(0.5)
    visible_resumed = count(client, "d")
    daemon.stop()
    holds = visible_full == acknowledged == stats_full and visible_restart == acknowledged \
        and resumed == 500 and visible_resumed == acknowledged + resumed
    report.append(f"## full disk: a {args.disk_mb} MiB tmpfs, `durability = group_commit`\n")
    report.append("| | records |\n|---|---:|")
    report.append(f"| acknowledged before the disk filled | {acknowledged} |")
    report.append(f"| refused batches (of 500) | {refused} |")
    report.append(f"| visible with the disk full (`count(*)` / `stats.records`) | {visible_full} / {stats_full} |")
    report.append(f"| visible after SIGKILL and restart on the full disk | {visible_restart} |")
    report.append(f"| acknowledged after space returned | {resumed} |")
    report.append(f"| visible at the end | {visible_resumed} |")
    report.append(f"\nFirst refusal: `{first_error}`\n\n**{'holds' if holds else 'DOES NOT HOLD'}**\n")
    return holds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probes", default="concurrency,full-disk")
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--disk-mb", type=int, default=96)
    parser.add_argument("--bin", type=Path, default=REPO / "target" / "release" / "shoal")
    parser.add_argument("--events", type=Path, default=REPO / "data" / "github" / "events.ndjson")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "probe-results.md")
    args = parser.parse_args()
    report = [f"# Hardening probes re-run ({time.strftime('%Y-%m-%d')}, `{' '.join(sys.argv[1:]) or 'defaults'}`)\n",
              f"Release binary, {os.cpu_count()} cores.\n"]
    holds = True
    for name in args.probes.split(","):
        print(f"probe {name} ...", flush=True)
        holds &= {"concurrency": probe_concurrency, "full-disk": probe_full_disk}[name](args, report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(report) + "\n")
    print("\n".join(report))
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(main())
