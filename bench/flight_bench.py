"""Daemon benchmark: DoPut ingestion from a pyarrow client and query latency over
Arrow Flight, beside the engine's in-process ingestion rate on the same data, measured
in the same run (these machines are noisy: compare ratios, not absolute figures).

    python bench/flight_bench.py [--target-mb 200] [--reps 5]

Each of `--reps` rounds loads the data once over DoPut and once in process (shoal-bench);
the DoPut ÷ in-process ratio is taken per round, and its median reported.

Needs target/release/shoal and target/release/shoal-bench (built by this script with
cargo) and data/github/events.ndjson (scripts/fetch-data.sh).
"""

import argparse
import json
import datetime
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "flight-server" / "tests" / "e2e"))
from conftest import Daemon, action  # noqa: E402

PSFS = [
    {"name": "id", "kind": "projection", "field": "id"},
    {"name": "actor_id", "kind": "projection", "field": "actor.id"},
    {"name": "repo_id", "kind": "projection", "field": "repo.id"},
    {"name": "type", "kind": "projection", "field": "type"},
    {"name": "opened_issues", "kind": "predicate", "expr": "type = 'IssuesEvent' AND payload.action = 'opened'"},
    {"name": "cpp_prs", "kind": "predicate",
     "expr": "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'"},
]
ID = re.compile(r'^\{"id":"(\d+)"')


CREATED_AT = re.compile(r'"created_at":"([^"]+)"')


def replicated(lines, target_bytes, shift_minutes=0):
    """The events repeated until `target_bytes`, with the id made unique per copy; with
    `shift_minutes`, copy k's (top-level) `created_at` moved k * shift_minutes later (the same
    RFC 3339 shape), so that the data spans hours instead of the sample's 22 minutes."""
    out, size, copy = [], 0, 0
    shifts = {}

    def shifted(match):
        text = match.group(1)
        if text not in shifts:
            at = datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ")
            shifts[text] = (at + datetime.timedelta(minutes=copy * shift_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return '"created_at":"%s"' % shifts[text]

    while size < target_bytes:
        shifts.clear()
        for line in lines:
            record = ID.sub(lambda m: '{"id":"%s%03d"' % (m.group(1), copy), line, count=1) if copy else line
            if shift_minutes and copy:
                # The event's own `created_at` is its last (payloads nest others before it).
                last = None
                for last in CREATED_AT.finditer(record):
                    pass
                if last:
                    record = record[:last.start()] + shifted(last) + record[last.end():]
            out.append(record)
            size += len(record)
            if size >= target_bytes:
                break
        copy += 1
    return out, size


def drain_acks(reader):
    """Reads a DoPut stream's remaining PutResults; returns the records they acknowledge."""
    acked = 0
    while True:
        try:
            chunk = reader.read()
        except StopIteration:
            break
        if chunk is None:
            break
        acked += json.loads(chunk.to_pybytes())["records"]
    return acked


def timed_doput(client, schema, batches, records, reps, prefix="events", create_options=None):
    """Ingests `batches` into a fresh table `{prefix}{rep}` (the GitHub PSFs registered
    first; `create_options`: more `create_table` settings) `reps` times over one DoPut
    stream each; returns the times in seconds. Every table but the last is dropped, so the
    last one is there to query."""
    put_times = []
    for rep in range(reps):
        table = f"{prefix}{rep}"
        action(client, "create_table", {"name": table, **(create_options or {})})
        for psf in PSFS:
            action(client, "register_psf", {"table": table, **psf})
        start = time.perf_counter()
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
        for batch in batches:
            writer.write_batch(batch)
        writer.done_writing()
        acked = drain_acks(reader)
        writer.close()
        put_times.append(time.perf_counter() - start)
        assert acked == records, (acked, records)
        if rep + 1 < reps:
            action(client, "drop_table", {"name": table})
    return put_times


def in_process_ingest(target_mb, reps, memory_mb=None):
    """The engine's in-process ingestion rate on the same data (shoal-bench, memory case, 1
    thread, the GitHub PSFs; `memory_mb`: its ring, default large enough for the data):
    `(median, min, max)` in MB/s, or `(None, shoal-bench's output)` when its table cannot
    be read."""
    budget = ["--memory-mb", str(memory_mb)] if memory_mb else []
    text = subprocess.run([str(REPO / "target/release/shoal-bench"), "--cases", "memory", "--threads", "1",
                           "--target-mb", str(target_mb), "--reps", str(reps), *budget],
                          cwd=REPO, check=True, capture_output=True, text=True).stdout
    m = re.search(r"ingest, in memory, GitHub PSFs\s+1\s+([\d.]+)\D+([\d.]+)\D+([\d.]+)", text)
    if m:
        return tuple(float(x) for x in m.groups())
    m = re.search(r"ingest, in memory, GitHub PSFs\s+1\s+([\d.]+)", text)
    if m:
        return (float(m.group(1)),) * 3
    return None, text


def wait_observed(client, table, timeout=120):
    """Waits until the daemon's background schema observer has reached the last whole page
    of `table` (stats' `observed_until_address`), so that its lagging work does not run
    during the next measurement. Returns the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        stats = action(client, "stats", {"table": table})
        page = stats["tail_address"] - stats["tail_address"] % stats["page_size_bytes"]
        if stats["observed_until_address"] >= page:
            break
        time.sleep(0.02)
    return time.perf_counter() - start


def timed(fn, reps):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-mb", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5, help="rounds (DoPut + in process each)")
    parser.add_argument("--batch-records", type=int, default=4096)
    parser.add_argument("--memory-budget-mb", type=int, default=None,
                        help="the daemon's ring (default 3x the data: a burst that fits; smaller: sustained"
                             " ingestion, where the background schema observer must keep up)")
    args = parser.parse_args()

    print("building release binaries ...", flush=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-server", "-p", "shoal-bench", "--bin", "shoal",
                    "--bin", "shoal-bench"], cwd=REPO, check=True)
    lines = [l for l in (REPO / "data/github/events.ndjson").read_text(encoding="utf-8").splitlines() if l.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    mb = size / 1e6
    schema = pa.schema([("json", pa.string())])
    batches = [pa.record_batch([pa.array(records[i:i + args.batch_records], pa.string())], schema=schema)
               for i in range(0, len(records), args.batch_records)]
    print(f"data: {len(records)} GitHub events, {mb:.1f} MB, {len(batches)} DoPut batches", flush=True)

    import os
    os.environ["SHOAL_BIN"] = str(REPO / "target/release/shoal")
    import tempfile
    rows = []
    put_times, engine_rates, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        budget = args.memory_budget_mb or max(512, 3 * args.target_mb)
        mode = "sustained: frames reused, the schema observer must keep up" if budget < mb else "burst: the data fits"
        print(f"the daemon's and the in-process table's ring: {budget} MB ({mode})", flush=True)
        daemon = Daemon(Path(tmp) / "data", "--in-memory", "--memory-budget-mb", str(budget))
        try:
            client = daemon.client()
            # Rounds of one DoPut load and one in-process load of the same data, so that each
            # ratio compares two runs seconds apart (the machine's speed drifts more than that
            # between the start and the end of a run).
            for round_ in range(args.reps):
                if round_:
                    action(client, "drop_table", {"name": "events0"})
                (put,) = timed_doput(client, schema, batches, len(records), 1)
                wait_observed(client, "events0")
                engine, *rest = in_process_ingest(args.target_mb, 1, args.memory_budget_mb)
                if engine is None:
                    print("could not read the in-process figure from shoal-bench; its output was:\n" + rest[0])
                    return 1
                put_times.append(put)
                engine_rates.append(engine)
                ratios.append(mb / put / engine)
                print(f"round {round_ + 1}/{args.reps}: DoPut {mb / put:.0f} MB/s, in process {engine:.0f} MB/s,"
                      f" ratio {100 * ratios[-1]:.0f}%", flush=True)
            table = "events0"
            put_median = statistics.median(put_times)
            rows.append(("DoPut ingestion (pyarrow, 1 stream)", f"{mb / put_median:.0f} MB/s",
                         f"{len(records) / put_median / 1e3:.0f} k rec/s", f"{min(put_times):.2f}-{max(put_times):.2f} s"))

            actor = json.loads(lines[100])["actor"]["id"]
            queries = [
                ("point lookup actor.id (projection PSF)", f"actor.id = {actor}"),
                ("opened issues (predicate PSF)", "type = 'IssuesEvent' AND payload.action = 'opened'"),
                ("full scan (no PSF covers it)", "payload.size > 5"),
            ]
            for name, text in queries:
                command = {"table": table, "filter": text, "columns": ["id", "actor.login"]}

                def run():
                    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
                    n = sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
                    return n, json.loads(info.app_metadata)["plan"]

                median, low, high, (n, plan) = timed(run, max(5, args.reps))
                kind = "index" if plan["index_scans"] else "full"
                rows.append((name, f"{median * 1e3:.1f} ms", f"{n} rows ({100 * n / len(records):.2f}%), {kind} scan",
                             f"{low * 1e3:.1f}-{high * 1e3:.1f} ms"))
        finally:
            daemon.stop()

    print()
    print(f"{'measurement':45} {'median':>12}  {'detail':40} {'min-max'}")
    for row in rows:
        print(f"{row[0]:45} {row[1]:>12}  {row[2]:40} {row[3]}")
    print(f"\nengine in process, 1 thread: {statistics.median(engine_rates):.0f} MB/s"
          f" ({min(engine_rates):.0f}-{max(engine_rates):.0f}); DoPut ÷ in process, per round:"
          f" median {100 * statistics.median(ratios):.0f}% ({100 * min(ratios):.0f}-{100 * max(ratios):.0f}%)"
          f" (target >= 60%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
