#!/usr/bin/python3
"""Reads every #include of the product sources and checks the layering rule of docs/design.md:

  experiments -> chaos -> core -> transports -> transports/base

No file includes a header of a layer above its own, and no two folders include each other's headers, directly
or round a longer loop. A cycle that must stay for a while goes into KNOWN_CYCLES with why: the list may
only shrink (a known cycle that is gone fails too, so that it is struck off).

  tests/layers/check_layers.py SOURCE_DIR        exit 0 clean, 1 with the offending includes listed
"""
import collections
import os
import re
import sys

LAYERS = ["transports/base", "transports", "core", "chaos", "experiments"]  # lowest first
KNOWN_CYCLES = set()  # (folder, folder, ...) sorted, each with a comment saying why; none left
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    best = None
    for i, prefix in enumerate(LAYERS):
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(LAYERS[best]):
                best = i
    return best


def cycles(edges):
    """Strongly connected components with more than one folder (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    root = sys.argv[1]
    problems, edges, files = [], collections.defaultdict(set), 0
    for top in ("transports", "core", "chaos", "experiments"):
        for d, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc", ".cu")):
                    continue
                path = os.path.relpath(os.path.join(d, name), root)
                files += 1
                mine = layer_of(path)
                with open(os.path.join(root, path), errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or layer_of(m.group(1)) is None:
                            continue
                        target = m.group(1)
                        if layer_of(target) > mine:
                            problems.append(f"{path}:{lineno}: includes {target}, a header of "
                                            f"{LAYERS[layer_of(target)]}, above {LAYERS[mine]}")
                        if os.path.dirname(target) != os.path.dirname(path):
                            edges[os.path.dirname(path)].add(os.path.dirname(target))
    found = set(cycles(edges))
    for c in sorted(found - KNOWN_CYCLES):
        problems.append("folders include each other: " + " <-> ".join(c))
    for c in sorted(KNOWN_CYCLES - found):
        problems.append("a known cycle is gone, strike it off KNOWN_CYCLES: " + " <-> ".join(c))
    if files < 100:
        problems.append(f"read only {files} source files under {root}: wrong directory?")
    for p in problems:
        print(p)
    print(f"{files} files read, {sum(len(v) for v in edges.values())} folder dependencies, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
