#!/usr/bin/env bash
# Builds everything and runs every test. This is the command the README gives and the
# one CI (.ci/run) calls.
#
#   scripts/test.sh            the full run (CI)
#   scripts/test.sh --quick    the contributors' edit-test loop (below)
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
#
# --quick: the Rust workspace's tests (cargo build + cargo test, unit, integration and doc
# tests), the layer check, the end-to-end pytest suite against target/debug/shoal and the
# unit tests of one JVM module (client/: both transports, daemon and embedded). No data fetch
# (tests that need data/github/events.ndjson skip when it is missing), no other JVM module, no
# spark-submit, no fuzzing. CONTRIBUTING.md has the loop and how to run one test.
#
# Both end with a table of the wall time of each phase (also when a phase fails), with the
# Maven reactor's own time for each module and scripts/fuzz.sh's for its build and each target.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

usage() { echo "usage: scripts/test.sh [--quick]   (CONTRIBUTING.md)"; }
quick=0
case "$#:${1:-}" in
  0:) ;;
  1:--quick) quick=1 ;;
  1:-h | 1:--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac

step() { printf '\n==> %s\n' "$*"; }

# --- Phase timing -------------------------------------------------------------------------
# `phase NAME` ends the running phase and starts NAME; the EXIT trap ends the last one and
# prints the table, so a failed run shows how far it got and what each phase took. Detail
# rows (Maven modules, fuzz build and targets) come from `phase_details`, a command run when
# the phase ends that prints "label<TAB>seconds" lines; they are part of their phase's time.
tmp_dir="$(mktemp -d "${TMPDIR:-/tmp}/shoal-test.XXXXXX")"
row_labels=() row_seconds=() row_kinds=()
current_phase="" current_start=0 phase_details=()
phase() {
  phase_end
  current_phase="$1"
  current_start=$SECONDS
}
phase_end() {
  [[ -n "$current_phase" ]] || return 0
  row_labels+=("$current_phase") row_seconds+=("$((SECONDS - current_start))") row_kinds+=(phase)
  current_phase=""
  if (( ${#phase_details[@]} )); then
    local label seconds
    while IFS=$'\t' read -r label seconds; do
      [[ -n "$label" ]] || continue
      row_labels+=("$label") row_seconds+=("$seconds") row_kinds+=(detail)
    done < <("${phase_details[@]}" 2>/dev/null || true)
    phase_details=()
  fi
}
timing_table() {
  local status="$1" i total=$SECONDS
  if (( status == 0 )); then
    step "timing (wall clock, seconds)"
  else
    step "timing up to the failure (exit $status; wall clock, seconds)"
  fi
  printf '  %-52s %8s\n' "phase" "seconds"
  for i in "${!row_labels[@]}"; do
    if [[ "${row_kinds[$i]}" == phase ]]; then
      printf '  %-52s %8s\n' "${row_labels[$i]}" "${row_seconds[$i]}"
    else
      printf '      %-48s %8s\n' "${row_labels[$i]}" "${row_seconds[$i]}"
    fi
  done
  printf '  %-52s %8s   (%d min %d s)\n' "total" "$total" $((total / 60)) $((total % 60))
  test_counts
}

# --- Tests executed -----------------------------------------------------------------------
# Counted from what ran (so that a drop in the count shows, to be explained): Rust from cargo
# test's "test result" lines, pytest from its summary, the JVM from the Surefire and Failsafe
# reports this run wrote (newer than the marker touched before Maven started).
cargo_test_log="$tmp_dir/cargo-test.log" pytest_log="$tmp_dir/pytest.log" maven_marker="$tmp_dir/maven-started"
test_counts() {
  local rust=- pytest=- jvm=-
  if [[ -s "$cargo_test_log" ]]; then
    rust=$(sed -n 's/^test result: [a-zA-Z]*\. \([0-9]*\) passed; \([0-9]*\) failed.*/\1 \2/p' "$cargo_test_log" \
      | awk '{ p += $1; f += $2 } END { printf "%d passed, %d failed", p, f }')
  fi
  if [[ -s "$pytest_log" ]]; then
    pytest=$(grep -Eo '[0-9]+ (passed|failed|skipped|error)' "$pytest_log" | tail -n 4 | paste -sd, - | sed 's/,/, /g')
  fi
  if [[ -e "$maven_marker" ]]; then
    jvm=$(find . -path '*/target/surefire-reports/TEST-*.xml' -newer "$maven_marker" -o -path '*/target/failsafe-reports/TEST-*.xml' -newer "$maven_marker" \
      | python3 -c '
import sys, xml.etree.ElementTree as ET
t = f = s = 0
for path in sys.stdin.read().split():
    root = ET.parse(path).getroot()
    t += int(root.get("tests", 0)); f += int(root.get("failures", 0)) + int(root.get("errors", 0)); s += int(root.get("skipped", 0))
print(f"{t - f - s} passed, {f} failed, {s} skipped (Surefire + Failsafe)")' 2>/dev/null || echo "-")
  fi
  printf '  tests executed: Rust %s; pytest %s; JVM %s\n' "$rust" "${pytest:--}" "$jvm"
}
on_exit() {
  local status=$?
  set +e
  if [[ -n "$current_phase" && $status -ne 0 ]]; then
    current_phase="$current_phase (FAILED)"
  fi
  phase_end
  timing_table "$status"
  rm -rf "$tmp_dir"
  exit "$status"
}
trap on_exit EXIT

# Maven with its output on the terminal as it comes and in a log, whose "Reactor Summary"
# gives the phase's detail rows: each module's time as Maven measured it. pipefail keeps mvn's
# exit status (tee's is 0).
mvn_log="$tmp_dir/mvn.log"
mvn_teed() {
  phase_details=(mvn_module_times "$mvn_log")
  mvn "$@" | tee "$mvn_log"
}
# "[INFO] shoal embedded ........ SUCCESS [04:00 min]" -> "mvn: shoal embedded<TAB>240", from the
# last Reactor Summary of the log (Maven 3 prints "12.345 s", "MM:SS min" or "HH:MM h"; a module
# not built is SKIPPED and has no time).
mvn_module_times() {
  local line in_summary=0 rows="" name status duration seconds
  local re='^\[INFO\] (.*[^ .])[ .]* (SUCCESS|FAILURE|SKIPPED)( \[ *([^]]*)\])?'
  while IFS= read -r line; do
    if [[ "$line" == *"Reactor Summary"* ]]; then
      in_summary=1 rows=""
    elif [[ "$line" == "[INFO] BUILD "* ]]; then
      in_summary=0
    elif (( in_summary )) && [[ "$line" =~ $re ]]; then
      name="${BASH_REMATCH[1]}" status="${BASH_REMATCH[2]}" duration="${BASH_REMATCH[4]/,/.}"
      case "$duration" in
        *" s") seconds="${duration% s}" seconds="${seconds%??}" ;;
        *" min") duration="${duration% min}" seconds=$(( 10#${duration%%:*} * 60 + 10#${duration#*:} )) ;;
        *" h") duration="${duration% h}" seconds=$(( 10#${duration%%:*} * 3600 + 10#${duration#*:} * 60 )) ;;
        *) seconds="-" ;;
      esac
      [[ "$status" == SUCCESS ]] || name="$name ($status)"
      rows+="mvn: $name"$'\t'"$seconds"$'\n'
    fi
  done < "$1"
  printf '%s' "$rows"
}

# A whole run writes about 8 GB under target/ and up to 1 GB of temporary directories (each test
# deletes its own); a full disk shows up later as a compiler's "No space left on device".
free_kb() { df -Pk "$1" | awk 'NR == 2 { print $4 }'; }
if (( ! quick )); then
  for dir in "$repo_root" "${TMPDIR:-/tmp}"; do
    if (( $(free_kb "$dir") < 12 * 1024 * 1024 )); then
      echo "warning: $(( $(free_kb "$dir") / 1024 )) MB free on the file system of $dir; this run needs about 12 GB" >&2
    fi
  done
fi

# The steps both tiers run.
layer_check() {
  phase "layer check"
  step "Rust: no import circle among the files of the engine, the operations and the daemon (scripts/check-layers.py)"
  python3 scripts/check-layers.py native/shoal-core/src native/shoal-ops/src flight-server/src
  step "Docs: every source file is in docs/design.md's map (scripts/check-file-map.py)"
  python3 scripts/check-file-map.py
}
rust_build_and_tests() {
  step "Rust: cargo build --all-targets + cargo test --workspace --locked"
  # One build of the workspace for everything: --all-targets builds the binaries and libraries
  # with the features the tests' dev-dependencies unify in (shoal-core's `internals`,
  # criterion's and proptest's features of shared crates), so `cargo test` compiles nothing again
  # — a plain `cargo build` followed by `cargo test` compiled shoal-core, shoal-ops, the daemon,
  # the JNI library and eight arrow crates twice (~5 min). It also links target/debug/shoal
  # (which `cargo test` alone does not: flight-server has no Rust integration test) and
  # target/debug/libshoal_jni.so, which the embedded module's Maven build copies into its jar
  # (-Dshoal.cargo.profile=dev -Dshoal.cargo.skip=true below).
  # A fresh clone starts from the compiled dependencies of an earlier run (scripts/cargo-cache.py:
  # ~15 of a cold build's ~20 minutes); cargo's fingerprints rebuild whatever differs.
  phase "cargo cache restore"
  python3 scripts/cargo-cache.py restore
  # A full run in a clone that has no incremental state (a fresh clone: CI) builds without it:
  # the incremental caches (~4 GB) would only be written, never read. The quick tier, the edit
  # loop, keeps cargo's default.
  if (( ! quick )) && [[ ! -d target/debug/incremental && -z "${CARGO_INCREMENTAL:-}" ]]; then
    export CARGO_INCREMENTAL=0
    echo "CARGO_INCREMENTAL=0 (no target/debug/incremental: a fresh clone)"
  fi
  phase "Rust build"
  cargo build --workspace --all-targets --locked
  phase "cargo cache save"
  python3 scripts/cargo-cache.py save
  phase "Rust tests"
  cargo test --workspace --locked 2>&1 | tee "$cargo_test_log"
}
python_venv() {
  phase "Python venv"
  step "Python: virtual environment .venv (pyarrow, pytest)"
  if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-test.txt
}
e2e_tests() {
  phase "e2e pytest"
  step "Python: end-to-end tests of the daemon (pytest, pyarrow.flight, both cores)"
  SHOAL_BIN="$repo_root/target/debug/shoal" .venv/bin/python -m pytest -q -n 2 flight-server/tests/e2e 2>&1 | tee "$pytest_log"
}
# Maven's own cargo step is skipped (-Dshoal.cargo.skip=true): target/debug/libshoal_jni.so is
# the one the workspace build linked (-Dshoal.cargo.profile=dev); built alone, shoal-jni resolves
# its dependencies' features without the daemon's and compiled the engine and fourteen crates
# again (~4 min of the embedded module's time).
maven() {
  [[ -e "$maven_marker" ]] || touch "$maven_marker"
  mvn_teed -B -ntp "$@" \
    -Dshoal.cargo.profile=dev -Dshoal.cargo.skip=true \
    -Dshoal.bin="$repo_root/target/debug/shoal" \
    -Dshoal.data="$repo_root/data/github/events.ndjson"
}

if (( quick )); then
  # The quick tier: no fetch. Tests that need the events or JSONTestSuite skip (with a loud
  # message) when they are missing; SHOAL_REQUIRE_DATA is not set.
  step "quick tier: Rust tests, layer check, end-to-end pytest, the client module's JVM tests (scripts/test.sh --quick)"
  if [[ ! -s data/github/events.ndjson ]]; then
    echo "note: data/github/events.ndjson is missing: the tests that need it skip (scripts/fetch-data.sh fetches it, ~16 MB)"
  fi
  if [[ -z "${SHOAL_JSON_TEST_SUITE:-}" && -d data/JSONTestSuite/test_parsing ]]; then
    export SHOAL_JSON_TEST_SUITE="$repo_root/data/JSONTestSuite/test_parsing"
  fi
  layer_check
  rust_build_and_tests
  python_venv
  e2e_tests
  phase "Maven: client tests (-pl embedded -am test)"
  step "JVM: the client's tests (daemon and embedded transports; the embedded module's own tests not run)"
  # -pl embedded -am builds shoal-client and shoal-embedded (which provides the client's embedded
  # transport); -Dtest runs the client's tests of both modules (the embedded transport's live in
  # embedded/, package dev.shoal.client) and keeps the embedded module's own out;
  # failIfNoSpecifiedTests=false lets a module without a match pass.
  maven test -pl embedded -am -Dtest='dev/shoal/client/**/*Test.java' -Dsurefire.failIfNoSpecifiedTests=false
  phase_end
  step "quick tier passed (the full run: scripts/test.sh)"
  exit 0
fi

phase "release check"
step "release: versions agree and the image definition's inputs exist (scripts/release.sh --check)"
scripts/release.sh --check

phase "data fetch"
step "fetching test data"
scripts/fetch-data.sh
SHOAL_JSON_TEST_SUITE="$(scripts/json-test-suite.sh)"
export SHOAL_JSON_TEST_SUITE
echo "JSONTestSuite: $SHOAL_JSON_TEST_SUITE"

export SHOAL_REQUIRE_DATA=1
layer_check
rust_build_and_tests
# The embedded library (linked into the JVM) carries the engine and its operations only:
# no gRPC, async runtime, CLI or metrics exporter.
phase "JNI dependency check (cargo tree)"
if cargo tree -p shoal-jni -e normal --locked --prefix none | grep -E '^(tonic|tokio|clap|metrics-exporter-prometheus|indicatif|hyper) '; then
  echo "native/jni depends on a daemon-only crate (above): it must depend on shoal-ops, not shoal-server" >&2
  exit 1
fi
python_venv
e2e_tests

phase "Maven verify (all modules)"
step "JVM: mvn -T 2 verify (embedded mode, Spark and Flink connectors, integration-tests; against the real daemon)"
# Two modules at a time (the reactor keeps their order: the connectors after client, the
# integration tests after the connectors): a module's tests wait on daemons, MiniClusters and
# Spark's scheduler as much as on a core. Every test uses ports and directories of its own.
maven -T 2 verify

step "Spark: spark-submit of each shaded jar on a stock PySpark (3.5 and 4.x, daemon and embedded mode; SHOAL_SPARK_SUBMIT=0 skips)"
# The jars mvn verify just built, on the Spark distributions users install: `pip install
# 'pyspark==3.5.*'` (.venv-spark) and `pip install pyspark` (PySpark 4, .venv-spark-4).
# The first run of a line also creates its venv (on a new machine).
if [[ "${SHOAL_SPARK_SUBMIT:-1}" != 0 ]]; then
  version="$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -n 1)"
  for line in 3.5 4; do
    if [[ "$line" == 3.5 ]]; then
      jar="spark-connector/target/shoal-spark-connector-$version-shaded.jar"
    else
      jar="spark4-connector/target/shoal-spark4-connector-$version-shaded.jar"
    fi
    for mode in daemon embedded; do
      phase "spark-submit: Spark $line, $mode"
      SPARK_LINE="$line" SHOAL_SPARK_JAR="$jar" SHOAL_BIN="$repo_root/target/debug/shoal" scripts/spark-submit-test.sh "$mode"
    done
  done
else
  phase "spark-submit (skipped: SHOAL_SPARK_SUBMIT=0)"
fi

step "Fuzzing: a short pass of each fuzz target (cargo-fuzz, nightly; SHOAL_FUZZ_SECONDS, default 15 s each, 0 skips)"
# A time-boxed smoke run, so that every CI run builds the fuzz targets and catches shallow
# crashes: it builds fuzz/ (with sanitizers, in a target directory kept under ~/.cache between
# runs and clones: scripts/fuzz.sh) and runs expr, ingest and protocol from corpora seeded from
# the test data. Longer campaigns: scripts/fuzz.sh 1200 (see README, "Fuzzing").
if [[ "${SHOAL_FUZZ_SECONDS:-15}" != 0 ]]; then
  phase "fuzz (${SHOAL_FUZZ_SECONDS:-15} s per target)"
  fuzz_times="$tmp_dir/fuzz-times.tsv"
  : > "$fuzz_times"
  phase_details=(cat "$fuzz_times")
  SHOAL_FUZZ_TIMES="$fuzz_times" scripts/fuzz.sh "${SHOAL_FUZZ_SECONDS:-15}"
else
  phase "fuzz (skipped: SHOAL_FUZZ_SECONDS=0)"
fi

phase_end
step "all tests passed"
