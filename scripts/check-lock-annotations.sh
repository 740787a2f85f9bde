#!/usr/bin/env bash
# Checks the lock annotations (transports/thread_annotations.h) of every product source with clang's
# -Wthread-safety analysis, as errors: a compile without code generation, from the build's
# compile_commands.json. Usage: scripts/check-lock-annotations.sh [BUILD_DIR]   (default: build)
# Exit 0 when clean, 1 with clang's diagnostics otherwise, 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
db="$build/compile_commands.json"
[ -f "$db" ] || { echo "check-lock-annotations: $db not found: configure first (cmake --preset default)" >&2; exit 2; }
clang=$(command -v clang++ || command -v clang++-14 || true)
[ -n "$clang" ] || { echo "check-lock-annotations: clang++ not found (scripts/install-deps.sh installs it)" >&2; exit 2; }
root=$(pwd)
# One line per product source: its flags (defines, includes, standard) and the file, for clang.
/usr/bin/python3 - "$db" "$root" > "$build/lock-annotations.cmds" <<'PY'
import json, shlex, sys
db, root = sys.argv[1], sys.argv[2]
for entry in json.load(open(db)):
    src = entry["file"]
    rel = src[len(root) + 1:] if src.startswith(root + "/") else src
    if not rel.split("/")[0] in ("transports", "core", "chaos", "experiments") or not rel.endswith(".cc"):
        continue
    args = shlex.split(entry["command"])[1:]
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a.startswith(("-D", "-I", "-std=")) or a in ("-isystem",) or keep and keep[-1] == "-isystem":
            keep.append(a)
    print(shlex.join(keep + [src]))
PY
count=$(wc -l < "$build/lock-annotations.cmds")
echo "check-lock-annotations: $count sources with $clang -Wthread-safety"
# xargs exits non-zero when any compile fails; every diagnostic goes to stderr.
xargs -P "$(nproc)" -L 1 "$clang" -fsyntax-only -Wno-everything -Wthread-safety -Werror=thread-safety \
  < "$build/lock-annotations.cmds" || { echo "check-lock-annotations: FAILED" >&2; exit 1; }
echo "check-lock-annotations: clean"
