#!/usr/bin/env bash
# The daemon's release build, the one every shipped binary comes from: the image
# (docker/Dockerfile runs this script) and the release tarballs (scripts/release.sh).
#
#   docker/build-daemon.sh OUT_DIR [TARGET]    # builds and installs OUT_DIR/shoal
#
# TARGET is a Rust target triple, the host's by default. Another Linux target is a cross
# build: it needs the Rust target (`rustup target add aarch64-unknown-linux-gnu`) and the
# GNU cross compilers named after it (Debian: `apt-get install g++-aarch64-linux-gnu`),
# which compile simdjson, zstd and ring and link the binary.
#
# The workspace's release profile keeps line tables (debug = 1) for profiling; shipped
# binaries do without them (165 MB -> about a tenth). Run from the repository root (or the
# image's /src); needs cargo, cmake and a C++17 compiler (simdjson). The binary is run once
# (--version) so that a build that cannot start fails here: a cross-built one under
# qemu-user (`qemu-aarch64`, Debian's qemu-user) when it is there, else it is only built.
set -euo pipefail
out="${1:?usage: docker/build-daemon.sh OUT_DIR [TARGET]}"
host="$(rustc -vV | sed -n 's/^host: //p')"
target="${2:-$host}"
export CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=debuginfo
if [[ "$target" == "$host" ]]; then
  cargo build --release --locked -p shoal-server
  binary="${CARGO_TARGET_DIR:-target}/release/shoal"
  run=()
else
  arch="${target%%-*}"
  gnu="$arch-linux-gnu"
  rustup target list --installed | grep -x "$target" >/dev/null \
    || { echo "build-daemon: the Rust target $target is not installed: rustup target add $target" >&2; exit 1; }
  command -v "$gnu-g++" >/dev/null \
    || { echo "build-daemon: no $gnu-g++ for $target (Debian: apt-get install g++-$gnu)" >&2; exit 1; }
  env_target="${target//-/_}"
  upper="$(tr '[:lower:]' '[:upper:]' <<<"$env_target")"
  export "CC_$env_target=$gnu-gcc" "CXX_$env_target=$gnu-g++" "AR_$env_target=$gnu-ar" \
    "CARGO_TARGET_${upper}_LINKER=$gnu-gcc"
  cargo build --release --locked -p shoal-server --target "$target"
  binary="${CARGO_TARGET_DIR:-target}/$target/release/shoal"
  run=()
  if command -v "qemu-$arch" >/dev/null; then
    run=("qemu-$arch" -L "/usr/$gnu")
  fi
fi
install -D -m 0755 "$binary" "$out/shoal"
if [[ "$target" == "$host" || ${#run[@]} -gt 0 ]]; then
  "${run[@]}" "$out/shoal" --version
else
  echo "build-daemon: $target binary built; not run (no qemu-$arch here)"
fi
