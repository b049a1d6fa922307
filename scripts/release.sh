#!/usr/bin/env bash
# Builds a release into dist/shoal-VERSION/, with SHA-256 checksums:
#
#   shoal-VERSION-linux-x86_64.tar.gz   the daemon and CLI (bin/shoal, stripped release build from
#                                       docker/build-daemon.sh, the image's own build), LICENSE,
#                                       README.md and the configuration and operations docs
#   shoal-VERSION-linux-aarch64.tar.gz  the same, cross-built, when the aarch64 toolchain is here
#                                       (rustup target add aarch64-unknown-linux-gnu; Debian:
#                                       apt-get install g++-aarch64-linux-gnu, and qemu-user to
#                                       run it once); else skipped, saying so
#   shoal-spark-connector-VERSION-shaded.jar    Spark 3.5 (spark-submit --jars)
#   shoal-spark4-connector-VERSION-shaded.jar   Spark 4.x
#   shoal-flink-connector-VERSION-shaded.jar    Flink 1.20 (lib/)
#   shoal-flink2-connector-VERSION-shaded.jar   Flink 2.x (lib/)
#   shoal-VERSION-src.tar.gz            the source at HEAD (git archive): the image is built from
#                                       it with `docker build -f docker/Dockerfile -t shoal:VERSION .`
#   SHA256SUMS
#
#   scripts/release.sh            # build (release profiles; ~10 min warm on 2 cores)
#   scripts/release.sh --check    # no build: versions agree, the Dockerfile's inputs exist and
#                                 # its build step is docker/build-daemon.sh (run by scripts/test.sh)
#
# Versions (docs/operations.md, "Releases"): one version for everything, Semantic Versioning.
# The crates carry X.Y.Z and the poms X.Y.Z-SNAPSHOT between releases; a release sets the poms
# to X.Y.Z (mvn versions:set -DnewVersion=X.Y.Z -DgenerateBackupPoms=false), tags vX.Y.Z, and
# moves both to the next version. A -SNAPSHOT build is allowed and named so.
# linux-aarch64 is a cross build (docker/build-daemon.sh OUT aarch64-unknown-linux-gnu; on an
# aarch64 host the native build gives it). No Docker engine runs here: the image itself is not
# built, only its definition checked (--check) and its build script run (the tarballs'
# binaries are that script's output).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
step() { printf '\n==> %s\n' "$*"; }

crate_version="$(sed -n 's/^version = "\(.*\)"/\1/p' flight-server/Cargo.toml | head -n 1)"
pom_version="$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' pom.xml | head -n 1)"
problems=()
for crate in native/shoal-core native/jni; do
  v="$(sed -n 's/^version = "\(.*\)"/\1/p' "$crate/Cargo.toml" | head -n 1)"
  [[ "$v" == "$crate_version" ]] || problems+=("$crate/Cargo.toml has version $v, flight-server has $crate_version")
done
[[ "${pom_version%-SNAPSHOT}" == "$crate_version" ]] \
  || problems+=("pom.xml has version $pom_version, the crates $crate_version (expected $crate_version or $crate_version-SNAPSHOT)")
poms="$(git ls-files '*pom.xml')" || { echo "release: run from a git checkout" >&2; exit 1; }
for pom in $poms; do
  grep -q "<version>$pom_version</version>" "$pom" || problems+=("$pom does not name version $pom_version")
done
[[ -f LICENSE ]] || problems+=("LICENSE is missing")
# The Dockerfile's inputs: every COPY source (outside --from) exists and is not ignored, and
# the build step is the shared script.
while read -r src; do
  [[ -e "$src" ]] || problems+=("docker/Dockerfile copies $src, which does not exist")
done < <(awk '$1 == "COPY" && $2 !~ /^--/ { for (i = 2; i < NF; i++) print $i }' docker/Dockerfile)
grep -q '^    docker/build-daemon.sh /out$' docker/Dockerfile || problems+=("docker/Dockerfile does not build with docker/build-daemon.sh")
bash -n docker/build-daemon.sh || problems+=("docker/build-daemon.sh does not parse")
if ((${#problems[@]})); then
  printf 'release: %s\n' "${problems[@]}" >&2
  exit 1
fi
version="$pom_version"
echo "release $version: versions agree, the image definition's inputs are in place"
[[ "${1:-}" == --check ]] && exit 0

dist="$repo_root/dist/shoal-$version"
rm -rf "$dist"
mkdir -p "$dist"
started=$(date +%s)

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
# tarball PLATFORM TARGET: the daemon built for TARGET with the docs, as shoal-VERSION-PLATFORM.tar.gz.
tarball() {
  local name="shoal-$version-$1"
  step "daemon $1: docker/build-daemon.sh (release, stripped, $2)"
  docker/build-daemon.sh "$stage/$name/bin" "$2"
  cp LICENSE README.md "$stage/$name/"
  mkdir -p "$stage/$name/docs"
  cp docs/configuration.md docs/operations.md "$stage/$name/docs/"
  tar -C "$stage" -czf "$dist/$name.tar.gz" "$name"
}
host="$(rustc -vV | sed -n 's/^host: //p')"
tarball "linux-$(uname -m)" "$host"
if [[ "$host" == x86_64-unknown-linux-gnu ]]; then
  if rustup target list --installed 2>/dev/null | grep -x aarch64-unknown-linux-gnu >/dev/null \
      && command -v aarch64-linux-gnu-g++ >/dev/null; then
    tarball linux-aarch64 aarch64-unknown-linux-gnu
  else
    step "daemon linux-aarch64: skipped (no cross toolchain: rustup target add aarch64-unknown-linux-gnu; apt-get install g++-aarch64-linux-gnu qemu-user)"
  fi
fi

step "connector jars: mvn package (release native library for embedded mode)"
mvn -B -ntp -q package -DskipTests -pl spark-connector,spark4-connector,flink-connector,flink2-connector -am
for jar in spark-connector/target/shoal-spark-connector-"$version"-shaded.jar \
           spark4-connector/target/shoal-spark4-connector-"$version"-shaded.jar \
           flink-connector/target/shoal-flink-connector-"$version"-shaded.jar \
           flink2-connector/target/shoal-flink2-connector-"$version"-shaded.jar; do
  cp "$jar" "$dist/"
done

step "source: git archive HEAD"
git archive --format=tar.gz --prefix="shoal-$version/" -o "$dist/shoal-$version-src.tar.gz" HEAD

(cd "$dist" && sha256sum -- * > SHA256SUMS)
echo
ls -l "$dist"
echo "release $version in $dist ($(( $(date +%s) - started )) s)"
