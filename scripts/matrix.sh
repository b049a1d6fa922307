#!/usr/bin/env bash
# Builds and tests the Spark connector against several Spark lines (not part of CI:
# every line downloads its own Spark, ~300 MB in ~/.m2, and runs the whole test suite).
#
#   scripts/matrix.sh [LINE...]        # LINE: 3.5, 4.0, 4.1, 4.2; default: all
#   SUBMIT=1 scripts/matrix.sh 4.0     # also spark-submit the line's shaded jar on PySpark X.Y
#
# 3.5 is spark-connector (Spark 3.5.9, Scala 2.12, Arrow 12.0.1, Netty 4.1.96) and 4.2 is
# spark4-connector (Spark 4.2.0, Scala 2.13, Arrow 19.0.0, Netty 4.2.13): both are built and
# tested by every `mvn verify` (CI). 4.0 and 4.1 are spark4-connector's Maven profiles
# spark-4.0 / spark-4.1 (Spark 4.0.4 / 4.1.3 and the Arrow, Netty and protobuf versions that
# release ships); they build into spark4-connector/target/spark-X.Y, so the default build's jars
# stay as they are.
# Each line runs `mvn verify` of the module (unit tests and the tests against the real
# daemon); SUBMIT=1 then runs scripts/spark-submit-test.sh with that line's shaded jar on
# PySpark X.Y (a venv per line, .venv-spark-X.Y). Logs: target/matrix/LINE*.log. Prints a
# table and exits non-zero when a line failed.
#
# Flink is not here: both of its majors are built and fully tested by every `mvn verify`
# (CI included) - flink-connector against Flink 1.20.5, flink2-connector against 2.3.0, one
# source tree; `mvn -pl flink-connector,flink2-connector -am verify` runs just them
# (docs/flink.md).
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
lines=("$@")
[[ ${#lines[@]} -eq 0 ]] && lines=(3.5 4.0 4.1 4.2)
bin="${SHOAL_BIN:-$repo_root/target/debug/shoal}"
data="${SHOAL_DATA:-$repo_root/data/github/events.ndjson}"
[[ -x "$bin" ]] || cargo build --locked -p shoal-server || exit 1
[[ -f "$data" ]] || scripts/fetch-data.sh || exit 1
logs="$repo_root/target/matrix"
mkdir -p "$logs"

results=()
failed=0
for line in "${lines[@]}"; do
  case "$line" in
    3.5) module=spark-connector; profile=(); dir=spark-connector/target; classifier=shaded ;;
    4.2) module=spark4-connector; profile=(); dir=spark4-connector/target; classifier=shaded ;;
    4.0|4.1) module=spark4-connector; profile=("-Pspark-$line"); dir="spark4-connector/target/spark-$line"; classifier="spark-$line-shaded" ;;
    *) echo "unknown Spark line $line (3.5, 4.0, 4.1, 4.2)" >&2; exit 2 ;;
  esac
  printf '\n==> Spark %s: mvn verify %s (log: %s)\n' "$line" "${profile[*]}" "$logs/$line.log"
  start=$(date +%s)
  if mvn -B -ntp -pl "$module" -am "${profile[@]}" verify \
      -Dshoal.bin="$bin" -Dshoal.data="$data" >"$logs/$line.log" 2>&1; then
    verdict=passed
  else
    verdict=FAILED
    failed=1
  fi
  # The connector module's totals: surefire's (unit tests and the tests against the daemon), then
  # failsafe's (the shaded jar); -am's embedded module comes first in the log and is left out.
  tests="$(sed -n '/Building shoal spark connector (/,$p' "$logs/$line.log" \
    | grep -E '^\[(INFO|ERROR|WARNING)\] Tests run: [0-9]+, Failures: [0-9]+, Errors: [0-9]+, Skipped: [0-9]+$' \
    | sed -E 's/^\[[A-Z]+\] Tests run: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+).*/\1 run, \2 failed, \3 errors/' \
    | paste -sd ';' | sed 's/;/; jar: /')"
  results+=("$(printf '%-5s %-7s %5ss  mvn verify   %s' "$line" "$verdict" $(( $(date +%s) - start )) "${tests:-no tests ran (see log)}")")
  echo "${results[-1]}"

  if [[ "${SUBMIT:-0}" == 1 && "$verdict" == passed ]]; then
    jar="$(ls "$dir"/shoal-spark*-connector-*-"$classifier".jar | head -n 1)"
    venv_line="$line"
    printf '\n==> Spark %s: spark-submit %s on pyspark==%s.* (log: %s)\n' "$line" "$(basename "$jar")" "$venv_line" "$logs/$line-submit.log"
    start=$(date +%s)
    if SHOAL_SPARK_JAR="$jar" PYSPARK_SPEC="pyspark==$venv_line.*" \
        SHOAL_SPARK_VENV="$repo_root/.venv-spark-$venv_line" SHOAL_BIN="$bin" SHOAL_DATA="$data" \
        scripts/spark-submit-test.sh >"$logs/$line-submit.log" 2>&1; then
      verdict=passed
    else
      verdict=FAILED
      failed=1
    fi
    results+=("$(printf '%-5s %-7s %5ss  spark-submit %s' "$line" "$verdict" $(( $(date +%s) - start )) "$(grep -m1 '^Spark ' "$logs/$line-submit.log")")")
    echo "${results[-1]}"
  fi
done

printf '\n%-5s %-7s %6s  %s\n' line result time what
printf '%s\n' "${results[@]}"
exit "$failed"
