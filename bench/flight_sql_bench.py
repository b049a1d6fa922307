"""Flight SQL through ADBC against shoal's own query path, in the same run:
a point lookup through ADBC (a statement, and a prepared statement with a parameter) against
the native one-call query (one DoGet whose ticket is the JSON command), and a full result
through ADBC against pyarrow.flight reading every endpoint of the same query.

    python bench/flight_sql_bench.py [--target-mb 100] [--reps 31]

Calls alternate (native, ADBC, native, ...) so that each ratio compares calls milliseconds
apart; the figure is the median of the per-call ratios ADBC ÷ native (target: ≤ 1.5 for the
point lookup, ≈ 1 for the full result). Uses target/release/shoal (built here) and
data/github/events.ndjson (scripts/fetch-data.sh).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "flight-server" / "tests" / "e2e"))
from conftest import Daemon  # noqa: E402
from flight_bench import replicated, timed_doput, wait_observed  # noqa: E402


def varint(n):
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def field(number, data):
    """A length-delimited protobuf field."""
    return bytes([number << 3 | 2]) + varint(len(data)) + data


def flight_sql_command(message, body):
    """A Flight SQL command packed in an Any (type URL, value), encoded by hand so that
    pyarrow.flight can send it."""
    return field(1, f"type.googleapis.com/arrow.flight.protocol.sql.{message}".encode()) + field(2, body)


def statement_command(sql):
    """Flight SQL's CommandStatementQuery{query} (field 1 of the command)."""
    return flight_sql_command("CommandStatementQuery", field(1, sql.encode()))


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def compare(name, native, adbc, reps, same_rows=True):
    """Alternating calls; prints and returns the median ADBC ÷ native ratio (`same_rows`: the
    two must return as many rows)."""
    for _ in range(3):  # warm both paths (connections, caches)
        native(), adbc()
    native_times, adbc_times, ratios = [], [], []
    for _ in range(reps):
        n, native_rows = timed(native)
        a, adbc_rows = timed(adbc)
        assert native_rows == adbc_rows or not same_rows, (name, native_rows, adbc_rows)
        native_times.append(n)
        adbc_times.append(a)
        ratios.append(a / n)
    ratio = statistics.median(ratios)
    print(f"{name:<66} native {1e3 * statistics.median(native_times):8.2f} ms   other {1e3 * statistics.median(adbc_times):8.2f} ms"
          f"   ratio {ratio:5.2f}  ({native_rows} rows)", flush=True)
    return ratio


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target-mb", type=int, default=100)
    parser.add_argument("--reps", type=int, default=31)
    args = parser.parse_args()

    print("building the release binary ...", flush=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "-p", "shoal-server", "--bin", "shoal"], cwd=REPO, check=True)
    lines = [l for l in (REPO / "data/github/events.ndjson").read_text(encoding="utf-8").splitlines() if l.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    schema = pa.schema([("json", pa.string())])
    batches = [pa.record_batch([pa.array(records[i:i + 4096], pa.string())], schema=schema) for i in range(0, len(records), 4096)]
    print(f"data: {len(records)} GitHub events, {size / 1e6:.1f} MB", flush=True)
    os.environ["SHOAL_BIN"] = str(REPO / "target/release/shoal")
    with tempfile.TemporaryDirectory() as tmp:
        daemon = Daemon(Path(tmp) / "data", "--in-memory", "--memory-budget-mb", str(max(512, 3 * args.target_mb)))
        try:
            client = daemon.client()
            timed_doput(client, schema, batches, len(records), 1)
            wait_observed(client, "events0")
            actor = json.loads(lines[100])["actor"]["id"]
            conn = flightsql.connect(daemon.location)
            cur = conn.cursor()

            def native_one_call(command):
                def run():
                    return client.do_get(flight.Ticket(json.dumps(command).encode())).read_all().num_rows
                return run

            def native_two_calls(command):
                def run():
                    info = client.get_flight_info(flight.FlightDescriptor.for_command(json.dumps(command)))
                    return sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
                return run

            def adbc(sql, parameters=None):
                def run():
                    cur.execute(sql, parameters)
                    return cur.fetch_arrow_table().num_rows
                return run

            def flight_sql_by_pyarrow(sql):
                return flight_sql_by_pyarrow_command(statement_command(sql))

            def flight_sql_by_pyarrow_command(command):
                def run():
                    info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
                    return sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
                return run

            lookup = {"table": "events0", "filter": f"actor.id = {actor}", "columns": ["id", "actor.login"]}
            lookup_sql = f"SELECT id, actor.login FROM events0 WHERE actor.id = {actor}"
            # Where the time of an ADBC call goes: the two calls Flight SQL makes (GetFlightInfo,
            # DoGet) sent by pyarrow, and ADBC's own cost for two calls that do no work.
            results = {
                "point lookup (Flight SQL by pyarrow)": compare(
                    "point lookup: one-call DoGet vs Flight SQL's 2 calls by pyarrow", native_one_call(lookup),
                    flight_sql_by_pyarrow(lookup_sql), args.reps),
                "pyarrow no-op (GetTableTypes, 2 calls)": compare(
                    "one-call DoGet vs GetTableTypes' 2 calls by pyarrow (no work)", native_one_call(lookup),
                    flight_sql_by_pyarrow_command(flight_sql_command("CommandGetTableTypes", b"")), args.reps, same_rows=False),
                "ADBC no-op (GetTableTypes)": compare(
                    "one-call DoGet vs ADBC GetTableTypes (no work)", native_one_call(lookup),
                    lambda: len(conn.adbc_get_table_types()), args.reps, same_rows=False),
                "point lookup (statement)": compare(
                    "point lookup actor.id: one-call DoGet vs ADBC statement", native_one_call(lookup),
                    adbc(lookup_sql), args.reps),
                "point lookup (prepared)": compare(
                    "point lookup actor.id: one-call DoGet vs ADBC prepared ?", native_one_call(lookup),
                    adbc("SELECT id, actor.login FROM events0 WHERE actor.id = ?", (actor,)), args.reps),
                "full result": compare(
                    "full result 3 columns: pyarrow.flight vs ADBC", native_two_calls(
                        {"table": "events0", "columns": ["id", "type", "actor.login"]}),
                    adbc("SELECT id, type, actor.login FROM events0"), max(5, args.reps // 4)),
            }
            cur.close()
            conn.close()
        finally:
            daemon.stop()
    print(json.dumps({k: round(v, 3) for k, v in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
