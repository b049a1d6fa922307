#!/usr/bin/env python3
"""Fails when docs/design.md's "Map of the code" and the repository disagree.

Usage: scripts/check-file-map.py [DESIGN_MD]   (default: docs/design.md of this repository)

It checks two things and lists every problem it finds (exit 1; exit 0 when there is none):

  (a) every source file git tracks has a row in the map. Source files are the output of
      `git ls-files` that end in `.rs`, `.java` or `.scala`, and the `.py` and `.sh` files at
      the top level of scripts/ and bench/. A tracked file already deleted from the working
      tree is not required.
  (b) every path the map names exists, and no path is named twice.

The convention, which the map itself states:

  - The map is the section of docs/design.md from the heading "## Map of the code" to the
    next level-2 heading ("## ...").
  - A table row names paths in its first cell only: each `backticked` word there is one path,
    a file, or a folder when it ends in "/". Other cells and the text between tables are free.
  - Paths are written from the repository root, except under a heading (### or deeper) whose
    text holds a backticked folder ending in "/", such as "#### `native/shoal-core/src/`":
    the rows below it, up to the next heading, are relative to that folder.
  - Anywhere else in the map, a backticked word that starts with a tracked top-level folder
    and a "/" (`scripts/test.sh`, `docs/protocol.md`) must exist too, so that the text does
    not point at a file that moved.

The repository root is found from this script's own path, so it runs from any directory.
It needs only python3 and git.
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAP_HEADING = "## Map of the code"
SOURCE_SUFFIXES = (".rs", ".java", ".scala")
SCRIPT_FOLDERS = ("scripts", "bench")
SCRIPT_SUFFIXES = (".py", ".sh")
TICKS = re.compile(r"`([^`]+)`")
PATH_LIKE = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?")


def tracked_files():
    out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, check=True)
    return [p for p in out.stdout.decode("utf-8").split("\0") if p]


def is_source(path):
    if path.endswith(SOURCE_SUFFIXES):
        return True
    parts = path.split("/")
    return len(parts) == 2 and parts[0] in SCRIPT_FOLDERS and path.endswith(SCRIPT_SUFFIXES)


def map_section(lines):
    """(line number, text) of the map's lines, or None when the doc has no map."""
    start = next((i for i, line in enumerate(lines) if line.rstrip() == MAP_HEADING), None)
    if start is None:
        return None
    section = []
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("## "):
            break
        section.append((i + 1, lines[i].rstrip("\n")))
    return section


def named_paths(section, top_folders):
    """The map's rows: [(line, path, must_be_folder)]; the prose's paths; and problems."""
    rows, prose, problems = [], [], []
    base, fenced = "", False
    for number, line in section:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if line.startswith("###"):
            folders = [t for t in TICKS.findall(line) if t.endswith("/")]
            base = folders[0] if folders else ""
            continue
        first_cell = None
        if line.startswith("|"):
            cells = line.split("|")
            if len(cells) > 2 and not re.fullmatch(r"\s*:?-+:?\s*", cells[1]):
                first_cell = cells[1]
                for token in TICKS.findall(first_cell):
                    token = token.strip()
                    if not PATH_LIKE.fullmatch(token):
                        problems.append((number, f"`{token}` in a row's first cell is not a path"))
                        continue
                    rows.append((number, base + token, token.endswith("/")))
        rest = line.replace(first_cell, "", 1) if first_cell is not None else line
        for token in TICKS.findall(rest):
            token = token.strip()
            if PATH_LIKE.fullmatch(token) and "/" in token and token.split("/")[0] in top_folders:
                prose.append((number, token))
    return rows, prose, problems


def main():
    doc = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "docs", "design.md")
    shown = os.path.relpath(doc, ROOT) if doc.startswith(ROOT + os.sep) else doc
    try:
        with open(doc, encoding="utf-8") as f:
            lines = f.readlines()
        tracked = tracked_files()
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"check-file-map: {e}", file=sys.stderr)
        return 2
    section = map_section(lines)
    if section is None:
        print(f"{shown}: no heading {MAP_HEADING!r}", file=sys.stderr)
        return 2

    top_folders = {p.split("/")[0] for p in tracked if "/" in p}
    rows, prose, problems = named_paths(section, top_folders)

    seen = {}
    for number, path, folder in rows:
        full = os.path.join(ROOT, path)
        if path in seen:
            problems.append((number, f"{path} is named again (first on line {seen[path]})"))
            continue
        seen[path] = number
        if folder and not os.path.isdir(full):
            problems.append((number, f"folder {path} does not exist"))
        elif not folder and not os.path.isfile(full):
            problems.append((number, f"file {path} does not exist"))
    for number, path in prose:
        if not os.path.exists(os.path.join(ROOT, path)):
            problems.append((number, f"`{path}` does not exist"))

    sources = [p for p in tracked if is_source(p) and os.path.exists(os.path.join(ROOT, p))]
    for path in sources:
        if path not in seen:
            problems.append((None, f"{path}: a tracked source file with no row in the map"))

    if problems:
        print(f"{shown}, \"Map of the code\": {len(problems)} problem(s)", file=sys.stderr)
        # The map's own problems by line, then the files it misses (in `git ls-files` order).
        for number, text in sorted(problems, key=lambda p: (p[0] is None, p[0] or 0)):
            print(f"  line {number}: {text}" if number else f"  {text}", file=sys.stderr)
        print("Each source file needs one row in the map, and each path the map names must exist "
              "(the convention is at the top of the map and of scripts/check-file-map.py).", file=sys.stderr)
        return 1
    print(f"{shown}: the map names {len(rows)} paths, every one of the {len(sources)} source files among them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
