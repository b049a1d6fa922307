"""A/B benchmark of two shoal-bench binaries (an engine refactor must not slow it down): the
same cases of each, in alternating rounds of one run (old, new, then new, old, ...),
reported as new ÷ old ratios per round and their median (these machines are noisy: a ratio
compares two runs seconds apart).

    python bench/ab_engine.py --old /path/to/old/shoal-bench --new target/release/shoal-bench \\
        [--rounds 6] [--target-mb 200] [--reps 3] [--cases memory,query]

Build the old binary from a worktree, e.g.
    git worktree add /tmp/shoal-old <commit> &&
    (cd /tmp/shoal-old && CARGO_TARGET_DIR=/tmp/shoal-old-target cargo build --release -p shoal-bench)

Figures compared: each ingestion case's median MB/s (ratio new ÷ old: above 1 is faster) and
each query's median milliseconds per path and table (ratio new ÷ old: below 1 is faster).
Needs data/github/events.ndjson (scripts/fetch-data.sh).
"""

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INGEST = re.compile(r"^(ingest, [^0-9]+?)\s+(\d+)\s+([\d.]+)\s+\(")
QUERY = re.compile(r"^(.{28})\s(\S+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+\d+")
TABLE = re.compile(r"^queries on the (\S+) table")


def run(binary, args):
    """One shoal-bench run: `{figure name: value}`, MB/s for ingestion, ms for queries."""
    text = subprocess.run([str(binary), *args], cwd=REPO, check=True, capture_output=True, text=True).stdout
    figures, table = {}, ""
    for line in text.splitlines():
        if m := TABLE.match(line):
            table = m.group(1)
        elif m := INGEST.match(line):
            figures[f"{m.group(1).strip()} ×{m.group(2)} (MB/s)"] = float(m.group(3))
        elif table and (m := QUERY.match(line)):
            figures[f"{table}: {m.group(1).strip()} [{m.group(2)}] (ms)"] = float(m.group(3))
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, type=Path, help="the baseline shoal-bench binary")
    parser.add_argument("--new", required=True, type=Path, help="the shoal-bench binary under test")
    parser.add_argument("--rounds", type=int, default=6, help="rounds, each running both binaries (default 6)")
    parser.add_argument("--target-mb", type=int, default=200, help="data size per run in MB (default 200)")
    parser.add_argument("--reps", type=int, default=3, help="shoal-bench's repetitions per case (default 3)")
    parser.add_argument("--cases", default="memory,query", help="shoal-bench's cases (default memory,query)")
    args = parser.parse_args()
    bench_args = ["--cases", args.cases, "--threads", "1", "--target-mb", str(args.target_mb), "--reps", str(args.reps)]
    ratios = {}
    for round_number in range(args.rounds):
        order = [("old", args.old), ("new", args.new)]
        if round_number % 2:
            order.reverse()
        results = {name: run(binary, bench_args) for name, binary in order}
        for figure, new in results["new"].items():
            old = results["old"].get(figure)
            if old:
                ratios.setdefault(figure, []).append(new / old)
        print(f"round {round_number + 1}/{args.rounds} done ({' then '.join(n for n, _ in order)})", file=sys.stderr, flush=True)
    print(f"new ÷ old, {args.rounds} alternating rounds (shoal-bench {' '.join(bench_args)})")
    print(f"{'figure':72} {'median':>7}  per round")
    for figure, values in ratios.items():
        print(f"{figure:72} {statistics.median(values):7.3f}  {' '.join(f'{v:.2f}' for v in values)}")


if __name__ == "__main__":
    main()
