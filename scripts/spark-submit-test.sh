#!/usr/bin/env bash
# A real `spark-submit --jars shoal-spark*-connector-*-shaded.jar` against a real daemon:
# the check that a shaded jar works on a stock Spark distribution (PySpark's), not only on
# the test class path of `mvn verify`. scripts/test.sh (CI) runs it for both Spark lines
# and both modes (docs/spark.md, "spark-submit test").
#
#   scripts/spark-submit-test.sh             # through the daemon (grpc://127.0.0.1:PORT)
#   scripts/spark-submit-test.sh embedded    # embedded mode (embedded:DIR), the engine in Spark's JVM
#   SPARK_LINE=4 scripts/spark-submit-test.sh   # the Spark 4 jar on the newest PySpark 4
#
# SPARK_LINE selects the jar and the PySpark: 3.5 (default) is spark-connector's jar on
# `pip install 'pyspark==3.5.*'` (.venv-spark); 4 is spark4-connector's jar on
# `pip install 'pyspark>=4,<5'` (.venv-spark-4), which is what a plain `pip install pyspark` gives.
#
# Steps: build the line's shaded jar (mvn package -pl spark-connector or spark4-connector);
# create the venv (scripts/spark-venv.sh: pyspark, pyarrow); start `shoal serve` on a free port over a
# temporary data directory; ingest data/github/events.ndjson with `shoal ingest` - the
# first half before and the second half after registering the projection PSF `by_type`
# on `type`; run spark-connector/src/test/pyspark/read_events.py with spark-submit, which
# checks EXPLAIN for the pushed filter and the PSF, and compares results with Spark's JSON
# reader.
#
# In embedded mode the daemon ingests the same way and is then stopped (it holds the data
# directory's LOCK while it runs), and spark-submit reads the directory with
# endpoint embedded:DIR: libshoal_jni.so and Arrow's arrow_cdata_jni come out of the shaded jar.
#
# Environment: SPARK_LINE (above), SHOAL_BIN (default target/debug/shoal), SHOAL_DATA (default
# data/github/events.ndjson), SHOAL_SPARK_JAR (skip the Maven build and use this jar),
# SHOAL_SPARK_VENV / PYSPARK_SPEC (override the line's venv and pip spec; scripts/spark-venv.sh).
set -euo pipefail
mode="${1:-daemon}"
case "$mode" in daemon|embedded) ;; *) echo "usage: [SPARK_LINE=3.5|4] $0 [daemon|embedded]" >&2; exit 2 ;; esac
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
case "${SPARK_LINE:-3.5}" in
  3.5) module=spark-connector; artifact=shoal-spark-connector
       export PYSPARK_SPEC="${PYSPARK_SPEC:-pyspark==3.5.*}" SHOAL_SPARK_VENV="${SHOAL_SPARK_VENV:-$repo_root/.venv-spark}" ;;
  4)   module=spark4-connector; artifact=shoal-spark4-connector
       export PYSPARK_SPEC="${PYSPARK_SPEC:-pyspark>=4,<5}" SHOAL_SPARK_VENV="${SHOAL_SPARK_VENV:-$repo_root/.venv-spark-4}" ;;
  *) echo "SPARK_LINE must be 3.5 or 4, not '${SPARK_LINE}'" >&2; exit 2 ;;
esac
step() { printf '\n==> %s\n' "$*"; }
started=$(date +%s)

bin="${SHOAL_BIN:-$repo_root/target/debug/shoal}"
data="${SHOAL_DATA:-$repo_root/data/github/events.ndjson}"
if [[ ! -x "$bin" ]]; then
  step "building the daemon (cargo build -p shoal-server)"
  cargo build --locked -p shoal-server
fi
if [[ ! -f "$data" ]]; then
  step "fetching test data"
  scripts/fetch-data.sh
fi

jar="${SHOAL_SPARK_JAR:-}"
if [[ -z "$jar" ]]; then
  step "building the shaded connector jar ($module)"
  mvn -B -ntp -q -pl "$module" -am package -DskipTests
  jar="$(ls "$repo_root/$module/target/$artifact"-*-shaded.jar | head -n 1)"
fi
echo "jar: $jar ($(du -h "$jar" | cut -f1))"

step "PySpark virtual environment"
venv="$(scripts/spark-venv.sh)"
export PATH="$venv/bin:$PATH"
export PYSPARK_PYTHON="$venv/bin/python"
export SPARK_LOCAL_IP=127.0.0.1

step "starting the daemon"
work="$(mktemp -d)"
daemon_pid=""
cleanup() {
  if [[ -n "$daemon_pid" ]]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
port="$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
endpoint="grpc://127.0.0.1:$port"
"$bin" serve --listen "127.0.0.1:$port" --data-dir "$work/data" >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 1 100); do
  grep -q "shoal ready" "$work/daemon.log" && break
  kill -0 "$daemon_pid" 2>/dev/null || { cat "$work/daemon.log"; echo "daemon exited" >&2; exit 1; }
  sleep 0.1
done
grep -q "shoal ready" "$work/daemon.log" || { cat "$work/daemon.log"; echo "daemon not ready" >&2; exit 1; }
echo "daemon at $endpoint (pid $daemon_pid)"

step "ingesting $(wc -l <"$data") events (PSF by_type registered after the first half)"
table=events
total=$(wc -l <"$data")
head -n $((total / 2)) "$data" >"$work/first.ndjson"
tail -n +$((total / 2 + 1)) "$data" >"$work/second.ndjson"
"$bin" ingest --endpoint "$endpoint" --table "$table" --create "$work/first.ndjson"
"$bin" psf add --endpoint "$endpoint" --table "$table" --name by_type --projection type
"$bin" ingest --endpoint "$endpoint" --table "$table" "$work/second.ndjson"

if [[ "$mode" == embedded ]]; then
  step "stopping the daemon: embedded mode opens $work/data in Spark's JVM"
  kill "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=""
  endpoint="embedded:$work/data"
fi

step "spark-submit --jars $(basename "$jar") (endpoint $endpoint)"
submit_started=$(date +%s)
spark-submit --master 'local[2]' --driver-memory 2g \
  --conf spark.driver.host=127.0.0.1 --conf spark.log.level=WARN \
  --jars "$jar" \
  spark-connector/src/test/pyspark/read_events.py "$endpoint" "$table" "$data" by_type
echo "spark-submit: $(( $(date +%s) - submit_started )) s; whole script: $(( $(date +%s) - started )) s"
