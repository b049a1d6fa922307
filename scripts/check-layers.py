#!/usr/bin/env python3
"""Fails when the files of a Rust crate import each other in a circle.

Usage: scripts/check-layers.py [SRC_DIR ...]   (default: native/shoal-core/src)

A file's imports are the `crate::a::b` and `super::a` paths in its code outside its
`#[cfg(test)] mod tests` block and outside comments, each resolved to the file that defines
the longest existing module prefix. A file never counts as importing its own ancestors
(a submodule naming its parent's items). Circles are the strongly connected components of
more than one file (Tarjan); each is printed with the imports that close it. The layering
rule this checks is in docs/design.md ("Crates and the layering rule").
"""
import os
import re
import sys


def modules(root):
    files = {}
    for directory, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs") or os.path.basename(directory) == "bin":
                continue
            path = os.path.join(directory, name)
            parts = tuple(os.path.relpath(path, root)[:-3].split("/"))
            if parts[-1] in ("mod", "lib"):
                parts = parts[:-1]
            files[parts] = path
    return files


def imports(files):
    def resolve(path):
        path = tuple(path)
        while path and path not in files:
            path = path[:-1]
        return path

    graph = {}
    for module, path in files.items():
        with open(path, encoding="utf-8") as f:
            code = f.read().split("#[cfg(test)]\nmod tests")[0]
        code = re.sub(r"//[^\n]*", "", code)
        targets = set()
        for match in re.finditer(r"crate::((?:[a-z_0-9]+::)*[a-z_0-9]+)", code):
            targets.add(resolve(match.group(1).split("::")))
        for match in re.finditer(r"super::((?:[a-z_0-9]+::)*[A-Za-z_0-9]+)", code):
            targets.add(resolve(list(module[:-1]) + match.group(1).split("::")))
        graph[module] = {t for t in targets if t and t != module and t != module[: len(t)]}
    return graph


def circles(graph):
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return found


def main():
    roots = sys.argv[1:] or ["native/shoal-core/src"]
    failed = False
    for root in roots:
        graph = imports(modules(root))
        found = circles(graph)
        for component in found:
            failed = True
            name = lambda m: "::".join(m) or "lib"
            print(f"{root}: import circle among {', '.join(sorted(name(m) for m in component))}:", file=sys.stderr)
            for m in sorted(component):
                inside = sorted(name(t) for t in graph[m] if t in component)
                print(f"  {name(m)} imports {', '.join(inside)}", file=sys.stderr)
        if not found:
            print(f"{root}: {len(graph)} files, no import circle")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
