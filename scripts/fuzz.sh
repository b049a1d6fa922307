#!/usr/bin/env bash
# Runs the coverage-guided fuzzers of fuzz/ (libFuzzer through cargo-fuzz, nightly Rust):
# `expr` (filter / PSF language), `ingest` (both JSON parsers, the simdjson shim, schema
# inference, batch building), `protocol` (query commands, tickets, action bodies, Flight
# SQL statements) and `actions` (every action body against an on-disk catalog: no file is
# written or removed outside the data directory's tables/<valid name>/).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 60 s each, every target
#
# Corpora live in fuzz/corpus/<target> (kept between runs, not committed) and are seeded from
# the test data: JSONTestSuite's files and GitHub events for `ingest`, the filters of the tests
# for `expr`, commands and tickets for `protocol`, names that are paths for `actions`. A crash stops the run with the input in
# fuzz/artifacts/<target>/; reproduce it with `cargo +nightly fuzz run <target> <file>` (with
# CARGO_TARGET_DIR set to the target directory this script prints, it reuses its build) and turn
# it into a test. Needs the nightly toolchain (`rustup toolchain install nightly`); installs
# cargo-fuzz (version SHOAL_CARGO_FUZZ_VERSION, default below) into ~/.cargo/bin when it is
# missing, once per machine. Longer runs: SECONDS_PER_TARGET=3600.
#
# The build: cargo-fuzz compiles fuzz/ and everything it depends on (shoal-core, shoal-ops, Arrow,
# Parquet, sqlparser, simdjson, zstd, ...) with nightly, in release mode, one codegen unit per
# crate, with AddressSanitizer and libFuzzer's coverage instrumentation: nothing of the
# workspace's debug build can be reused, and from nothing it takes several minutes on 2 cores.
# Its target directory is therefore kept outside the clone, so that a fresh clone (CI's) reuses
# the dependencies built by an earlier run on the machine and rebuilds only the crates of this
# repository: ~/.cache/shoal-fuzz-target/<key> ($XDG_CACHE_HOME if set), the key a hash of
# fuzz/Cargo.lock and the nightly compiler's version, so that a dependency or toolchain update
# starts a new directory; directories unused for 14 days are deleted, and one grown past
# SHOAL_FUZZ_TARGET_MAX_MB (default 8192) is emptied. SHOAL_FUZZ_TARGET_DIR=DIR uses DIR instead
# (fuzz/target, cargo-fuzz's own default, keeps everything inside the clone). The build is the
# same as without the cache (same flags, same targets, same sanitizer); cargo rebuilds whatever
# changed. The time of each step (cargo-fuzz, build, each target) is printed, and appended as
# "label<TAB>seconds" lines to the file SHOAL_FUZZ_TIMES when that is set (scripts/test.sh's table).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root/fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(expr ingest protocol actions)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
fi
# The time of one step: printed, and recorded for scripts/test.sh's table.
took() {
  local label="$1" seconds=$((SECONDS - $2))
  echo "fuzz: $label took ${seconds} s"
  if [[ -n "${SHOAL_FUZZ_TIMES:-}" ]]; then
    printf 'fuzz: %s\t%s\n' "$label" "$seconds" >> "$SHOAL_FUZZ_TIMES"
  fi
}

# cargo-fuzz: compiled from crates.io (a minute or two on 2 cores) only when it is missing; an
# installed one of another version is used as it is (the options used here are those of every
# 0.11-0.13 release).
cargo_fuzz_version="${SHOAL_CARGO_FUZZ_VERSION:-0.13.2}"
start=$SECONDS
installed="$(cargo fuzz --version 2>/dev/null || true)"
installed="${installed##* }"
if [[ -z "$installed" ]]; then
  echo "fuzz: installing cargo-fuzz $cargo_fuzz_version into ~/.cargo/bin (once per machine)"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked --quiet
  took "install cargo-fuzz $cargo_fuzz_version" "$start"
elif [[ "$installed" != "$cargo_fuzz_version" ]]; then
  echo "fuzz: using the installed cargo-fuzz $installed (this script pins $cargo_fuzz_version:" \
    "cargo install cargo-fuzz --version $cargo_fuzz_version --locked)"
fi

# The target directory (see the top of this file).
cache_root="${XDG_CACHE_HOME:-${HOME:-}/.cache}/shoal-fuzz-target"
if [[ -n "${SHOAL_FUZZ_TARGET_DIR:-}" ]]; then
  target_dir="$SHOAL_FUZZ_TARGET_DIR"
  [[ "$target_dir" == /* ]] || target_dir="$repo_root/$target_dir"
elif [[ -z "${XDG_CACHE_HOME:-}" && -z "${HOME:-}" ]]; then
  target_dir="$repo_root/fuzz/target"
else
  key="$( { cat "$repo_root/fuzz/Cargo.lock"; rustc +nightly -vV 2>/dev/null || true; } | sha256sum | cut -c 1-16)"
  target_dir="$cache_root/$key"
  mkdir -p "$cache_root"
  # Other keys' targets (an older fuzz/Cargo.lock or toolchain) are 5-8 GB each: keep the newest
  # one besides this key's, for a branch switched back to, and delete the rest.
  ls -1dt "$cache_root"/*/ 2>/dev/null | grep -v "/$key/\$" | tail -n +2 | xargs -r rm -rf || true
  size_mb="$(du -sm "$target_dir" 2>/dev/null | cut -f 1 || true)"
  if (( ${size_mb:-0} > ${SHOAL_FUZZ_TARGET_MAX_MB:-8192} )); then
    echo "fuzz: $target_dir holds $size_mb MB, over ${SHOAL_FUZZ_TARGET_MAX_MB:-8192}: emptying it"
    rm -rf "$target_dir"
  fi
fi
mkdir -p "$target_dir"
touch "$target_dir"
export CARGO_TARGET_DIR="$target_dir"

seed() {
  local target="$1" dir="corpus/$1"
  mkdir -p "$dir"
  [[ -n "$(ls -A "$dir" 2>/dev/null)" ]] && return 0
  case "$target" in
    expr)
      local i=0
      while IFS= read -r line; do printf '%s' "$line" > "$dir/seed-$i"; i=$((i + 1)); done <<'FILTERS'
type = 'IssuesEvent' AND payload.action = 'opened'
user.followers_count >= 100 OR actor.login IN ('alice', 'bob')
payload."a.b" LIKE 'ab%' AND NOT payload.public AND deleted_at IS NULL
a BETWEEN 1 AND 2.5e3 OR b NOT IN (1, 'x', NULL, TRUE)
NOT (a <> -7 AND (b < 1 OR c > 2))
"select"."from" = 'x' AND trim = 'y'
FILTERS
      ;;
    ingest)
      local suite="${SHOAL_JSON_TEST_SUITE:-$repo_root/../shared/data/JSONTestSuite/test_parsing}"
      if [[ -d "$suite" ]]; then cp "$suite"/*.json "$dir"/ 2>/dev/null || true; fi
      if [[ -f "$repo_root/data/github/events.ndjson" ]]; then
        head -n 40 "$repo_root/data/github/events.ndjson" | split -l 4 - "$dir/events-"
      fi
      printf '{"a": {"b": 7}, "c": "xy", "n": 5, "type": "T"}\n{"n": 1e400}\n[1,2]\n{"": {"": []}}' > "$dir/mixed"
      ;;
    protocol)
      printf '\x00{"table": "t", "filter": "type = '"'"'PushEvent'"'"'", "columns": ["id", "actor.login"], "limit": 3}' > "$dir/query"
      printf '\x00{"table": "t", "aggregates": [{"function": "count"}, {"function": "min", "column": "n"}]}' > "$dir/aggregate"
      printf '\x01{"v": 2, "table": "t", "columns": ["n"], "plan": {"filter": "type = '"'"'PushEvent'"'"' AND n > 0", "index_scans": [{"psfs": ["type"], "properties": [{"psf_id": 0, "psf": "type", "value": "'"'"'PushEvent'"'"'", "canonical": "0450757368"}], "from": 64, "to": 4096}], "full_scans": [{"from": 4096, "to": 1000000}], "reason": ""}}' > "$dir/ticket"
      printf '\x01{"table": "t", "filter": "n > 0", "output": "json", "limit": 2}' > "$dir/one-call"
      printf '\x02{"table": "t", "writer": "w"}' > "$dir/stats"
      printf '\x03{"table": "t", "name": "p", "kind": "predicate", "expr": "n > 1"}' > "$dir/psf"
      printf '\x04SELECT id, actor.login AS who FROM shoal.public.t WHERE type = ? OR n BETWEEN 1 AND 3 ORDER BY n DESC NULLS LAST, 2 LIMIT 2 OFFSET 1' > "$dir/sql"
      printf '\x04EXPLAIN SELECT count(*), min(n), max("id") FROM t WHERE type IN ($1, '"'"'x'"'"') AND NOT n < $2;' > "$dir/sql-aggregates"
      ;;
    actions)
      # The selector byte picks the action (fuzz_targets/actions.rs: 0 create_table, 1
      # drop_table, 3 register_psf, 12 begin_transaction, 17 checkpoint); names that are paths.
      printf '\x00{"name": "../outside", "columnar": {"enabled": false}}' > "$dir/create-parent"
      printf '\x00{"name": "/tmp/shoal-fuzz-absolute"}' > "$dir/create-absolute"
      printf '\x00{"name": "ok.table-1", "columnar": {"enabled": false}}' > "$dir/create"
      printf '\x01{"name": "../../sentinel"}' > "$dir/drop-parent"
      printf '\x03{"table": "t/../../x", "name": "p", "kind": "projection", "field": "a"}' > "$dir/psf-path"
      printf '\x0c{"table": "t", "transaction_id": "../../escape"}' > "$dir/transaction"
      printf '\x11{"table": ".."}' > "$dir/checkpoint"
      ;;
  esac
}

# The build first, on its own, so that its time shows apart from the fuzzing: `cargo fuzz run`
# builds with the same flags before it runs, which is then a no-op.
start=$SECONDS
echo "==> fuzz: building ${targets[*]} (cargo +nightly fuzz build; target directory $CARGO_TARGET_DIR)"
for target in "${targets[@]}"; do
  if ! cargo +nightly fuzz build "$target"; then
    echo "fuzz: building $target FAILED" >&2
    exit 1
  fi
done
took "build (nightly, ASan, release)" "$start"

failed=0
for target in "${targets[@]}"; do
  seed "$target"
  start=$SECONDS
  echo "==> fuzz $target for ${seconds}s (corpus: $(ls "corpus/$target" | wc -l) inputs)"
  # -rss_limit_mb: the in-memory tables of the targets take a few tens of MB each.
  if ! cargo +nightly fuzz run "$target" "corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 2>&1 | sed '/^"/d' | tail -n 60; then
    echo "fuzz: $target FAILED (input in fuzz/artifacts/$target/)" >&2
    failed=1
  fi
  took "run $target" "$start"
done
exit "$failed"
