#!/usr/bin/env bash
# Builds the connector jars and puts them where docker/compose.yaml mounts them:
#
#   docker/jars/spark/    the shaded Spark connectors (spark-submit --jars / spark.jars):
#                         shoal-spark-connector-shaded.jar for Spark 3.5 (the compose stack's
#                         Spark), shoal-spark4-connector-shaded.jar for Spark 4.x
#   docker/jars/flink-1/  the shaded Flink connector for Flink 1.20 (shoal-flink-connector)
#   docker/jars/flink-2/  the shaded Flink connector for Flink 2.x (shoal-flink2-connector)
#                         each one jar with flink-connector-base and the Flight client
#                         relocated inside (docs/flink.md); the compose stack mounts
#                         flink-${SHOAL_FLINK_MAJOR:-1} under the cluster's lib/
#
#   docker/collect-jars.sh            # mvn package -DskipTests, then copy
#   SKIP_BUILD=1 docker/collect-jars.sh   # copy what target/ already holds
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out="$repo_root/docker/jars"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  mvn -B -ntp -q -DskipTests package -pl spark-connector,spark4-connector,flink-connector,flink2-connector -am
fi
rm -rf "$out/spark" "$out/flink" "$out/flink-1" "$out/flink-2"
mkdir -p "$out/spark" "$out/flink-1" "$out/flink-2"

spark_jar="$(ls spark-connector/target/shoal-spark-connector-*-shaded.jar | head -n 1)"
# Stable names, so that commands in docker/README.md need no version.
cp "$spark_jar" "$out/spark/shoal-spark-connector-shaded.jar"
cp "$(ls spark4-connector/target/shoal-spark4-connector-*-shaded.jar | head -n 1)" \
  "$out/spark/shoal-spark4-connector-shaded.jar"
cp "$(ls flink-connector/target/shoal-flink-connector-*-shaded.jar | head -n 1)" \
  "$out/flink-1/shoal-flink-connector-shaded.jar"
cp "$(ls flink2-connector/target/shoal-flink2-connector-*-shaded.jar | head -n 1)" \
  "$out/flink-2/shoal-flink2-connector-shaded.jar"
ls -l "$out/spark" "$out/flink-1" "$out/flink-2"
