"""PSF backfill over a table that is mostly on disk: the GitHub events replicated to
`--target-mb`, put into an on-disk daemon whose memory budget keeps only the log's tail in
memory, the columnar tier caught up, the OS page cache dropped (where this process may), then
the six GitHub PSFs registered at once; reports the wall time until every backfill is done and
each PSF's rate (MB of log per second of the backfill thread). `compare.py` measures the same
over an in-memory table, beside its other figures.

    .venv-bench/bin/python bench/backfill_disk.py [--target-mb 1000] [--memory-budget-mb 300]

Needs target/release/shoal (cargo build --release -p shoal-server) and
data/github/events.ndjson (scripts/fetch-data.sh).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flight_bench import PSFS, REPO, drain_acks, replicated  # noqa: E402
from conftest import Daemon, action  # noqa: E402  (flight_bench put its folder on sys.path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target-mb", type=int, default=1000, help="MB of JSON to load (default 1000)")
    parser.add_argument("--memory-budget-mb", type=int, default=300,
                        help="the daemon's memory budget: the log beyond it is read from disk (default 300)")
    args = parser.parse_args()
    lines = [line for line in (REPO / "data" / "github" / "events.ndjson").read_text().splitlines() if line.strip()]
    records, size = replicated(lines, args.target_mb * 10**6)
    schema = pa.schema([("json", pa.string())])
    with tempfile.TemporaryDirectory(dir=REPO / "target") as tmp:
        daemon = Daemon(Path(tmp) / "data", "--memory-budget-mb", str(args.memory_budget_mb))
        try:
            client = daemon.client()
            action(client, "create_table", {"name": "events"})
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("events"), schema)
            for i in range(0, len(records), 4096):
                writer.write_batch(pa.record_batch([pa.array(records[i:i + 4096], pa.string())], schema=schema))
            writer.done_writing()
            assert drain_acks(reader) == len(records)
            writer.close()
            print(f"loaded {size / 1e6:.0f} MB ({len(records):,} records); waiting for the columnar tier ...", flush=True)
            while action(client, "stats", {"table": "events"})["columnar"]["backlog_bytes"] > 0:
                time.sleep(0.2)
            stats = action(client, "stats", {"table": "events"})
            log_mb = (stats["tail_address"] - stats["begin_address"]) / 1e6
            on_disk_mb = (stats["head_address"] - stats["begin_address"]) / 1e6
            dropped = subprocess.run(["sh", "-c", "sync && echo 3 > /proc/sys/vm/drop_caches"], capture_output=True).returncode == 0
            start = time.perf_counter()
            for psf in PSFS:
                action(client, "register_psf", {"table": "events", **psf})
            while True:
                psfs = [p for p in action(client, "list_psfs", {"table": "events"}) if p["active"]]
                if all(p["backfill"] and p["backfill"]["done"] for p in psfs):
                    break
                time.sleep(0.02)
            wall = time.perf_counter() - start
            rates = sorted(p["backfill"]["bytes_per_second"] / 1e6 for p in psfs)
            print(json.dumps({"log_mb": round(log_mb), "below_head_mb": round(on_disk_mb), "page_cache_dropped": dropped,
                              "psfs": len(psfs), "wall_s": round(wall, 2), "per_psf_mb_s": [round(r) for r in rates],
                              "runs": psfs[0]["backfill"].get("runs")}))
        finally:
            daemon.stop()


if __name__ == "__main__":
    main()
