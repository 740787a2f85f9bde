#!/usr/bin/env bash
# Configures and builds chaosbed with the default (Release) preset; the binary lands at build/chaosbed.
# Shows the build's progress, so a first build (several minutes on 2 cores) is visibly alive.
# Usage: scripts/build.sh [PRESET]   (default | debug)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-default}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
