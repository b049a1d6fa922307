#!/usr/bin/env bash
# Builds everything and runs every test. This is the command the README gives and the
# one CI (.ci/run) calls.
#
# Steps: fetch the test data (GitHub Archive events from Maven Central, into data/),
# then the Rust workspace's tests (unit, integration, doc tests).
# Environment: CARGO_BUILD_JOBS etc. as usual; SHOAL_REQUIRE_DATA=1 is set so that tests
# needing the real events fail instead of skipping when the data is missing.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

step() { printf '\n==> %s\n' "$*"; }

step "fetching test data"
scripts/fetch-data.sh

export SHOAL_REQUIRE_DATA=1
step "Rust: cargo test --workspace --locked"
cargo test --workspace --locked

step "all tests passed"
