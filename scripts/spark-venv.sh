#!/usr/bin/env bash
# Creates (once) the Python virtual environment .venv-spark with PySpark 3.5 — a real
# `spark-submit` and Spark 3.5 jars, ~460 MB — pyarrow for ingesting test data, pandas (toPandas) and pytest,
# whose e2e fixtures (the daemon as a process) bench/pyspark_bench.py reuses.
# Kept apart from .venv (the daemon's e2e tests) so that CI does not download PySpark.
#
#   scripts/spark-venv.sh          # prints the venv's path on stdout
#
# Environment: SHOAL_SPARK_VENV (default .venv-spark), PYSPARK_SPEC (default pyspark==3.5.*).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SHOAL_SPARK_VENV:-$repo_root/.venv-spark}"
spec="${PYSPARK_SPEC:-pyspark==3.5.*}"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import pyspark, pyarrow, pandas, pytest' 2>/dev/null; then
  start=$(date +%s)
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec" 'pyarrow>=20' pandas pytest >&2
  echo "spark-venv: installed $spec + pyarrow + pandas + pytest into $venv in $(( $(date +%s) - start )) s" >&2
fi
echo "$venv"
