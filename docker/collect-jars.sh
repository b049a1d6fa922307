#!/usr/bin/env bash
# Builds the connector jars and puts them where docker/compose.yaml mounts them:
#
#   docker/jars/spark/  the shaded Spark connector (spark-submit --jars / spark.jars)
#   docker/jars/flink/  the Flink connector and its runtime dependencies (Flight, gRPC,
#                       Arrow, Netty - Flink shades its own Netty, so they do not clash);
#                       mounted under the cluster's lib/
#
#   docker/collect-jars.sh            # mvn package -DskipTests, then copy
#   SKIP_BUILD=1 docker/collect-jars.sh   # copy what target/ already holds
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out="$repo_root/docker/jars"
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  mvn -B -ntp -q -DskipTests package -pl spark-connector,flink-connector -am
fi
rm -rf "$out/spark" "$out/flink"
mkdir -p "$out/spark" "$out/flink"

spark_jar="$(ls spark-connector/target/shoal-spark-connector-*-shaded.jar | head -n 1)"
# A stable name, so that commands in docker/README.md need no version.
cp "$spark_jar" "$out/spark/shoal-spark-connector-shaded.jar"

flink_jar="$(ls flink-connector/target/shoal-flink-connector-*.jar | grep -v -E -- '-(sources|javadoc|tests|original)' | head -n 1)"
cp "$flink_jar" "$out/flink/"
# Runtime dependencies that the Flink distribution does not have (Flink's own artifacts are
# `provided` in the connector's pom and stay out; so does slf4j-api, which flink-dist has).
mvn -B -ntp -q -pl flink-connector dependency:copy-dependencies \
  -DincludeScope=runtime -DexcludeArtifactIds=slf4j-api -DoutputDirectory="$out/flink"
ls -l "$out/spark" "$out/flink"
