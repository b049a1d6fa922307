"""The remote store (issue 47), in one run against one S3 server (moto's, from PyPI, started
here as its own process) and the local filesystem backend:

1. DoPut of the GitHub events replicated to `--target-mb` into a table with durability
   `group_commit` on the local disk (no remote store): the baseline;
2. the same into a table with durability `remote` (acknowledged once in the store), per store;
3. the store's own PUT throughput for the same object sizes: every object the daemon wrote in
   (2) is written again by boto3 (as many at once as the daemon's mirror writes) and timed;
4. the daemon killed (SIGKILL) and a new one started on an EMPTY data directory with the same
   store: seconds until its first query is answered (restore + recovery + the query);
5. three queries on the restored table against the same queries on the original table, once
   both caught up their columnar tier (served from the local copy: the restore writes the
   table back into the data directory); each query's first run on the restored table (cold);
6. a daemon on another empty directory with `--local-cache-bytes` a fraction of the table
   (`--cache-fractions`, default a quarter, then twice the table): seconds to its first query (no page run restored: recovery and queries fetch the
   pages they read), the three queries cold (first run: pages fetched from the store) and warm
   (median) against the original table, and its page cache's counters.

    .venv/bin/python bench/remote.py [--target-mb 1000] [--stores s3,file] [--reps 5]

BENCH_UNSIGNED=true runs the daemon with AWS_UNSIGNED_PAYLOAD=true (no SHA-256 of each body for
its request signature; the manifests' CRC-32s still check every object); unset, the daemon's
default (the body signed).

Needs target/release/shoal (cargo build --release -p shoal-server), data/github/events.ndjson
(scripts/fetch-data.sh) and moto[server] and boto3 in the venv (requirements-test.txt).
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flight_bench import PSFS, REPO, drain_acks, replicated  # noqa: E402
from conftest import Daemon, action, query  # noqa: E402

BUCKET = "shoal-bench"
# The daemon's mirror writes this many objects at once (flight-server/src/remote/mirror.rs,
# CONCURRENT_PUTS); the store's own rate is measured the same way.
PUTS_AT_ONCE = 4
QUERIES = {
    "point lookup (PSF)": {"columns": ["id"], "filter": "repo.id = 115911530"},
    "count by type (PSF)": {"columns": ["id"], "filter": "type = 'IssuesEvent'"},
    "full scan": {"columns": ["id"], "filter": "payload.size > 3"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto():
    port = free_port()
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import boto3
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
    deadline = time.monotonic() + 30
    while True:
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:  # noqa: BLE001 - the server is starting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true"}
    if "BENCH_UNSIGNED" in os.environ:
        env["AWS_UNSIGNED_PAYLOAD"] = os.environ["BENCH_UNSIGNED"]
    return server, client, env


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(client, table, batches, records):
    start = time.perf_counter()
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), batches[0].schema)
    for batch in batches:
        writer.write_batch(batch)
    writer.done_writing()
    acked = drain_acks(reader)
    writer.close()
    assert acked == records, (acked, records)
    return time.perf_counter() - start


def create(client, table, durability):
    action(client, "create_table", {"name": table, "durability": durability})
    for psf in PSFS:
        action(client, "register_psf", {"table": table, **psf})


def settle(client, table):
    """Waits until the columnar tier caught up with the log (a restored table compacts its
    backlog first), so that queries compare like with like."""
    deadline = time.monotonic() + 300
    while action(client, "stats", {"table": table})["columnar"]["backlog_bytes"] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)


def query_times(client, table, reps):
    """Each query's first time (cold: after a restore, the decoded-column cache is empty),
    then the median of `reps` more."""
    out = {}
    for name, command in QUERIES.items():
        start = time.perf_counter()
        query(client, {"table": table, **command})
        first = time.perf_counter() - start
        times, rows = [], None
        for _ in range(reps):
            start = time.perf_counter()
            result, _, _ = query(client, {"table": table, **command})
            times.append(time.perf_counter() - start)
            rows = 0 if result is None else result.num_rows
        out[name] = (statistics.median(times), rows, first)
    return out


def replay_puts(s3, sizes):
    """Writes objects of `sizes` bytes, PUTS_AT_ONCE at once (as the daemon's mirror does); returns MB/s."""
    payload = os.urandom(max(sizes)) if sizes else b""

    def put(i_size):
        i, size = i_size
        s3.put_object(Bucket=BUCKET, Key=f"replay/{i:08d}", Body=payload[:size])

    start = time.perf_counter()
    with ThreadPoolExecutor(PUTS_AT_ONCE) as pool:
        list(pool.map(put, enumerate(sizes)))
    return sum(sizes) / 1e6 / (time.perf_counter() - start)


def object_sizes(store, s3, prefix, bucket_dir):
    if store == "s3":
        sizes = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            sizes += [o["Size"] for o in page.get("Contents", []) if "/data/" in o["Key"]]
        return sizes
    return [p.stat().st_size for p in bucket_dir.rglob("*") if p.is_file() and "/data/" in str(p)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-mb", type=int, default=1000)
    parser.add_argument("--stores", default="s3,file")
    parser.add_argument("--reps", type=int, default=5, help="query repetitions")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--cache-fractions", default="0.25,2", help="local_cache_bytes of step 6, as fractions of the table")
    args = parser.parse_args()
    os.environ.setdefault("SHOAL_BIN", str(REPO / "target" / "release" / "shoal"))
    lines = [line for line in (REPO / "data" / "github" / "events.ndjson").read_text().splitlines() if line.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    schema = pa.schema([("json", pa.string())])
    batches = [pa.record_batch([pa.array(records[i:i + 4096], pa.string())], schema=schema) for i in range(0, len(records), 4096)]
    mb = size / 1e6
    figures = {"target_mb": round(mb), "records": len(records)}
    moto, s3, s3_env = start_moto()
    try:
        with tempfile.TemporaryDirectory(dir=REPO / "target") as tmp:
            tmp = Path(tmp)
            local = Daemon(tmp / "local")
            create(local.client(), "events", "group_commit")
            seconds = load(local.client(), "events", batches, len(records))
            figures["group_commit_local_mb_s"] = round(mb / seconds, 1)
            print(f"group_commit, local disk: {mb / seconds:.1f} MB/s ({seconds:.1f} s)", flush=True)
            for store in args.stores.split(","):
                url = f"s3://{BUCKET}/{store}-run" if store == "s3" else f"file://{tmp / 'bucket'}"
                env = s3_env if store == "s3" else {}
                daemon = Daemon(tmp / f"{store}-a", "--remote", url, env=env)
                create(daemon.client(), "events", "remote")
                cpu_before = (cpu_seconds(daemon.process.pid), cpu_seconds(moto.pid), time.process_time())
                seconds = load(daemon.client(), "events", batches, len(records))
                cpu = (cpu_seconds(daemon.process.pid) - cpu_before[0], cpu_seconds(moto.pid) - cpu_before[1], time.process_time() - cpu_before[2])
                ingest = mb / seconds
                sizes = object_sizes(store, s3, f"{store}-run/", tmp / "bucket")
                row = {"remote_ingest_mb_s": round(ingest, 1), "objects": len(sizes),
                       # Cores busy during the load (of the machine's os.cpu_count()): the daemon,
                       # the S3 server, this client.
                       "cores_busy": {"shoal": round(cpu[0] / seconds, 2), "s3_server": round(cpu[1] / seconds, 2) if store == "s3" else None,
                                      "client": round(cpu[2] / seconds, 2), "of": os.cpu_count()},
                       "object_mb_median": round(statistics.median(sizes) / 1e6, 2) if sizes else 0}
                if store == "s3":
                    moto_before, wall = cpu_seconds(moto.pid), time.perf_counter()
                    put_rate = replay_puts(s3, sizes)
                    row["replay_cores_busy_s3_server"] = round((cpu_seconds(moto.pid) - moto_before) / (time.perf_counter() - wall), 2)
                    row["store_put_mb_s"] = round(put_rate, 1)
                    row["ingest_vs_put"] = round(ingest / put_rate, 2)
                row["ingest_vs_group_commit"] = round(ingest / figures["group_commit_local_mb_s"], 2)
                print(f"{store}: durability remote {ingest:.1f} MB/s ({seconds:.1f} s, {len(sizes)} objects); {row}", flush=True)
                # The node is lost: a new daemon on an empty directory, the same store.
                daemon.process.send_signal(signal.SIGKILL)
                daemon.process.wait(30)
                start = time.perf_counter()
                again = Daemon(tmp / f"{store}-b", "--remote", url, env=env)
                result, _, _ = query(again.client(), {"table": "events", **QUERIES["count by type (PSF)"]})
                row["first_query_after_empty_restart_s"] = round(time.perf_counter() - start, 2)
                restored = [line for line in again.log_lines if "table restored" in line]
                row["restore_log"] = restored[-1].split("INFO")[-1].strip() if restored else None
                print(f"{store}: first query on an empty directory after {row['first_query_after_empty_restart_s']} s ({row['restore_log']})", flush=True)
                settle(again.client(), "events")
                settle(local.client(), "events")
                mine = query_times(again.client(), "events", args.reps)
                base = query_times(local.client(), "events", args.reps)
                row["queries"] = {name: {"restored_ms": round(mine[name][0] * 1e3, 2), "local_ms": round(base[name][0] * 1e3, 2),
                                         "ratio": round(mine[name][0] / base[name][0], 2), "restored_first_ms": round(mine[name][2] * 1e3, 2),
                                         "rows": mine[name][1]}
                                  for name in QUERIES}
                assert all(mine[n][1] == base[n][1] for n in QUERIES), (mine, base)
                print(f"{store}: queries restored vs local: {row['queries']}", flush=True)
                again.stop()
                # 6. The local disk as a cache of a fraction of the table: another empty
                # directory each; the page runs stay in the store until read.
                row["cache"] = {}
                for fraction in (float(f) for f in args.cache_fractions.split(",")):
                    budget = max(int(size * fraction), 64 << 20)
                    start = time.perf_counter()
                    cached = Daemon(tmp / f"{store}-c{fraction}", "--remote", url, "--local-cache-bytes", str(budget), env=env)
                    query(cached.client(), {"table": "events", **QUERIES["count by type (PSF)"]})
                    first_query = round(time.perf_counter() - start, 2)
                    served = query_times(cached.client(), "events", args.reps)
                    assert all(served[n][1] == base[n][1] for n in QUERIES), (served, base)
                    row["cache"][str(fraction)] = {
                        "budget_bytes": budget,
                        "first_query_after_empty_restart_s": first_query,
                        "queries": {name: {"cached_ms": round(served[name][0] * 1e3, 2), "local_ms": round(base[name][0] * 1e3, 2),
                                           "ratio": round(served[name][0] / base[name][0], 2), "cold_first_ms": round(served[name][2] * 1e3, 2),
                                           "rows": served[name][1]}
                                    for name in QUERIES},
                        **action(cached.client(), "stats", {"table": "events"})["page_cache"],
                    }
                    print(f"{store}: with a cache of {budget >> 20} MiB ({fraction} of the table): {row['cache'][str(fraction)]}", flush=True)
                    cached.stop()
                figures[store] = row
            local.stop()
    finally:
        moto.send_signal(signal.SIGTERM)
        moto.wait(30)
    print(json.dumps(figures, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
