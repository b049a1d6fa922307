"""shoal against what users would pick instead, on the same machine in the same run:
ingestion MB/s and the latency of five queries of FishStore's GitHub workload, for

* shoal over Arrow Flight from pyarrow (release daemon, `serve --in-memory`): DoPut
  ingestion with the six GitHub PSFs registered first, queries by GetFlightInfo + DoGet
  (Q1 through the `count` aggregate);
* shoal in process: `shoal-bench --cases memory --threads 1` (ingestion only), and the
  ceilings of FishStore §8 from the same binary: `memcpy` of the bytes and the parser alone
  (simdjson On-Demand, the six fields of interest);
* Q6, shoal only: FishStore's recurring query (Fig. 16e) — the opened issues of the last
  `--q6-window-mb` of the log, run every `--q6-interval` s while a DoPut stream ingests at
  `--q6-rate-mb` MB/s, the predicate's PSF registered after the second run: each run's
  latency, rows and plan (full scans before the registration, index scans after it);
* time to queryable: from the start of a load until its first record / all of them can be
  queried (shoal: a DoPut stream, a record is queryable once its batch is acknowledged;
  DuckDB and PostgreSQL: the bulk load, and for PostgreSQL the indexes too);
* memory: the daemon's resident set and log size after ingestion, DuckDB's
  `duckdb_memory()`, PostgreSQL's table and index sizes;
* DuckDB: `read_json_auto` into a table (1 and 2 threads), a narrow load reading only the
  queried fields (1 and 2 threads), then Q1-Q5 on the `read_json_auto` table;
* PostgreSQL (when its server binaries are there or `apt-get install -y postgresql`
  succeeds within a time limit; otherwise skipped, and the output says so): `COPY` into
  an UNLOGGED `jsonb` column, expression / partial indexes matching the PSFs, Q1-Q5
  without and with them.

Spark's JSON reader is not run here: `bench/spark_bench.sh` measures it (in Spark local
mode, against shoal through the connector, daemon and embedded, on Q2-Q5 and a narrow Q3,
with and without schema inference and against a cached DataFrame); `--spark` runs it at the
same size and copies its output.

    scripts/bench-venv.sh    # creates .venv-bench (pyarrow, duckdb, matplotlib, psycopg)
    .venv-bench/bin/python bench/compare.py [--target-mb 200] [--reps 3] [--query-reps 5]

Writes bench/results/compare-results.md (the table), bench/results/compare-results.json and
bench/results/compare.png (the chart; `--out bench/results/compare-results-1g` writes
compare-1g.png) unless --out says elsewhere; `--chart-from bench/results/compare-results-1g.json`
redraws a run's chart. Every system is warmed the same way (one untimed run of each query
before the timed ones); ingestion reps start from an empty table each time; all figures use
time.perf_counter.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
from flight_bench import PSFS, drain_acks, in_process_ingest, replicated, timed_doput  # noqa: E402
from conftest import Daemon, action  # noqa: E402  (flight_bench put its folder on sys.path)

QUERIES = {
    "Q0": "(floor) actor.id = -1, nothing found: one Flight round trip",
    "Q1": "count of type = 'PushEvent'",
    "Q2": "id, actor.login of opened issues",
    "Q3": "all events of one actor.id",
    "Q4": "C++ pull requests (whole events)",
    "Q5": "payload.size > 5 (no PSF): id, actor.login",
    "Q7": "count per type (GROUP BY type, no filter)",
    "Q8": "id, actor.login of one hour of created_at (a TIMESTAMP range)",
}

# Copy k of the sample (22 minutes of events) is moved k * SHIFT_MINUTES later: 1 GB spans a day.
SHIFT_MINUTES = 30
START = datetime.datetime(2018, 1, 1, 11, tzinfo=datetime.timezone.utc)


def q8_hour(copies):
    """The hour Q8 selects: the middle of the data's span (about two copies of the sample)."""
    middle = START + datetime.timedelta(minutes=SHIFT_MINUTES * (copies // 2))
    low = middle.replace(minute=0)
    return low, low + datetime.timedelta(hours=1)


def q8_where(copies):
    low, high = q8_hour(copies)
    return f"created_at >= TIMESTAMP '{low:%Y-%m-%dT%H:%M:%SZ}' AND created_at < TIMESTAMP '{high:%Y-%m-%dT%H:%M:%SZ}'"


def timed(fn, reps, warm=True):
    """(median, min, max, last result) over `reps` timed runs, after one untimed run."""
    if warm:
        fn()
    times, result = [], None
    for _ in range(reps):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times), max(times), result


def ingest_figure(times, mb, detail=""):
    med = statistics.median(times)
    return {"kind": "ingest", "mbps": mb / med, "median_s": med, "min_s": min(times), "max_s": max(times),
            "mbps_min": mb / max(times), "mbps_max": mb / min(times), "detail": detail}


def query_figure(res, detail=""):
    med, low, high, rows = res
    return {"kind": "query", "median_s": med, "min_s": low, "max_s": high, "rows": rows, "detail": detail}


# ---------------------------------------------------------------------------------- shoal

def run_shoal(records, lines, mb, args, out):
    schema = pa.schema([("json", pa.string())])
    batches = [pa.record_batch([pa.array(records[i:i + args.batch_records], pa.string())], schema=schema)
               for i in range(0, len(records), args.batch_records)]
    os.environ["SHOAL_BIN"] = str(REPO / "target/release/shoal")
    actor = json.loads(lines[100])["actor"]["id"]
    with tempfile.TemporaryDirectory() as tmp:
        daemon = Daemon(Path(tmp) / "data", "--in-memory", "--memory-budget-mb", str(max(512, 3 * args.target_mb)))
        try:
            client = daemon.client()
            # Ingestion with the columnar tier off, then on (the default), the tables of
            # the last run queried: the compactor runs beside ingestion at a lowered priority.
            off_times = timed_doput(client, schema, batches, len(records), 1, prefix="nocolumnar",
                                    create_options={"columnar": {"enabled": False}})
            action(client, "drop_table", {"name": "nocolumnar0"})
            put_times = timed_doput(client, schema, batches, len(records), args.reps)
            out["shoal Flight"] = {"ingest": ingest_figure(put_times, mb, "DoPut, 1 stream, 6 PSFs, columnar tier on"),
                                   "ingest columnar off": ingest_figure(off_times, mb, "DoPut, 1 stream, 6 PSFs, columnar tier off")}
            table = f"events{args.reps - 1}"
            out["shoal Flight"]["columnar"] = wait_for_compaction(client, table, put_times[-1])

            def query(filt, columns=None, count=False, group_by=None):
                cmd = {"table": table}
                if filt:
                    cmd["filter"] = filt
                if group_by:
                    cmd["group_by"] = group_by
                    cmd["aggregates"] = [{"function": "count"}]
                elif count:
                    cmd["aggregates"] = [{"function": "count"}]
                elif columns:
                    cmd["columns"] = columns

                def run():
                    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd)))
                    if count and not group_by:
                        return sum(client.do_get(e.ticket).read_all().column(0)[0].as_py() for e in info.endpoints)
                    return sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)

                info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd)))
                plan = json.loads(info.app_metadata)["plan"]
                parts = [name for name, key in (("index", "index_scans"), ("columnar", "columnar_scans"),
                                                ("full", "full_scans")) if plan.get(key)]
                kind = " + ".join(parts) + " scan" if parts else "empty"
                return query_figure(timed(run, args.query_reps), kind)

            stats = action(client, "stats", {"table": table})
            out["shoal Flight"]["memory"] = {
                "rss_mb": process_rss_mb(daemon.process.pid),
                "detail": f"daemon RSS (its page ring is allocated up front: --memory-budget-mb "
                          f"{max(512, 3 * args.target_mb)}); log {(stats['tail_address'] - stats['begin_address']) / 1e6:.0f} MB, "
                          f"hash index {stats['index_bytes'] / 2**20:.0f} MiB"}
            out["shoal Flight"]["queryable"] = time_to_queryable(client, schema, batches, records)
            sel = ["id", "actor.login"]
            out["shoal Flight"]["Q1"] = query("type = 'PushEvent'", count=True)
            out["shoal Flight"]["Q2"] = query("type = 'IssuesEvent' AND payload.action = 'opened'", sel)
            out["shoal Flight"]["Q3"] = query(f"actor.id = {actor}")
            out["shoal Flight"]["Q4"] = query(
                "type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'")
            out["shoal Flight"]["Q5"] = query("payload.size > 5", sel)
            out["shoal Flight"]["Q7"] = query(None, group_by=["type"])
            # Q8: a timestamp range PSF of one-hour buckets, registered after the load (its
            # backfill indexes the table before the timed runs).
            action(client, "register_psf", {"table": table, "name": "hour", "kind": "range", "field": "created_at",
                                            "type": "timestamp", "bucket": "1h"})
            while not all((p["backfill"] or {}).get("done", True)
                          for p in action(client, "list_psfs", {"table": table}) if p["active"]):
                time.sleep(0.02)
            out["shoal Flight"]["Q8"] = query(q8_where(args.copies), sel)
            out["shoal Flight"]["backfill"] = backfill(client, schema, batches, len(records), actor, args, table, daemon.client())
            # Not one of the workload's queries: the cost of a Flight query that finds nothing
            # along a PSF chain (GetFlightInfo + DoGet round trips, planning), to read the
            # latencies above against.
            out["shoal Flight"]["Q0"] = query("actor.id = -1", sel)

            # One call (the query command as the DoGet ticket, no GetFlightInfo), and whole
            # events as ingested ("output": "json") instead of ~740 nested Arrow columns.
            def one_call(filt, columns=None, as_json=False, count=False):
                cmd = {"table": table, "filter": filt}
                if as_json:
                    cmd["output"] = "json"
                elif count:
                    cmd["aggregates"] = [{"function": "count"}]
                elif columns:
                    cmd["columns"] = columns
                ticket = flight.Ticket(json.dumps(cmd).encode())
                kind = "one DoGet, " + ("output json" if as_json else "Arrow columns")
                if count:
                    return query_figure(timed(lambda: client.do_get(ticket).read_all().column(0)[0].as_py(),
                                              args.query_reps), "one DoGet, count")
                return query_figure(timed(lambda: client.do_get(ticket).read_all().num_rows, args.query_reps), kind)

            out["shoal one call"] = {
                "Q0": one_call("actor.id = -1", sel),
                "Q1": one_call("type = 'PushEvent'", count=True),
                "Q5": one_call("payload.size > 5", sel),
                "Q2": one_call("type = 'IssuesEvent' AND payload.action = 'opened'", sel),
                "Q3": one_call(f"actor.id = {actor}", as_json=True),
                "Q8": one_call(q8_where(args.copies), sel),
                "Q4": one_call("type = 'PullRequestEvent' AND payload.pull_request.head.repo.language = 'C++'", as_json=True),
            }
            print("  Q6: the recurring query while ingestion runs ...", flush=True)
            out["Q6"] = recurring_query(client, schema, batches, mb, args)
        finally:
            daemon.stop()

    print("  ceilings (shoal-bench --cases memcpy,parser --threads 1) ...", flush=True)
    text = subprocess.run([str(REPO / "target/release/shoal-bench"), "--cases", "memcpy,parser", "--threads", "1",
                           "--target-mb", str(args.target_mb), "--reps", str(args.reps)],
                          cwd=REPO, check=True, capture_output=True, text=True).stdout
    for case, name, detail in (("memcpy", "ceiling: memcpy", "copying the record bytes"),
                               (r"parser \(6 fields of interest\)", "ceiling: parser alone",
                                "simdjson On-Demand, 6 fields of interest, full validation")):
        m = re.search(case + r"\s+1\s+([\d.]+)\s+\(([\d.]+)\D+([\d.]+)", text)
        if m:
            med, low, high = (float(x) for x in m.groups())
            out[name] = {"ingest": {"kind": "ingest", "mbps": med, "mbps_min": low, "mbps_max": high, "detail": detail}}
    print("  shoal in process (shoal-bench --cases memory --threads 1) ...", flush=True)
    med, *rest = in_process_ingest(args.target_mb, args.reps)
    if med is not None:
        low, high = rest
        out["shoal in process"] = {"ingest": {"kind": "ingest", "mbps": med, "mbps_min": low, "mbps_max": high,
                                              "detail": "shoal-bench memory, 1 thread, 6 PSFs"}}
    else:
        print("could not parse shoal-bench's output:\n" + rest[0])
    return actor


def ingest_beside_backfill(client, poller, schema, batches, table, reps=3):
    """Ingestion while a backfill runs (target: ≥ 0.8× its rate alone): a third of the batches
    put into a fresh table by one DoPut stream, alone, then while the six GitHub PSFs —
    registered afresh on `table` just before (the previous ones deregistered) — backfill it,
    alternated `reps` times. `poller` (a second client) watches the backfill to measure how
    much of the ingestion it overlapped. Returns each run's rates (MB/s of batches) and overlaps."""
    part = batches[: max(1, len(batches) // 3)]
    mb = sum(b.nbytes for b in part) / 1e6
    registered = []

    def ingest(name):
        action(client, "create_table", {"name": name})
        start = time.perf_counter()
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(name), schema)
        for batch in part:
            writer.write_batch(batch)
        writer.done_writing()
        drain_acks(reader)
        writer.close()
        elapsed = time.perf_counter() - start
        action(client, "drop_table", {"name": name})
        return elapsed

    alone, beside, overlaps = [], [], []
    for rep in range(reps):
        alone.append(mb / ingest("ingest_alone"))
        for name in registered:
            action(client, "deregister_psf", {"table": table, "name": name})
        registered = [f"{psf['name']}_{rep}" for psf in PSFS]
        for psf, name in zip(PSFS, registered):
            action(client, "register_psf", {"table": table, **psf, "name": name})
        start = time.perf_counter()
        done = {}

        def watch():
            while not all(p["backfill"] and p["backfill"]["done"]
                          for p in action(poller, "list_psfs", {"table": table}) if p["name"] in registered):
                time.sleep(0.01)
            done["at"] = time.perf_counter()

        watcher = threading.Thread(target=watch)
        watcher.start()
        elapsed = ingest("ingest_beside")
        watcher.join()
        beside.append(mb / elapsed)
        overlaps.append(min(1.0, (done["at"] - start) / elapsed))
    for name in registered:
        action(client, "deregister_psf", {"table": table, "name": name})
    return {"mb": mb, "alone_mb_s": alone, "beside_mb_s": beside, "overlap": overlaps}


def backfill(client, schema, batches, records, actor, args, loaded_after, poller):
    """PSF backfill (docs/design.md, "PSF backfill"): the records loaded into a table without
    PSFs, then the six GitHub PSFs registered — their backfills index what is there, in one
    pass over the log on the table's backfill thread (registered together, they start at the
    same address). Returns the wall time until all six are done, each PSF's rate (log bytes
    per second of the backfill thread: one core), and Q3 over
    this table against Q3 over `loaded_after` (the PSFs registered before the records)."""
    table = "loaded_before"
    action(client, "create_table", {"name": table})
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
    for batch in batches:
        writer.write_batch(batch)
    writer.done_writing()
    assert drain_acks(reader) == records
    writer.close()
    stats = action(client, "stats", {"table": table})
    log_bytes = stats["tail_address"] - stats["begin_address"]
    start = time.perf_counter()
    for psf in PSFS:
        action(client, "register_psf", {"table": table, **psf})
    while True:
        psfs = [p for p in action(client, "list_psfs", {"table": table}) if p["active"]]
        if all(p["backfill"] and p["backfill"]["done"] for p in psfs):
            break
        time.sleep(0.02)
    wall = time.perf_counter() - start
    rates = [p["backfill"]["bytes_per_second"] / 1e6 for p in psfs]

    def q3(name):
        command = json.dumps({"table": name, "filter": f"actor.id = {actor}"})

        def run():
            info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
            return sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)

        info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
        plan = json.loads(info.app_metadata)["plan"]
        return timed(run, args.query_reps), [(s["psfs"], s["from"]) for s in plan["index_scans"]], len(plan["full_scans"])

    (before, before_plan, before_full), (after, _, _) = q3(table), q3(loaded_after)
    beside = ingest_beside_backfill(client, poller, schema, batches, table)
    action(client, "drop_table", {"name": table})
    return {"log_mb": log_bytes / 1e6, "wall_s": wall, "psfs": len(psfs), "per_psf_mb_s": statistics.median(rates),
            "per_psf_mb_s_min": min(rates), "per_psf_mb_s_max": max(rates),
            "q3_before_s": before[0], "q3_after_s": after[0], "q3_rows": (before[3], after[3]),
            "q3_before_plan": f"index scans {before_plan}, {before_full} full scans", "ingest_beside": beside}


def process_rss_mb(pid):
    """Resident set of process `pid` in MB (10^6 bytes), from /proc; None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None


def wait_for_compaction(client, table, put_seconds):
    """Waits until the compactor has covered every flushed page of `table`; returns its
    figures: catch-up time after the load ended, sizes, compaction rate per core."""
    start = time.perf_counter()
    while True:
        stats = action(client, "stats", {"table": table})["columnar"]
        if stats["backlog_bytes"] == 0 and stats["files"] > 0:
            break
        if time.perf_counter() - start > 600:
            raise RuntimeError(f"compaction did not catch up in 600 s: {stats}")
        time.sleep(0.05)
    caught_up = time.perf_counter() - start
    print(f"  columnar: caught up {caught_up:.1f} s after the load; {stats}", flush=True)
    return {"kind": "columnar", "catch_up_s": caught_up, "load_s": put_seconds, "files": stats["files"],
            "json_mb": stats["json_bytes"] / 1e6, "parquet_mb": stats["parquet_bytes"] / 1e6,
            "parquet_to_json": stats["parquet_bytes"] / max(1, stats["json_bytes"]),
            "compaction_mbps_per_core": stats["compacted_json_bytes"] / 1e6 / max(1e-9, stats["compaction_ms"] / 1e3),
            "compaction_mbps_per_cpu_second": stats["compacted_json_bytes"] / 1e6 / max(1e-9, stats.get("compaction_cpu_ms", 0) / 1e3),
            "detail": "compactor: 1 thread per table, nice 10, 64 MiB files, zstd"}


def time_to_queryable(client, schema, batches, records):
    """A fresh table with the GitHub PSFs, one DoPut stream of `batches`: seconds from the
    start until the first batch is acknowledged and its first record is found by a query
    (`id = ...`, along the `id` PSF), and until the last batch is acknowledged."""
    action(client, "create_table", {"name": "fresh"})
    for psf in PSFS:
        action(client, "register_psf", {"table": "fresh", **psf})
    first_id = json.loads(records[0])["id"]
    start = time.perf_counter()
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("fresh"), schema)
    first = None
    acked = 0
    for batch in batches:
        writer.write_batch(batch)
        if first is None:
            acked += json.loads(reader.read().to_pybytes())["records"]
            cmd = {"table": "fresh", "filter": f"id = '{first_id}'", "columns": ["id"]}
            info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd)))
            found = sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
            first = time.perf_counter() - start
            assert found >= 1, f"the first record ({first_id}) was acknowledged but not found"
    writer.done_writing()
    acked += drain_acks(reader)
    writer.close()
    last = time.perf_counter() - start
    assert acked == len(records), (acked, len(records))
    action(client, "drop_table", {"name": "fresh"})
    return {"first_s": first, "all_s": last,
            "detail": "DoPut stream; a record is queryable once its batch is acknowledged (checked by a query)"}


def recurring_query(client, schema, batches, mb, args):
    """FishStore Fig. 16(e): the opened issues among the last `--q6-window-mb` MB of the log,
    queried every `--q6-interval` s while a DoPut stream ingests at `--q6-rate-mb` MB/s into a
    fresh table without PSFs; the predicate PSF is registered after the second run."""
    table = "live"
    action(client, "create_table", {"name": table})
    psf = next(p for p in PSFS if p["name"] == "opened_issues")
    done = threading.Event()
    errors = []
    window = int(args.q6_window_mb * 1e6)

    # Batches of 512 records (~1 MB), so that the rate is steady at the queries' scale.
    small = [b.slice(i, 512) for b in batches for i in range(0, b.num_rows, 512)]

    def ingest():
        try:
            per_batch = mb / len(small)
            writer, reader = client.do_put(flight.FlightDescriptor.for_path(table), schema)
            start = time.perf_counter()
            for i, batch in enumerate(small):
                wait = start + (i + 1) * per_batch / args.q6_rate_mb - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                writer.write_batch(batch)
                reader.read()
            writer.done_writing()
            writer.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=ingest)
    thread.start()
    runs = []
    registered_at = None
    run = 0
    while not done.is_set():
        time.sleep(args.q6_interval)
        tail = action(client, "stats", {"table": table})["tail_address"]
        if tail <= 64:
            continue
        cmd = {"table": table, "filter": psf["expr"], "columns": ["id", "actor.login"],
               "from_address": max(0, tail - window), "to_address": tail}
        start = time.perf_counter()
        info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(cmd)))
        rows = sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
        took = time.perf_counter() - start
        plan = json.loads(info.app_metadata)["plan"]
        indexed = sum(s["to"] - s["from"] for s in plan["index_scans"])
        scanned = sum(s["to"] - s["from"] for s in plan["full_scans"])
        runs.append({"run": run + 1, "tail_mb": tail / 1e6, "ms": took * 1e3, "rows": rows,
                     "index_mb": indexed / 1e6, "full_mb": scanned / 1e6})
        run += 1
        if run == 2:
            registered_at = action(client, "register_psf", {"table": table, **psf}).get("safe_register_address")
    thread.join()
    action(client, "drop_table", {"name": table})
    if errors:
        raise errors[0]
    return {"runs": runs, "registered_at": registered_at, "window_mb": args.q6_window_mb,
            "rate_mb": args.q6_rate_mb, "interval_s": args.q6_interval}


# --------------------------------------------------------------------------------- DuckDB

NARROW_COLUMNS = ("{id: 'VARCHAR', type: 'VARCHAR', actor: 'STRUCT(id BIGINT, login VARCHAR)', "
                  "repo: 'STRUCT(id BIGINT)', payload: 'STRUCT(action VARCHAR, size BIGINT, "
                  "pull_request STRUCT(head STRUCT(repo STRUCT(language VARCHAR))))'}")


def run_duckdb(path, mb, actor, args, out):
    import duckdb

    def load(sql, threads):
        times = []
        for _ in range(args.reps):
            con = duckdb.connect()
            con.execute(f"SET threads = {threads}")
            start = time.perf_counter()
            con.execute(sql)
            times.append(time.perf_counter() - start)
            con.close()
        return times

    full = f"CREATE TABLE events AS SELECT * FROM read_json_auto('{path}')"
    narrow = ("CREATE TABLE narrow AS SELECT id, type, actor.id AS actor_id, actor.login AS actor_login, "
              "repo.id AS repo_id, payload.action AS action, payload.pull_request.head.repo.language AS language, "
              f"payload.size AS size FROM read_json('{path}', format = 'newline_delimited', columns = {NARROW_COLUMNS})")
    for threads in (1, 2):
        print(f"  DuckDB read_json_auto, {threads} thread(s) ...", flush=True)
        out[f"DuckDB read_json_auto {threads}T"] = {"ingest": ingest_figure(load(full, threads), mb,
                                                                               "whole records, inferred schema")}
        print(f"  DuckDB narrow load, {threads} thread(s) ...", flush=True)
        out[f"DuckDB narrow {threads}T"] = {"ingest": ingest_figure(load(narrow, threads), mb,
                                                                     "8 queried fields, given schema")}
    con = duckdb.connect()  # default threads (all cores) for the queries, as the daemon
    start = time.perf_counter()
    con.execute(full)
    loaded = time.perf_counter() - start
    sys_ = out.setdefault("DuckDB (read_json_auto table)", {})
    sys_["queryable"] = {"first_s": loaded, "all_s": loaded,
                         "detail": "CREATE TABLE AS read_json_auto, default threads: queryable when the load ends"}
    try:
        used = con.execute("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()[0]
        sys_["memory"] = {"rss_mb": used / 1e6, "detail": "duckdb_memory() after the load (in-memory database)"}
    except duckdb.Error as e:
        sys_["memory"] = {"rss_mb": None, "detail": f"duckdb_memory() not available: {e}"}

    def query(sql, count=False):
        def run():
            if count:
                return con.execute(sql).fetchall()[0][0]
            rel = con.sql(sql)
            fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
            return fetch().num_rows
        return query_figure(timed(run, args.query_reps), "in-memory table, default threads")

    sys_["Q1"] = query("SELECT count(*) FROM events WHERE type = 'PushEvent'", count=True)
    sys_["Q2"] = query("SELECT id, actor.login FROM events WHERE type = 'IssuesEvent' AND payload.action = 'opened'")
    sys_["Q3"] = query(f"SELECT * FROM events WHERE actor.id = {actor}")
    sys_["Q4"] = query("SELECT * FROM events WHERE type = 'PullRequestEvent' "
                       "AND payload.pull_request.head.repo.language = 'C++'")
    sys_["Q5"] = query("SELECT id, actor.login FROM events WHERE payload.size > 5")
    sys_["Q7"] = query("SELECT type, count(*) FROM events GROUP BY type")
    sys_["Q8"] = query(f"SELECT id, actor.login FROM events WHERE {q8_where(args.copies)}")
    con.close()


# ----------------------------------------------------------------------------- PostgreSQL

def postgres_bin():
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def ensure_postgres(limit_s):
    """The PostgreSQL bin directory, installing the Debian package if needed; or (None, why)."""
    if postgres_bin():
        return postgres_bin(), None
    if shutil.which("apt-get") is None:
        return None, "no apt-get on this machine"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit_s)
            if r.returncode != 0:
                return None, f"`{' '.join(cmd)}` failed: {r.stderr.strip().splitlines()[-1:]}"
    except subprocess.TimeoutExpired:
        return None, f"`apt-get install -y postgresql` did not finish in {limit_s} s"
    except PermissionError as e:
        return None, f"cannot run apt-get: {e}"
    return (postgres_bin(), None) if postgres_bin() else (None, "installed, but no initdb under /usr/lib/postgresql")


PG_INDEXES = [
    "CREATE INDEX ev_id ON events ((doc->>'id'))",
    "CREATE INDEX ev_actor ON events ((doc->'actor'->>'id'))",
    "CREATE INDEX ev_repo ON events ((doc->'repo'->>'id'))",
    "CREATE INDEX ev_type ON events ((doc->>'type'))",
    "CREATE INDEX ev_opened ON events ((doc->>'id')) WHERE doc->>'type' = 'IssuesEvent' "
    "AND doc->'payload'->>'action' = 'opened'",
    "CREATE INDEX ev_cpp ON events ((doc->>'id')) WHERE doc->>'type' = 'PullRequestEvent' "
    "AND doc->'payload'->'pull_request'->'head'->'repo'->>'language' = 'C++'",
]


def run_postgres(path, mb, actor, args, out, skipped):
    bindir, why = ensure_postgres(args.pg_install_timeout)
    if bindir is None:
        skipped.append(("PostgreSQL", why))
        print(f"  PostgreSQL SKIPPED: {why}", flush=True)
        return
    import psycopg
    user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="shoal-cmp-pg-"))
    os.chmod(root, 0o755)
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    as_pg = ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []
    if as_pg:
        shutil.chown(sock, user)
        shutil.chown(root, user)
    port = str(__import__("conftest").free_port())
    # Durability off on both sides: shoal runs --in-memory, so PostgreSQL gets an UNLOGGED
    # table, fsync off and shared_buffers large enough for the data.
    opts = (f"-p {port} -k {sock} -c listen_addresses='' -c fsync=off -c synchronous_commit=off "
            f"-c full_page_writes=off -c shared_buffers={max(256, 3 * args.target_mb)}MB -c max_wal_size=4GB "
            f"-c maintenance_work_mem=512MB -c work_mem=64MB")
    subprocess.run(as_pg + [str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "--no-sync"],
                   check=True, capture_output=True)
    subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w",
                            "start"], check=True, capture_output=True)
    try:
        con = psycopg.connect(host=str(sock), port=port, user=user, dbname="postgres", autocommit=True)
        copy = (f"COPY events (doc) FROM '{path}' WITH (FORMAT csv, QUOTE E'\\x01', DELIMITER E'\\x02')")
        copy_times, index_times = [], []
        for rep in range(args.reps):
            print(f"  PostgreSQL COPY + indexes, rep {rep + 1} ...", flush=True)
            con.execute("DROP TABLE IF EXISTS events")
            con.execute("CREATE UNLOGGED TABLE events (doc jsonb)")
            start = time.perf_counter()
            con.execute(copy)
            copy_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            for sql in PG_INDEXES:
                con.execute(sql)
            index_times.append(time.perf_counter() - start)
        both = [c + i for c, i in zip(copy_times, index_times)]
        out["PostgreSQL no index"] = {"ingest": ingest_figure(copy_times, mb, "COPY into UNLOGGED jsonb")}
        out["PostgreSQL indexed"] = {"ingest": ingest_figure(both, mb, "COPY + 6 expression/partial indexes")}
        out["PostgreSQL no index"]["queryable"] = {
            "first_s": statistics.median(copy_times), "all_s": statistics.median(copy_times),
            "detail": "COPY: queryable when it commits (by a sequential scan)"}
        out["PostgreSQL indexed"]["queryable"] = {
            "first_s": statistics.median(both), "all_s": statistics.median(both),
            "detail": "COPY, then the 6 indexes (each query is only fast once its index is built)"}
        table_mb = con.execute("SELECT pg_table_size('events')").fetchone()[0] / 1e6
        index_mb = con.execute("SELECT pg_indexes_size('events')").fetchone()[0] / 1e6
        out["PostgreSQL indexed"]["memory"] = {
            "rss_mb": table_mb + index_mb,
            "detail": f"table {table_mb:.0f} MB (jsonb, TOAST included) + 6 indexes {index_mb:.0f} MB, on disk / in shared_buffers"}

        def queries(name, label):
            con.execute("VACUUM ANALYZE events")

            def q(sql, count=False):
                def run():
                    if count:
                        return con.execute(sql).fetchone()[0]
                    return len(con.execute(sql).fetchall())
                plan = "\n".join(r[0] for r in con.execute("EXPLAIN " + sql).fetchall())
                kind = "index" if "Index" in plan else "seq scan"
                return query_figure(timed(run, args.query_reps), f"{label}: {kind}")

            s = out[name]
            s["Q1"] = q("SELECT count(*) FROM events WHERE doc->>'type' = 'PushEvent'", count=True)
            s["Q2"] = q("SELECT doc->>'id', doc->'actor'->>'login' FROM events WHERE doc->>'type' = 'IssuesEvent' "
                        "AND doc->'payload'->>'action' = 'opened'")
            s["Q3"] = q(f"SELECT doc::text FROM events WHERE doc->'actor'->>'id' = '{actor}'")
            s["Q4"] = q("SELECT doc::text FROM events WHERE doc->>'type' = 'PullRequestEvent' "
                        "AND doc->'payload'->'pull_request'->'head'->'repo'->>'language' = 'C++'")
            s["Q5"] = q("SELECT doc->>'id', doc->'actor'->>'login' FROM events "
                        "WHERE (doc->'payload'->>'size')::bigint > 5")
            s["Q7"] = q("SELECT doc->>'type', count(*) FROM events GROUP BY 1")
            low, high = q8_hour(args.copies)
            s["Q8"] = q("SELECT doc->>'id', doc->'actor'->>'login' FROM events "
                        f"WHERE (doc->>'created_at')::timestamptz >= '{low.isoformat()}' "
                        f"AND (doc->>'created_at')::timestamptz < '{high.isoformat()}'")

        print("  PostgreSQL queries with the indexes ...", flush=True)
        queries("PostgreSQL indexed", "indexed")
        for sql in PG_INDEXES:
            con.execute("DROP INDEX " + sql.split()[2])
        print("  PostgreSQL queries without indexes ...", flush=True)
        queries("PostgreSQL no index", "no index")
        con.close()
    finally:
        subprocess.run(as_pg + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------- report

def ms(s):
    return f"{s * 1e3:.1f}"


def report(out, meta, skipped, path_md, path_png, spark_text=None):
    lines = [f"Machine: {meta['machine']}", f"Data: {meta['data']}", f"Command: `{meta['command']}`", ""]
    base_ingest = out.get("shoal in process", {}).get("ingest")
    lines += ["### Ingestion (MB/s of JSON text and records/s; median of the reps, min-max; one core unless the "
              "name says 2T)", "",
              "| system | MB/s | min-max | records/s | shoal in process / this | detail |", "|---|---:|---:|---:|---:|---|"]
    for name, figs in out.items():
        f = figs.get("ingest")
        if not f:
            continue
        ratio = f"{base_ingest['mbps'] / f['mbps']:.2f}x" if base_ingest else "-"
        per_s = f"{f['mbps'] * meta['records'] / meta['mb']:,.0f}"
        lines.append(f"| {name} | {f['mbps']:.0f} | {f['mbps_min']:.0f}-{f['mbps_max']:.0f} | {per_s} | {ratio} | "
                     f"{f['detail']} |")
    shoal = out.get("shoal Flight", {})
    col, on, off = shoal.get("columnar"), shoal.get("ingest"), shoal.get("ingest columnar off")
    if col and on and off:
        lines += ["", "### Columnar tier", "",
                  "| figure | value |", "|---|---:|",
                  f"| DoPut MB/s, tier off | {off['mbps']:.0f} |",
                  f"| DoPut MB/s, tier on (compactor beside ingestion) | {on['mbps']:.0f} ({on['mbps'] / off['mbps']:.2f}x off) |",
                  f"| compaction caught up after the load | {col['catch_up_s']:.1f} s (load took {col['load_s']:.1f} s) |",
                  f"| compaction rate, MB of JSON per second of compactor time (1 thread) | {col['compaction_mbps_per_core']:.0f} |",
                  f"| Parquet / JSON bytes | {col['parquet_mb']:.0f} MB / {col['json_mb']:.0f} MB = {100 * col['parquet_to_json']:.1f} % |",
                  f"| files | {col['files']} |"]
    timed_systems = [(n, f["queryable"]) for n, f in out.items() if "queryable" in f]
    if timed_systems:
        lines += ["", "### Time to queryable (s from the start of the load)", "",
                  "| system | first record | all records | how |", "|---|---:|---:|---|"]
        lines += [f"| {n} | {q['first_s']:.3f} | {q['all_s']:.2f} | {q['detail']} |" for n, q in timed_systems]
    memory = [(n, f["memory"]) for n, f in out.items() if "memory" in f]
    if memory:
        lines += ["", f"### Memory after ingestion ({meta['mb']:.0f} MB of JSON)", "", "| system | MB | what |",
                  "|---|---:|---|"]
        lines += [f"| {n} | {m['rss_mb']:.0f} | {m['detail']} |" if m["rss_mb"] is not None else f"| {n} | - | {m['detail']} |"
                  for n, m in memory]
    lines += ["", f"### Queries (ms; median of {meta['query_reps']} after one warm-up run, min-max; "
              "ratio = this / shoal Flight, > 1 means shoal is faster)", "",
              "| query | system | median ms | min-max ms | rows | vs shoal | plan |", "|---|---|---:|---:|---:|---:|---|"]
    base = out.get("shoal Flight", {})
    for q, text in QUERIES.items():
        for name, figs in out.items():
            f = figs.get(q)
            if not f:
                continue
            ratio = f"{f['median_s'] / base[q]['median_s']:.2f}" if q in base else "-"
            rows = f["rows"]
            if q in base and rows != base[q]["rows"]:
                rows = f"{rows} (shoal: {base[q]['rows']}!)"
            lines.append(f"| {q} {text} | {name} | {ms(f['median_s'])} | {ms(f['min_s'])}-{ms(f['max_s'])} | "
                         f"{rows} | {ratio} | {f['detail']} |")
    fill = out.get("shoal Flight", {}).get("backfill")
    if fill:
        lines += ["", "### PSF backfill (the six GitHub PSFs registered over a loaded table)", "",
                  "| figure | value |", "|---|---:|",
                  f"| log indexed | {fill['log_mb']:.0f} MB per PSF |",
                  f"| all six backfilled (wall; one thread, one pass over the log for the six) | {fill['wall_s']:.2f} s = "
                  f"{fill['log_mb'] * fill['psfs'] / fill['wall_s']:.0f} MB/s of log |",
                  f"| one PSF's rate, MB of log per second of the backfill thread (median, min-max) | "
                  f"{fill['per_psf_mb_s']:.0f} ({fill['per_psf_mb_s_min']:.0f}-{fill['per_psf_mb_s_max']:.0f}) |",
                  f"| Q3 over data loaded before registration (backfilled) | {ms(fill['q3_before_s'])} ms, "
                  f"{fill['q3_rows'][0]} rows; {fill['q3_before_plan']} |",
                  f"| Q3 over data loaded after registration (chains) | {ms(fill['q3_after_s'])} ms, {fill['q3_rows'][1]} rows |",
                  f"| before / after | {fill['q3_before_s'] / fill['q3_after_s']:.2f}x |"]
        side = fill.get("ingest_beside")
        if side:
            ratios = [b / a for a, b in zip(side["alone_mb_s"], side["beside_mb_s"])]
            lines += [f"| DoPut of {side['mb']:.0f} MB into another table, alone (MB/s per run) | "
                      f"{', '.join(f'{r:.0f}' for r in side['alone_mb_s'])} |",
                      f"| the same while the six PSFs backfill (MB/s per run; share of the DoPut the backfill ran) | "
                      f"{', '.join(f'{r:.0f} ({o:.0%})' for r, o in zip(side['beside_mb_s'], side['overlap']))} |",
                      f"| beside / alone (median of the runs; target >= 0.8) | {statistics.median(ratios):.2f}x "
                      f"({min(ratios):.2f}-{max(ratios):.2f}) |"]
    q6 = out.get("Q6")
    if q6:
        lines += ["", f"### Q6: the recurring query (FishStore Fig. 16e), shoal over Flight", "",
                  f"Opened issues (`id`, `actor.login`) among the last {q6['window_mb']:g} MB of the log, every "
                  f"{q6['interval_s']:g} s while one DoPut stream ingests at {q6['rate_mb']:g} MB/s into a table without "
                  f"PSFs; the predicate's PSF registered after run 2 (safe register address "
                  f"{q6['registered_at']}).", "",
                  "| run | log tail MB | ms | rows | index-scanned MB | full-scanned MB |", "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['run']} | {r['tail_mb']:.0f} | {r['ms']:.1f} | {r['rows']} | {r['index_mb']:.1f} | "
                  f"{r['full_mb']:.1f} |" for r in q6["runs"]]
    if spark_text:
        lines += ["", "### Spark (bench/spark_bench.sh, same data size; Spark SQL in local[2] over shoal, spark.read.json and a cached DataFrame)", "",
                  "```", spark_text.strip(), "```"]
    if skipped:
        lines += ["", "### Skipped", ""] + [f"- **{n}**: {why}" for n, why in skipped]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    path_md.write_text(text)
    chart(out, meta, path_png)


def chart_path(results):
    """The chart beside a results file: compare-results[-X].json gives compare[-X].png."""
    results = Path(results)
    return results.with_name(results.stem.replace("compare-results", "compare", 1) + ".png")


def chart(out, meta, path_png):
    """Ingestion and query latencies of every system, as bars (log scales)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw={"width_ratios": [1, 1.6]})
    names = [n for n, f in out.items() if "ingest" in f]
    a.barh(names, [out[n]["ingest"]["mbps"] for n in names],
           color=["tab:gray" if n.startswith("ceiling") else "tab:blue" for n in names])
    a.invert_yaxis()
    a.set_xscale("log")
    a.set_xlabel("ingest MB/s, one core unless 2T (log; higher is better; grey: ceilings)")
    a.set_title("Ingestion")
    qnames = [n for n, f in out.items() if any(q in f for q in QUERIES)]
    queries = [q for q in QUERIES if any(q in out[n] for n in qnames)]  # those the run measured
    width = 0.8 / max(1, len(qnames))
    for i, n in enumerate(qnames):
        xs = [j + i * width for j, q in enumerate(queries) if q in out[n]]
        ys = [out[n][q]["median_s"] * 1e3 for q in queries if q in out[n]]
        b.bar(xs, ys, width, label=n)
    b.set_xticks([j + 0.4 - width / 2 for j in range(len(queries))], queries)
    b.set_yscale("log")
    b.set_ylabel("median latency ms (log; lower is better)")
    b.set_title("Queries")
    b.legend(fontsize=8)
    fig.suptitle(f"shoal vs DuckDB / PostgreSQL, {meta['data']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path_png, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-mb", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3, help="ingestion repetitions")
    parser.add_argument("--query-reps", type=int, default=5)
    parser.add_argument("--batch-records", type=int, default=4096)
    parser.add_argument("--systems", default="shoal,duckdb,postgres")
    parser.add_argument("--pg-install-timeout", type=int, default=300)
    parser.add_argument("--spark", action="store_true",
                        help="also run bench/spark_bench.sh (Spark SQL over shoal through the connector vs spark.read.json "
                             "and a cached DataFrame) and copy its output into the results")
    parser.add_argument("--spark-timeout", type=int, default=3600,
                        help="s; bench/spark_bench.sh takes ~25 min at 1 GB (schema inference per run)")
    parser.add_argument("--no-build", action="store_true", help="use the existing target/release binaries")
    parser.add_argument("--q6-window-mb", type=float, default=20, help="Q6: the query covers the last N MB of the log")
    parser.add_argument("--q6-rate-mb", type=float, default=20, help="Q6: ingestion rate during the query runs, MB/s")
    parser.add_argument("--q6-interval", type=float, default=0.5, help="Q6: seconds between query runs")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "compare-results"))
    parser.add_argument("--chart-from", metavar="RESULTS_JSON",
                        help="only draw the chart of an earlier run's results (compare-results-X.json gives "
                             "compare-X.png beside it) and exit")
    args = parser.parse_args()
    if args.chart_from:
        saved = json.loads(Path(args.chart_from).read_text())
        chart(saved["results"], saved["meta"], chart_path(args.chart_from))
        print(f"wrote {chart_path(args.chart_from)}")
        return 0
    args.query_reps = max(5, args.query_reps)
    systems = set(args.systems.split(","))

    if not args.no_build:
        print("building release binaries ...", flush=True)
        subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-server", "-p", "shoal-bench",
                        "--bin", "shoal", "--bin", "shoal-bench"], cwd=REPO, check=True)
        if args.spark:  # bench/spark_bench.sh's embedded mode loads target/release/libshoal_jni.so
            subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-jni"], cwd=REPO, check=True)
    lines = [l for l in (REPO / "data/github/events.ndjson").read_text(encoding="utf-8").splitlines() if l.strip()]
    records, size = replicated(lines, args.target_mb * 10**6, SHIFT_MINUTES)
    args.copies = -(-len(records) // len(lines))
    mb = size / 1e6
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    meta = {"machine": f"{os.cpu_count()} cores (nproc), {mem:.1f} GiB RAM, {platform.platform()}",
            "data": f"{len(records)} GitHub events, {mb:.1f} MB (data/github/events.ndjson replicated, unique ids)",
            "command": "python bench/compare.py " + " ".join(sys.argv[1:]), "query_reps": args.query_reps,
            "records": len(records), "mb": mb}
    print(meta["machine"] + "\n" + meta["data"], flush=True)

    out, skipped = {}, []
    spark_text = None
    tmp = Path(tempfile.mkdtemp(prefix="shoal-cmp-"))
    os.chmod(tmp, 0o755)
    try:
        path = tmp / "events.ndjson"
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(r)
                f.write("\n")
        os.chmod(path, 0o644)
        path.read_bytes()  # in the page cache for the readers of the file
        actor = json.loads(lines[100])["actor"]["id"]
        if "shoal" in systems:
            print("shoal ...", flush=True)
            run_shoal(records, lines, mb, args, out)
        if "duckdb" in systems:
            print("DuckDB ...", flush=True)
            run_duckdb(path, mb, actor, args, out)
        else:
            skipped.append(("DuckDB", "left out by --systems"))
        if "postgres" in systems:
            print("PostgreSQL ...", flush=True)
            run_postgres(path, mb, actor, args, out, skipped)
        else:
            skipped.append(("PostgreSQL", "left out by --systems"))
        if args.spark:
            copies = max(1, round(args.target_mb / 20))
            print(f"Spark: bench/spark_bench.sh {copies} {args.reps} ...", flush=True)
            try:
                r = subprocess.run([str(REPO / "bench/spark_bench.sh"), str(copies), str(args.reps)], cwd=REPO,
                                   capture_output=True, text=True, timeout=args.spark_timeout)
                if r.returncode == 0:
                    keep = re.sub(r"\x1b\[[0-9;]*m", "", r.stdout).splitlines()
                    start = next((i for i, l in enumerate(keep) if l.startswith("records ")), 0)
                    spark_text = "\n".join(keep[start:])
                else:
                    skipped.append(("Spark JSON reader", f"bench/spark_bench.sh failed (exit {r.returncode}): "
                                                         + " ".join(r.stderr.strip().splitlines()[-2:])))
            except subprocess.TimeoutExpired:
                skipped.append(("Spark JSON reader", f"bench/spark_bench.sh did not finish in {args.spark_timeout} s"))
        else:
            skipped.append(("Spark JSON reader", "not run without --spark (JVM, Maven and Spark local mode take "
                                                 "minutes); bench/spark_bench.sh compares it with shoal through the "
                                                 "connector on Q2-Q5"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = Path(args.out)
    base.parent.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": out, "skipped": skipped}, indent=1))
    report(out, meta, skipped, base.with_suffix(".md"), chart_path(base.with_suffix(".json")), spark_text)


if __name__ == "__main__":
    main()
