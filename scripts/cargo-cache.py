#!/usr/bin/env python3
"""Compiled dependencies kept between clones: what `actions/cache` + `Swatinem/rust-cache` do
for CI runners, on this machine's disk.

    scripts/cargo-cache.py restore   before the build: a target/debug/ without compiled
                                     dependencies gets those of an earlier run
    scripts/cargo-cache.py save      after a successful build: stores target/debug's compiled
                                     dependencies (not the workspace's own crates) once per key

A fresh clone's `cargo build --workspace --all-targets` spent ~15 of its ~20 minutes compiling
the 330 crates of Cargo.lock (Arrow, Parquet, tonic, ...), the same object code every run.
`restore` copies `deps/`, `build/` and `.fingerprint/` entries of those crates into
target/debug/ with their modification times; cargo's own fingerprints then decide what is fresh
(it rebuilds anything whose inputs differ, so a stale or foreign cache costs time, never a wrong
build). Cargo relocates build-script output recorded under another target directory (its
`root-output` file), which is what makes a cache written by another clone usable.

The key is a hash of Cargo.lock, every Cargo.toml of the workspace (profiles, features) and
`rustc -vV`. `restore` takes the entry with this key, or else the newest entry (most crates are
still fresh after a dependency bump); it does nothing when target/debug/deps already exists (an
existing build is better than any cache). `save` writes an entry only when none has this key
(to a temporary directory renamed into place, so a killed run leaves no half entry) and keeps
the newest two entries.

Where: $SHOAL_CARGO_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/shoal-cargo-deps; set it to 0 to
turn the cache off. The workspace's crates (package names and target names from
`cargo metadata --no-deps`) and `incremental/` are never stored: they are rebuilt from this
clone's sources. Size: ~1.5 GB per entry.
"""

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "target" / "debug"
CACHED_DIRS = ("deps", "build", ".fingerprint")
KEEP_ENTRIES = 2


def cache_root():
    """The cache directory, or None when SHOAL_CARGO_CACHE=0."""
    configured = os.environ.get("SHOAL_CARGO_CACHE")
    if configured == "0":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "shoal-cargo-deps"


@functools.cache
def packages():
    """The workspace's own packages (`cargo metadata --no-deps`), read once per run."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out)["packages"]


def workspace():
    """(package names, target names with '-' as '_') of the workspace's own crates."""
    members = packages()
    names = {p["name"] for p in members}
    targets = {t["name"].replace("-", "_") for p in members for t in p["targets"]}
    return names, targets


def key():
    """Hex digest naming the inputs that decide which dependencies are compiled how."""
    digest = hashlib.sha256()
    manifests = [REPO / "Cargo.lock", REPO / "Cargo.toml"]
    manifests += sorted(Path(p["manifest_path"]) for p in packages())
    for path in manifests:
        digest.update(path.relative_to(REPO).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    rustc = subprocess.run(["rustc", "-vV"], check=True, capture_output=True, text=True).stdout
    digest.update(rustc.encode())
    return digest.hexdigest()[:20]


def is_workspace_entry(directory, name, packages, targets):
    """True for an entry of deps/, build/ or .fingerprint/ that belongs to a workspace crate:
    `<target>-<hash>...` or `lib<target>-<hash>...` in deps/, `<package>-<hash>` elsewhere."""
    stem = name.split(".", 1)[0]
    base, _, hashpart = stem.rpartition("-")
    if not base or not hashpart:
        return False
    if directory == "deps":
        return base in targets or (base.startswith("lib") and base[3:] in targets)
    return base in packages


def copy_tree(src, dst, skip):
    """Copies src's cached directories to dst with their times (shutil.copy2); `skip(dir, name)`
    leaves an entry out. Returns the bytes copied."""
    total = 0
    for directory in CACHED_DIRS:
        source = src / directory
        if not source.is_dir():
            continue
        (dst / directory).mkdir(parents=True, exist_ok=True)
        for entry in os.scandir(source):
            if skip(directory, entry.name):
                continue
            target = dst / directory / entry.name
            if entry.is_dir(follow_symlinks=False):
                shutil.copytree(entry.path, target, symlinks=True, copy_function=shutil.copy2,
                                dirs_exist_ok=True)
                total += sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
            else:
                shutil.copy2(entry.path, target, follow_symlinks=False)
                total += entry.stat(follow_symlinks=False).st_size
    return total


def entries(root):
    """The cache's complete entries, newest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def restore(root):
    if (TARGET / "deps").is_dir():
        print("cargo cache: target/debug/deps exists; building on it (nothing restored)")
        return
    wanted = root / key()
    available = entries(root)
    if not available:
        print(f"cargo cache: empty ({root}); the dependencies are compiled from source this run")
        return
    entry = wanted if wanted in available else available[0]
    started = time.monotonic()
    copied = copy_tree(entry, TARGET, lambda _d, _n: False)
    how = "this key" if entry == wanted else "the newest entry (no entry has this key)"
    print(f"cargo cache: restored {copied / 2**20:.0f} MB of compiled dependencies from "
          f"{entry} ({how}) in {time.monotonic() - started:.1f} s")


def save(root):
    wanted = root / key()
    if wanted.is_dir():
        os.utime(wanted)  # newest: kept by the pruning below
        print(f"cargo cache: {wanted} is up to date")
        return
    if not (TARGET / "deps").is_dir():
        print("cargo cache: nothing to save (no target/debug/deps)", file=sys.stderr)
        return
    packages, targets = workspace()
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    started = time.monotonic()
    copied = copy_tree(TARGET, partial,
                       lambda d, n: is_workspace_entry(d, n, packages, targets))
    partial.rename(wanted)
    print(f"cargo cache: saved {copied / 2**20:.0f} MB of compiled dependencies to {wanted} "
          f"in {time.monotonic() - started:.1f} s")
    for stale in entries(root)[KEEP_ENTRIES:]:
        shutil.rmtree(stale, ignore_errors=True)
    for leftover in root.glob(".partial-*"):
        # Left by a killed save (an hour is longer than any save takes).
        if leftover != partial and time.time() - leftover.stat().st_mtime > 3600:
            shutil.rmtree(leftover, ignore_errors=True)


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in ("restore", "save"):
        print("usage: scripts/cargo-cache.py restore|save", file=sys.stderr)
        return 2
    root = cache_root()
    if root is None:
        print("cargo cache: off (SHOAL_CARGO_CACHE=0)")
        return 0
    try:
        (restore if sys.argv[1] == "restore" else save)(root)
    except (OSError, subprocess.CalledProcessError) as err:
        # A cache is an optimisation: a failure to use it costs time, never the run.
        print(f"cargo cache: {sys.argv[1]} failed ({err}); continuing without it",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
