#!/usr/bin/env bash
# Creates (once) the Python virtual environment .venv-bench for bench/compare.py:
# pyarrow (the Flight client), duckdb (a peer), matplotlib (the chart), psycopg (the
# PostgreSQL peer, when a server is there) and pytest (imported by the e2e helpers).
#
#   scripts/bench-venv.sh          # prints the venv's path on stdout
#
# Environment: SHOAL_BENCH_VENV (default .venv-bench).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SHOAL_BENCH_VENV:-$repo_root/.venv-bench}"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import pyarrow, duckdb, matplotlib, psycopg, pytest' 2>/dev/null; then
  start=$(date +%s)
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    'pyarrow>=20' 'duckdb>=1.0' 'matplotlib>=3.7' 'psycopg[binary]>=3.1' 'pytest>=7' >&2
  echo "bench-venv: installed pyarrow, duckdb, matplotlib, psycopg, pytest into $venv in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv"
