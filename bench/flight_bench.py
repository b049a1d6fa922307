"""Daemon benchmark: DoPut ingestion from a pyarrow client and query latency over
Arrow Flight, beside the engine's in-process ingestion rate on the same data, measured
in the same run (these machines are noisy: compare ratios, not absolute figures).

    python bench/flight_bench.py [--target-mb 100] [--reps 3]

Needs target/release/shoal and target/release/shoal-bench (built by this script with
cargo) and data/github/events.ndjson (scripts/fetch-data.sh).
"""

import argparse
import json
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


def replicated(lines, target_bytes):
    """The events repeated until `target_bytes`, with the id made unique per copy."""
    out, size, copy = [], 0, 0
    while size < target_bytes:
        for line in lines:
            record = ID.sub(lambda m: '{"id":"%s%03d"' % (m.group(1), copy), line, count=1) if copy else line
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


def timed_doput(client, schema, batches, records, reps):
    """Ingests `batches` into a fresh table `events{rep}` (the GitHub PSFs registered
    first) `reps` times over one DoPut stream each; returns the times in seconds. Every
    table but the last is dropped, so the last one is there to query."""
    put_times = []
    for rep in range(reps):
        table = f"events{rep}"
        action(client, "create_table", {"name": table})
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


def in_process_ingest(target_mb, reps):
    """The engine's in-process ingestion rate on the same data (shoal-bench, memory case, 1
    thread, the GitHub PSFs): `(median, min, max)` in MB/s, or `(None, shoal-bench's output)`
    when its table cannot be read."""
    text = subprocess.run([str(REPO / "target/release/shoal-bench"), "--cases", "memory", "--threads", "1",
                           "--target-mb", str(target_mb), "--reps", str(reps)],
                          cwd=REPO, check=True, capture_output=True, text=True).stdout
    m = re.search(r"ingest, in memory, GitHub PSFs\s+1\s+([\d.]+)\D+([\d.]+)\D+([\d.]+)", text)
    if m:
        return tuple(float(x) for x in m.groups())
    m = re.search(r"ingest, in memory, GitHub PSFs\s+1\s+([\d.]+)", text)
    if m:
        return (float(m.group(1)),) * 3
    return None, text


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
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batch-records", type=int, default=4096)
    args = parser.parse_args()

    print("building release binaries ...", flush=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-server", "-p", "shoal-core", "--bin", "shoal",
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
    with tempfile.TemporaryDirectory() as tmp:
        daemon = Daemon(Path(tmp) / "data", "--in-memory", "--memory-budget-mb", str(max(512, 3 * args.target_mb)))
        try:
            client = daemon.client()
            put_times = timed_doput(client, schema, batches, len(records), args.reps)
            table = f"events{args.reps - 1}"
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

    print("measuring the engine in process (shoal-bench, memory case, 1 thread) ...", flush=True)
    engine, *rest = in_process_ingest(args.target_mb, args.reps)
    print()
    print(f"{'measurement':45} {'median':>12}  {'detail':40} {'min-max'}")
    for row in rows:
        print(f"{row[0]:45} {row[1]:>12}  {row[2]:40} {row[3]}")
    if engine:
        ratio = (mb / put_median) / engine
        print(f"\nengine in process, 1 thread: {engine:.0f} MB/s; DoPut reaches {100 * ratio:.0f}% of it (target >= 60%)")
    else:
        print("\ncould not read the in-process figure from shoal-bench; its output was:\n" + rest[0])


if __name__ == "__main__":
    main()
