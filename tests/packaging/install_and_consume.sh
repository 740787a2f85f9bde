#!/usr/bin/env bash
# Installs a built chaosbed into a fresh prefix and builds and runs a consumer project against it
# (tests/packaging/consumer): find_package(chaosbed) must give working chaosbed:: targets.
# Usage: install_and_consume.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/chaosbed-consumer.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
for f in bin/chaosbed share/man/man1/chaosbed.1 share/bash-completion/completions/chaosbed \
         lib/cmake/chaosbed/chaosbedConfig.cmake include/chaosbed/transports/collective.h; do
  [ -f "$work/prefix/$f" ] || { echo "not installed: $f" >&2; exit 1; }
done
cmake -S "$here/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" 2>&1 || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
"$work/build/two_rank_allreduce"
