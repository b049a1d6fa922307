"""A/B benchmark of two daemon binaries (a refactor must not slow the daemon down): the same
DoPut load and the same queries against each, in alternating rounds of one run, reported
as new ÷ old ratios per round (these machines are noisy: a ratio compares two runs seconds
apart; its median over the rounds is the figure).

    python bench/ab_daemon.py --old /path/to/old/shoal --new target/release/shoal \\
        [--target-mb 200] [--rounds 5] [--query-reps 9] [--wait-compacted] [--durability group_commit]

Build the old binary from a worktree, e.g.
    git worktree add /tmp/shoal-old <commit> &&
    (cd /tmp/shoal-old && CARGO_TARGET_DIR=/tmp/shoal-old-target cargo build --release -p shoal-server)

Each round starts one in-memory daemon per binary (order alternating between rounds), loads
the data over one DoPut stream with the GitHub PSFs registered, waits for the schema
observer (and with `--wait-compacted` the columnar compactor), then times the three queries of
`bench/flight_bench.py` (columns `id`, `actor.login`) a full scan with struct columns
(`id`, `actor`, `repo`) of every push event, each the median of `--query-reps`. Needs data/github/events.ndjson
(scripts/fetch-data.sh).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "flight-server" / "tests" / "e2e"))
from conftest import Daemon  # noqa: E402
from flight_bench import replicated, timed_doput, wait_observed  # noqa: E402


def wait_compacted(client, table, timeout=300):
    """Until the columnar compactor has covered every flushed page of `table`."""
    deadline = time.time() + timeout
    while True:
        result = next(client.do_action(flight.Action("stats", json.dumps({"table": table}).encode())))
        columnar = json.loads(result.body.to_pybytes())["columnar"]
        if columnar["backlog_bytes"] == 0 and columnar["files"] > 0:
            return
        if time.time() > deadline:
            raise TimeoutError(f"compaction did not catch up: {columnar}")
        time.sleep(0.1)


def measure(binary, data_dir, schema, batches, records, queries, query_reps, budget_mb, compacted, durability="none"):
    """One daemon of `binary`: the DoPut time and each query's median time, in seconds. With
    a `durability` other than none the daemon keeps its tables in `data_dir` and the table is
    created with that policy (each batch acknowledged once durable)."""
    os.environ["SHOAL_BIN"] = str(binary)
    if durability == "none":
        daemon = Daemon(data_dir, "--in-memory", "--memory-budget-mb", str(budget_mb))
    else:
        daemon = Daemon(data_dir, "--memory-budget-mb", str(budget_mb))
    try:
        client = daemon.client()
        options = None if durability == "none" else {"durability": durability}
        (put,) = timed_doput(client, schema, batches, records, 1, create_options=options)
        wait_observed(client, "events0")
        if compacted:
            wait_compacted(client, "events0")
        results = {"DoPut load": put}
        for name, text, columns in queries:
            command = json.dumps({"table": "events0", "filter": text, "columns": columns})
            times = []
            for _ in range(query_reps):
                start = time.perf_counter()
                info = client.get_flight_info(flight.FlightDescriptor.for_command(command))
                sum(client.do_get(e.ticket).read_all().num_rows for e in info.endpoints)
                times.append(time.perf_counter() - start)
            results[name] = statistics.median(times)
        return results
    finally:
        daemon.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, type=Path, help="the baseline daemon binary")
    parser.add_argument("--new", required=True, type=Path, help="the daemon binary under test")
    parser.add_argument("--target-mb", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--query-reps", type=int, default=9)
    parser.add_argument("--batch-records", type=int, default=4096)
    parser.add_argument("--durability", choices=["none", "group_commit", "fsync"], default="none",
                        help="the table's durability policy; other than none, the daemons keep their tables on disk")
    parser.add_argument("--wait-compacted", action="store_true",
                        help="query once the columnar compactor has caught up (default: once the schema is observed)")
    args = parser.parse_args()
    for binary in (args.old, args.new):
        if not binary.exists():
            parser.error(f"{binary} does not exist")

    lines = [l for l in (REPO / "data/github/events.ndjson").read_text(encoding="utf-8").splitlines() if l.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    schema = pa.schema([("json", pa.string())])
    batches = [pa.record_batch([pa.array(records[i:i + args.batch_records], pa.string())], schema=schema)
               for i in range(0, len(records), args.batch_records)]
    actor = json.loads(lines[100])["actor"]["id"]
    narrow = ["id", "actor.login"]
    queries = [
        ("point lookup (projection PSF)", f"actor.id = {actor}", narrow),
        ("opened issues (predicate PSF)", "type = 'IssuesEvent' AND payload.action = 'opened'", narrow),
        ("full scan (no PSF)", "payload.size > 5", narrow),
        ("push events, struct columns", "payload.size >= 1", ["id", "actor", "repo"]),
    ]
    budget = max(512, 3 * args.target_mb)
    print(f"data: {len(records)} GitHub events, {size / 1e6:.1f} MB; old {args.old}, new {args.new}", flush=True)
    ratios, seconds = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = [("old", args.old), ("new", args.new)]
            if round_ % 2:
                order.reverse()
            figures = {}
            for label, binary in order:
                figures[label] = measure(binary, Path(tmp) / f"{label}{round_}", schema, batches, len(records),
                                         queries, args.query_reps, budget, args.wait_compacted, args.durability)
            line = []
            for name in figures["old"]:
                ratio = figures["new"][name] / figures["old"][name]
                ratios.setdefault(name, []).append(ratio)
                for label in ("old", "new"):
                    seconds.setdefault((name, label), []).append(figures[label][name])
                line.append(f"{name} {ratio:.2f}")
            print(f"round {round_ + 1}/{args.rounds} (new ÷ old time): " + ", ".join(line), flush=True)
    print(f"\n{'measurement':34} {'new ÷ old time, median':>24}  {'min-max':10} {'old ms':>8} {'new ms':>8}")
    for name, values in ratios.items():
        old_ms, new_ms = (1000 * statistics.median(seconds[(name, label)]) for label in ("old", "new"))
        print(f"{name:34} {statistics.median(values):>24.2f}  {min(values):.2f}-{max(values):.2f}  {old_ms:8.1f} {new_ms:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
