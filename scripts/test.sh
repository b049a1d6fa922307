#!/usr/bin/env bash
# Builds everything and runs every test. This is the command the README gives and the
# one CI (.ci/run) calls.
#
# Steps: fetch the test data (GitHub Archive events from Maven Central, into data/);
# build the Rust workspace and run its tests (unit, integration, doc tests); create the
# Python virtual environment .venv (pyarrow, pytest) and run the daemon's end-to-end
# tests against the real `shoal` binary; build the JVM modules and run their tests
# (embedded mode through JNI; Spark in local mode, Flink in a MiniCluster, against the
# same binary), then the end-to-end test of integration-tests/ (the demo's Flink job ->
# shoal -> Spark SQL vs spark.read.json, plus a pyarrow client from .venv); then both Spark
# connector jars under a real spark-submit of PySpark 3.5 and 4 (scripts/spark-submit-test.sh);
# last, a short pass of the coverage-guided fuzzers of fuzz/ (scripts/fuzz.sh).
# Environment: CARGO_BUILD_JOBS etc. as usual; SHOAL_REQUIRE_DATA=1 is set so that tests
# needing the real events fail instead of skipping when the data is missing.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

step() { printf '\n==> %s\n' "$*"; }

# A whole run writes about 8 GB under target/ and up to 1 GB of temporary directories (each test
# deletes its own); a full disk shows up later as a compiler's "No space left on device".
free_kb() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }
for dir in "$repo_root" "${TMPDIR:-/tmp}"; do
  if (( $(free_kb "$dir") < 12 * 1024 * 1024 )); then
    echo "warning: $(( $(free_kb "$dir") / 1024 )) MB free on the file system of $dir; this run needs about 12 GB" >&2
  fi
done

step "release: versions agree and the image definition's inputs exist (scripts/release.sh --check)"
scripts/release.sh --check

step "fetching test data"
scripts/fetch-data.sh
SHOAL_JSON_TEST_SUITE="$(scripts/json-test-suite.sh)"
export SHOAL_JSON_TEST_SUITE
echo "JSONTestSuite: $SHOAL_JSON_TEST_SUITE"

export SHOAL_REQUIRE_DATA=1
step "Rust: no import circle among the engine's and the operations' files (scripts/check-layers.py)"
python3 scripts/check-layers.py native/shoal-core/src native/shoal-ops/src

step "Rust: cargo build + cargo test --workspace --locked"
# The workspace includes native/jni (shoal-jni): this also builds target/debug/libshoal_jni.so,
# which the embedded module's Maven build copies into its jar (-Dshoal.cargo.profile=dev below).
cargo build --workspace --locked
cargo test --workspace --locked
# The embedded library (linked into the JVM) carries the engine and its operations only:
# no gRPC, async runtime, CLI or metrics exporter.
if cargo tree -p shoal-jni -e normal --locked --prefix none | grep -E '^(tonic|tokio|clap|metrics-exporter-prometheus|indicatif|hyper) '; then
  echo "native/jni depends on a daemon-only crate (above): it must depend on shoal-ops, not shoal-server" >&2
  exit 1
fi

step "Python: virtual environment .venv (pyarrow, pytest)"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt

step "Python: end-to-end tests of the daemon (pytest, pyarrow.flight)"
SHOAL_BIN="$repo_root/target/debug/shoal" .venv/bin/python -m pytest -q flight-server/tests/e2e

step "JVM: mvn verify (embedded mode, Spark and Flink connectors, integration-tests; against the real daemon)"
# -Dshoal.cargo.profile=dev: the embedded module's own cargo step builds (warm, a no-op after the
# build above) and packages the debug libshoal_jni.so instead of a release build.
mvn -B -ntp verify \
  -Dshoal.cargo.profile=dev \
  -Dshoal.bin="$repo_root/target/debug/shoal" \
  -Dshoal.data="$repo_root/data/github/events.ndjson"

step "Spark: spark-submit of each shaded jar on a stock PySpark (3.5 and 4.x, daemon and embedded mode; SHOAL_SPARK_SUBMIT=0 skips)"
# The jars mvn verify just built, on the Spark distributions users install: `pip install
# 'pyspark==3.5.*'` (.venv-spark) and `pip install pyspark` (PySpark 4, .venv-spark-4).
if [[ "${SHOAL_SPARK_SUBMIT:-1}" != 0 ]]; then
  version="$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -n 1)"
  for line in 3.5 4; do
    if [[ "$line" == 3.5 ]]; then
      jar="spark-connector/target/shoal-spark-connector-$version-shaded.jar"
    else
      jar="spark4-connector/target/shoal-spark4-connector-$version-shaded.jar"
    fi
    for mode in daemon embedded; do
      SPARK_LINE="$line" SHOAL_SPARK_JAR="$jar" SHOAL_BIN="$repo_root/target/debug/shoal" scripts/spark-submit-test.sh "$mode"
    done
  done
fi

step "Fuzzing: a short pass of each fuzz target (cargo-fuzz, nightly; SHOAL_FUZZ_SECONDS, default 15 s each, 0 skips)"
# The time-boxed smoke run the hardening issue asks of CI: it builds fuzz/ (its own target
# directory, with sanitizers) and runs expr, ingest and protocol from corpora seeded from the
# test data. Longer campaigns: scripts/fuzz.sh 1200 (see README, "Fuzzing").
if [[ "${SHOAL_FUZZ_SECONDS:-15}" != 0 ]]; then
  scripts/fuzz.sh "${SHOAL_FUZZ_SECONDS:-15}"
fi

step "all tests passed"
