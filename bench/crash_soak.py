"""Crash soak: the end-to-end crash test (`flight-server/tests/e2e/test_crash.py`) for many more
kills than CI's 40 — one daemon, seven tables written at once (`group_commit` and `fsync`, a keyed
table, a table whose columnar tier compacts while it is written), SIGKILL at a random moment,
restart, and after every restart each acknowledged record present exactly once, nothing unsent,
PSF answers equal to full scans.

    cargo build --release --locked -p shoal-server
    .venv/bin/python bench/crash_soak.py --kills 1000 [--binary target/release/shoal] [--seed 7] [--reset-every 50]

Prints (and appends to `--out`, default bench/results/crash-soak-results.md) the kills, the seed, the
binary, the wall time and the test's own summary; exits non-zero when the test failed (its
assertion names the kill, the table and the records lost).
"""

import argparse
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reset-every", type=int, default=50, help="start from empty tables every N kills (0: never)")
    parser.add_argument("--binary", type=Path, default=REPO / "target" / "release" / "shoal")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "crash-soak-results.md")
    args = parser.parse_args()
    if not args.binary.exists():
        print(f"{args.binary} does not exist: cargo build --release --locked -p shoal-server", file=sys.stderr)
        return 2
    env = dict(os.environ, SHOAL_BIN=str(args.binary.resolve()), SHOAL_CRASH_KILLS=str(args.kills), SHOAL_CRASH_SEED=str(args.seed),
               SHOAL_CRASH_RESET_EVERY=str(args.reset_every))
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "flight-server/tests/e2e/test_crash.py"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    lines = [l for l in (run.stdout + run.stderr).splitlines() if "Close() failed" not in l]
    summary = [l for l in lines if " kills; " in l or l.startswith("E ") or " passed" in l or " failed" in l]
    verdict = "passed" if run.returncode == 0 else "FAILED"
    report = (
        f"\n## {datetime.date.today()} — {args.kills} kills, seed {args.seed}: {verdict}\n\n"
        f"binary `{args.binary}`, {elapsed:.0f} s wall ({elapsed / max(args.kills, 1):.2f} s per kill)\n\n"
        + "\n".join(f"    {l}" for l in summary[-12:])
        + "\n"
    )
    print(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write(report)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
