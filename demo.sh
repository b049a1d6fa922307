#!/usr/bin/env bash
# shoal's main job, end to end on one machine (README, "The two commands"):
#
#   1. builds the daemon (cargo, release) and the JVM parts (Maven: the Spark and Flink connectors
#      and integration-tests/{flink-job,spark-queries});
#   2. fetches the GitHub Archive events (scripts/fetch-data.sh -> data/github/events.ndjson);
#   3. starts a `shoal` daemon on a free port over a fresh ./demo-data/shoal;
#   4. runs a Flink job (local MiniCluster, its own JVM) that streams the events into the table
#      `events` through ShoalSink, and registers FishStore's GitHub PSFs (register_psf) while the
#      stream runs;
#   5. runs Spark SQL (local mode, a second JVM: the Spark connector is on Arrow 12 / Netty 4.1,
#      the Flink connector on Arrow 19 / Netty 4.2) through the shoal catalog: opened issues,
#      C++ pull requests, one actor's events, and a query no PSF covers - rows, plan, time, and the
#      same query over spark.read.json for comparison;
#   6. stops the daemon with SIGTERM and prints a summary.
#
# Needs: Rust (cargo), a JDK 17+ with Maven, Python 3, cmake and a C++17 compiler (simdjson).
# Environment: SHOAL_DEMO_RATE (events/s the Flink job replays the file at; default 2000, 0 = as
# fast as it goes), SHOAL_DEMO_SKIP_BUILD=1 (reuse what is built). Logs: ./demo-data/*.log.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$repo_root"

rate="${SHOAL_DEMO_RATE:-2000}"
demo_dir="$repo_root/demo-data"
events="$repo_root/data/github/events.ndjson"
shoal_bin="$repo_root/target/release/shoal"
# Flight needs java.nio opened; Spark 3.5 also needs sun.nio.ch exported (TOOLCHAIN.md; the same
# flags as the parent pom's shoal.test.jvm.flags).
jvm_flags=(-Xmx2g
  --add-opens=java.base/java.nio=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED
  --add-exports=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
  -Dio.netty.tryReflectionSetAccessible=true)

started_all=$SECONDS
timings=()
step_started=0
step() { step_started=$SECONDS; printf '\n\033[1m==> %s\033[0m\n' "$*"; }
done_step() { timings+=("$(printf '%-44s %4d s' "$1" $((SECONDS - step_started)))"); }
die() { printf '\ndemo.sh: error: %s\n' "$*" >&2; exit 1; }

for tool in cargo java mvn python3; do
  command -v "$tool" >/dev/null || die "$tool is not on PATH (the demo needs Rust, a JDK 17+ with Maven, and Python 3)"
done
java_major="$(java -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/ {print $2}')"
[[ "${java_major%%.*}" -ge 17 ]] || die "java is version $java_major; the JVM parts need 17 or newer"

if [[ "${SHOAL_DEMO_SKIP_BUILD:-0}" != 1 ]]; then
  for tool in cmake c++; do
    command -v "$tool" >/dev/null || die "$tool is not on PATH (the daemon's build compiles simdjson: cmake and a C++17 compiler)"
  done
  step "build the daemon and the JNI library: cargo build --release --locked -p shoal-server -p shoal-jni"
  # cargo's own lines, thinned: every 20th crate, plus warnings and errors.
  # One build for both (the connectors' jars carry libshoal_jni.so for embedded mode), so
  # Cargo compiles the shared crates once with one feature set.
  cargo build --release --locked -p shoal-server -p shoal-jni 2>&1 | awk '
    /^ *Compiling / { n++; if (n % 20 == 1) { printf "  compiling crate %d: %s %s\n", n, $2, $3; fflush() } next }
    /^(warning|error)/ || /Finished/ { print "  " $0; fflush() }'
  [[ -x "$shoal_bin" ]] || die "cargo did not produce $shoal_bin"
  done_step "build daemon (cargo, release)"

  step "build the JVM parts: mvn install -DskipTests (connectors, integration-tests/flink-job, spark-queries)"
  # Module progress and a count of downloaded artifacts instead of Maven's full output (kept in
  # demo-maven.log when it fails).
  maven_log="$(mktemp)"
  if ! mvn -B -Dstyle.color=never install -DskipTests -Dshoal.cargo.skip=true \
      -pl integration-tests/flink-job,integration-tests/spark-queries -am 2>&1 | tee "$maven_log" | awk '
        /^\[INFO\] Building .*\[[0-9]+\/[0-9]+\]/ { sub(/^\[INFO\] /, ""); print "  " $0; fflush(); next }
        /^\[INFO\] -+< / { next }
        /Downloaded from / { d++; if (d % 100 == 0) { printf "  ... %d artifacts downloaded\n", d; fflush() } next }
        /^\[ERROR\]/ { print "  " $0; fflush() }
        END { if (d > 0) printf "  %d artifacts downloaded in all\n", d }'; then
    :
  fi
  if ! grep -q "BUILD SUCCESS" "$maven_log"; then
    cp "$maven_log" "$repo_root/demo-maven.log"
    die "the Maven build failed; its output is in demo-maven.log"
  fi
  rm -f "$maven_log"
  done_step "build JVM parts (mvn install -DskipTests)"
fi
for part in flink-job spark-queries; do
  [[ -s "integration-tests/$part/target/runtime-classpath.txt" ]] \
    || die "integration-tests/$part is not built (run without SHOAL_DEMO_SKIP_BUILD)"
done

step "fetch the data: scripts/fetch-data.sh"
scripts/fetch-data.sh
records_in_file="$(grep -c . "$events")"
done_step "fetch data (GitHub Archive events)"

step "start the daemon over a fresh ./demo-data/shoal"
rm -rf "$demo_dir"
mkdir -p "$demo_dir"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
endpoint="grpc://127.0.0.1:$port"
"$shoal_bin" serve --listen "127.0.0.1:$port" --data-dir "$demo_dir/shoal" >"$demo_dir/shoal.log" 2>&1 &
shoal_pid=$!
stop_daemon() {
  if [[ -n "${shoal_pid:-}" ]] && kill -0 "$shoal_pid" 2>/dev/null; then
    kill -TERM "$shoal_pid" 2>/dev/null || true
    wait "$shoal_pid" 2>/dev/null || true
  fi
}
trap stop_daemon EXIT
for _ in $(seq 1 600); do
  grep -q "shoal ready" "$demo_dir/shoal.log" 2>/dev/null && break
  kill -0 "$shoal_pid" 2>/dev/null || { cat "$demo_dir/shoal.log" >&2; die "the daemon exited at start-up"; }
  sleep 0.1
done
grep -q "shoal ready" "$demo_dir/shoal.log" || die "the daemon was not ready in 60 s (see demo-data/shoal.log)"
echo "  shoal (pid $shoal_pid) listening at $endpoint, data in demo-data/shoal, log demo-data/shoal.log"
done_step "start daemon"

classpath() { echo "integration-tests/$1/target/classes:$(cat "integration-tests/$1/target/runtime-classpath.txt")"; }

step "Flink job (MiniCluster): GitHub events -> ShoalSink -> table 'events'; PSFs registered mid-stream"
if ! java "${jvm_flags[@]}" -cp "$(classpath flink-job)" dev.shoal.demo.flink.GithubEventsJob \
    --endpoint "$endpoint" --data "$events" --table events --rate "$rate" --register-psfs-at 0.4 \
    2>"$demo_dir/flink.stderr.log" | tee "$demo_dir/flink.log"; then
  tail -n 30 "$demo_dir/flink.stderr.log" >&2
  die "the Flink job failed (logs: demo-data/flink.log, demo-data/flink.stderr.log)"
fi
done_step "Flink job (stream + PSF registration)"

step "Spark SQL (local mode) through the shoal catalog"
if ! SPARK_LOCAL_IP=127.0.0.1 java "${jvm_flags[@]}" -Dspark.sql.warehouse.dir="$demo_dir/spark-warehouse" -cp "$(classpath spark-queries)" \
    dev.shoal.demo.spark.GithubQueries --endpoint "$endpoint" --json "$events" \
    2>"$demo_dir/spark.stderr.log" | tee "$demo_dir/spark.log"; then
  tail -n 30 "$demo_dir/spark.stderr.log" >&2
  die "the Spark queries failed (logs: demo-data/spark.log, demo-data/spark.stderr.log)"
fi
done_step "Spark queries"

step "stop the daemon (SIGTERM)"
kill -TERM "$shoal_pid"
shutdown_started=$SECONDS
daemon_status=0
wait "$shoal_pid" || daemon_status=$?
shoal_pid=""
echo "  shoal exited with status $daemon_status after $((SECONDS - shutdown_started)) s"
[[ $daemon_status -eq 0 ]] || die "the daemon did not shut down cleanly (see demo-data/shoal.log)"
done_step "stop daemon"

total=$((SECONDS - started_all))
{
  printf '\n\033[1m==> summary\033[0m\n'
  printf 'data: %s (%s events), daemon at %s, data dir demo-data/shoal (%s)\n' \
    "data/github/events.ndjson" "$records_in_file" "$endpoint" "$(du -sh "$demo_dir/shoal" | cut -f1)"
  grep -h '^summary: ' "$demo_dir/flink.log" "$demo_dir/spark.log" | sed 's/^summary: /  /'
  echo "steps:"
  for t in "${timings[@]}"; do echo "  $t"; done
  printf '  %-44s %4d s\n' "total" "$total"
  echo "logs: demo-data/{shoal,flink,spark}.log"
} | tee "$demo_dir/summary.txt"
