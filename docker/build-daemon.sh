#!/usr/bin/env bash
# The daemon's release build, the one every shipped binary comes from: the image
# (docker/Dockerfile runs this script) and the release tarball (scripts/release.sh).
#
#   docker/build-daemon.sh OUT_DIR      # builds and installs OUT_DIR/shoal
#
# The workspace's release profile keeps line tables (debug = 1) for profiling; shipped
# binaries do without them (165 MB -> about a tenth). Run from the repository root (or the
# image's /src); needs cargo, cmake and a C++17 compiler (simdjson). The binary is run once
# (--version) so that a build that cannot start fails here.
set -euo pipefail
out="${1:?usage: docker/build-daemon.sh OUT_DIR}"
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo
cargo build --release --locked -p shoal-server
install -D -m 0755 target/release/shoal "$out/shoal"
"$out/shoal" --version
