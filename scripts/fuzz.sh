#!/usr/bin/env bash
# Runs the coverage-guided fuzzers of fuzz/ (libFuzzer through cargo-fuzz, nightly Rust):
# `expr` (filter / PSF language), `ingest` (both JSON parsers, the simdjson shim, schema
# inference, batch building) and `protocol` (query commands, tickets, action bodies, Flight
# SQL statements).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     default: 60 s each, every target
#
# Corpora live in fuzz/corpus/<target> (kept between runs, not committed) and are seeded from
# the test data: JSONTestSuite's files and GitHub events for `ingest`, the filters of the tests
# for `expr`, commands and tickets for `protocol`. A crash stops the run with the input in
# fuzz/artifacts/<target>/; reproduce it with `cargo +nightly fuzz run <target> <file>` and turn
# it into a test. Needs the nightly toolchain (`rustup toolchain install nightly`); installs
# cargo-fuzz into ~/.cargo/bin when it is missing. Longer runs: SECONDS_PER_TARGET=3600.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root/fuzz"
seconds="${1:-60}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(expr ingest protocol)

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi

seed() {
  local target="$1" dir="corpus/$1"
  mkdir -p "$dir"
  [[ -n "$(ls -A "$dir" 2>/dev/null)" ]] && return 0
  case "$target" in
    expr)
      local i=0
      while IFS= read -r line; do printf '%s' "$line" > "$dir/seed-$((i++))"; done <<'FILTERS'
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
  esac
}

failed=0
for target in "${targets[@]}"; do
  seed "$target"
  echo "==> fuzz $target for ${seconds}s (corpus: $(ls "corpus/$target" | wc -l) inputs)"
  # -rss_limit_mb: the in-memory tables of the targets take a few tens of MB each.
  if ! cargo +nightly fuzz run "$target" "corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 2>&1 | sed '/^"/d' | tail -n 60; then
    echo "fuzz: $target FAILED (input in fuzz/artifacts/$target/)" >&2
    failed=1
  fi
done
exit "$failed"
