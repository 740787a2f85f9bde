#!/usr/bin/env bash
# Chaos fidelity benchmark: how faithfully the chaos controller injects what it planned.
#   - injection delay (applied - planned, CLOCK_MONOTONIC) over N slow faults, p50/p99/max (target p99 < 5 ms)
#   - slow accuracy: CPU a spinning node gets at cpu_fraction 0.5 and 0.25 of a 1-core quota (/proc schedstat)
#   - pause: progress of a frozen node (must be 0) and progress after resume
# Needs root with the cgroup cpu and freezer controllers. Usage:
#   bench/chaos_fidelity.sh [BUILD_DIR] [FAULTS]      (default: build, 1000)
# Writes the figures as JSON to $BUILD_DIR/chaos_fidelity.json as well.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
faults=${2:-1000}
bin="$build/chaosbed"
[ -x "$bin" ] || { echo "chaos_fidelity: $bin not built (scripts/build.sh)" >&2; exit 4; }
exec "$bin" chaos bench --bench_faults "$faults" --bench_json "$build/chaos_fidelity.json"
