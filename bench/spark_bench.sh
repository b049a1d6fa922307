#!/usr/bin/env bash
# The Spark benchmark: FishStore's GitHub queries in Spark SQL (local[2]) over shoal through the
# daemon (grpc://), over shoal embedded in Spark's JVM (embedded:DIR), over spark.read.json of the
# same NDJSON with schema inference and with the schema given, and over the same DataFrame cached in
# Spark's memory; prints medians, min-max, ratios, a breakdown of shoal's time and the targets
# (bench/README.md, "Spark and PySpark";
# spark-connector/src/test/java/dev/shoal/spark/SparkQueryBench.java says what is measured how).
#
#   bench/spark_bench.sh [COPIES=5] [REPS=3]
#
# COPIES repeats data/github/events.ndjson (20 MB, 9,996 events each; ids unique per copy):
# 50 copies = 1 GB. It does not run cargo: build the release binaries first,
#   cargo build --release --locked -p shoal-server -p shoal-jni
# (SHOAL_BIN and SHOAL_JNI_LIBRARY override target/release/shoal and target/release/libshoal_jni.so).
# SPARK_BENCH_XMX sets the JVM heap (default 8g; Spark's cache of 1 GB of these events takes
# about 1 GB). SPARK_BENCH_JFR=FILE records a Java Flight Recorder profile of the run into FILE
# (`jfr print --events jdk.ExecutionSample FILE`). SPARK_BENCH_DIR keeps the NDJSON and data directories there
# instead of in a temporary directory deleted at the end. SPARK_BENCH_QUERIES=Q3,Q3n runs only those
# queries (the first word of their names).
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES="${1:-5}"
REPS="${2:-3}"
BIN="${SHOAL_BIN:-$PWD/target/release/shoal}"
LIB="${SHOAL_JNI_LIBRARY:-$PWD/target/release/libshoal_jni.so}"
[[ -x "$BIN" && -f "$LIB" ]] || { echo "error: build $BIN and $LIB first: cargo build --release --locked -p shoal-server -p shoal-jni" >&2; exit 1; }
DATA="${SHOAL_DATA:-$PWD/data/github/events.ndjson}"
[[ -f "$DATA" ]] || scripts/fetch-data.sh
CLASSPATH_FILE="$(mktemp)"
trap 'rm -f "$CLASSPATH_FILE"' EXIT
# -am: the connector's embedded module from this checkout (not an older one in ~/.m2); no cargo.
mvn -B -ntp -q -pl spark-connector -am test-compile dependency:build-classpath -Dshoal.cargo.skip=true \
  -Dmdep.outputFile="$CLASSPATH_FILE" -Dmdep.includeScope=test
CP="spark-connector/target/test-classes:spark-connector/target/classes:embedded/target/classes:$(cat "$CLASSPATH_FILE")"
EXTRA=()
[[ -n "${SPARK_BENCH_DIR:-}" ]] && EXTRA+=("-Dbench.dir=$SPARK_BENCH_DIR")
[[ -n "${SPARK_BENCH_QUERIES:-}" ]] && EXTRA+=("-Dbench.queries=$SPARK_BENCH_QUERIES")
[[ -n "${SPARK_BENCH_JFR:-}" ]] && EXTRA+=("-XX:FlightRecorderOptions:stackdepth=512" "-XX:StartFlightRecording=filename=$SPARK_BENCH_JFR,settings=profile")
java --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED \
  -Dio.netty.tryReflectionSetAccessible=true -Xmx"${SPARK_BENCH_XMX:-8g}" \
  -Dshoal.bin="$BIN" -Dshoal.jni.library="$LIB" -Dshoal.data="$DATA" "${EXTRA[@]}" \
  -Dlog4j2.configurationFile=spark-connector/src/test/resources/log4j2-test.properties \
  -cp "$CP" dev.shoal.spark.SparkQueryBench "$COPIES" "$REPS"
