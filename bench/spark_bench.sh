#!/usr/bin/env bash
# Spark SQL over shoal (through the DSv2 connector) vs Spark's own JSON reader on the same
# NDJSON, in Spark local mode; prints a table of median times.
#
#   bench/spark_bench.sh [COPIES=5] [REPS=3]
#
# COPIES repeats data/github/events.ndjson (20 MB each). Uses target/release/shoal when
# present (cargo build --release -p shoal-server), else target/debug/shoal; SHOAL_BIN overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES="${1:-5}"
REPS="${2:-3}"
BIN="${SHOAL_BIN:-}"
if [[ -z "$BIN" ]]; then
  if [[ -x target/release/shoal ]]; then BIN="$PWD/target/release/shoal"; else BIN="$PWD/target/debug/shoal"; fi
fi
DATA="${SHOAL_DATA:-$PWD/data/github/events.ndjson}"
mvn -B -ntp -q -pl spark-connector test-compile dependency:build-classpath \
  -Dmdep.outputFile=target/bench.classpath -Dmdep.includeScope=test
CP="spark-connector/target/test-classes:spark-connector/target/classes:$(cat spark-connector/target/bench.classpath)"
exec java --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED \
  -Dio.netty.tryReflectionSetAccessible=true -Xmx4g \
  -Dshoal.bin="$BIN" -Dshoal.data="$DATA" -Dlog4j2.configurationFile=spark-connector/src/test/resources/log4j2-test.properties \
  -cp "$CP" dev.shoal.spark.SparkQueryBench "$COPIES" "$REPS"
