#!/usr/bin/env bash
# Embedded mode (JNI, in the JVM) against the daemon over loopback Flight: the same ingestion,
# full scan and point lookups both ways (embedded/src/test/java/dev/shoal/embedded/EmbeddedBench.java).
#
#   bench/embedded_bench.sh [--rounds N] [--batch N] [--lookups N]
#
# Uses the release builds when both target/release/shoal and target/release/libshoal_jni.so exist,
# else the debug builds (the same profile on both sides; the script says which). It does not run
# cargo: build first with `cargo build --release --locked -p shoal-server -p shoal-jni` (or
# without --release). Needs the events: scripts/fetch-data.sh. Prints a table.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

if [[ -x target/release/shoal && -f target/release/libshoal_jni.so ]]; then
  profile=release cargo_profile=release
else
  profile=debug cargo_profile=dev
fi
bin="$repo_root/target/$profile/shoal"
lib="$repo_root/target/$profile/libshoal_jni.so"
[[ -x "$bin" && -f "$lib" ]] || { echo "error: build $bin and $lib first (cargo build -p shoal-server -p shoal-jni)" >&2; exit 1; }
data="$repo_root/data/github/events.ndjson"
[[ -f "$data" ]] || scripts/fetch-data.sh
echo "profile: $profile (daemon and JNI library alike)"

classpath_file="$(mktemp)"
trap 'rm -f "$classpath_file"' EXIT
# One reactor run: shoal-client (a dependency of shoal-embedded) resolves to its build here; the
# embedded module, last in the reactor, writes the classpath file last.
mvn -B -ntp -q -pl embedded -am test-compile dependency:build-classpath -Dshoal.cargo.skip=true -Dshoal.cargo.profile="$cargo_profile" \
  -Dmdep.includeScope=test -Dmdep.outputFile="$classpath_file"

java --add-opens=java.base/java.nio=ALL-UNNAMED -Dio.netty.tryReflectionSetAccessible=true \
  -Dshoal.jni.library="$lib" \
  -cp "embedded/target/test-classes:embedded/target/classes:$(cat "$classpath_file")" \
  dev.shoal.embedded.EmbeddedBench --bin "$bin" --data "$data" "$@"
