#!/usr/bin/env bash
# Regenerates docs/findings/crossover-sweep.{md,csv,svg} from measurements alone: sweeps
# experiments/scenarios/sweep-crossover.yaml (emulated network speed, so the comm/compute ratio, x preemption
# rate x 3 seeds, plus a no-fault baseline per network; chaosbed sweep), then writes the finding
# (bench/findings.py: paired TTA ratios with their intervals and Holm-corrected verdicts, the measured comm/compute ratio of each
# regime beside its target). About half an hour on 2 cores; a second invocation resumes what the first
# finished. It refuses a busy machine and waits for a quiet one before each run (bench/quiet.sh).
# Needs python3-matplotlib for the figure.
# Usage: bench/crossover_finding.sh [WORK_DIR=/tmp/crossover-finding]   (CHAOSBED=path, default build/chaosbed)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/crossover-finding}
chaosbed=${CHAOSBED:-build/chaosbed}
spec=experiments/scenarios/sweep-crossover.yaml
[ -x "$chaosbed" ] || { echo "crossover_finding: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
# A finding is made from a commit: a clean tree, and a binary built from it.
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "crossover_finding: the tree has uncommitted changes; commit first" >&2; exit 2; }
case "$("$chaosbed" --version)" in
  *"commit $(git rev-parse HEAD))") ;;
  *) echo "crossover_finding: $chaosbed is not built from this commit ($("$chaosbed" --version)); rebuild (scripts/build.sh)" >&2; exit 2 ;;
esac
. bench/quiet.sh
require_quiet crossover_finding
echo "crossover_finding: $quiet_busy% busy, load $(cut -d' ' -f1-3 /proc/loadavg) at start on $(nproc) cores" \
  "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')); work in $work"
"$chaosbed" sweep "$spec" --out "$work/sweep" --wait_quiet_s 120
/usr/bin/python3 bench/findings.py --sweep "$work/sweep" --out docs/findings --name crossover-sweep \
  --command "bench/crossover_finding.sh $work"
echo "crossover_finding: load at end $(cut -d' ' -f1-3 /proc/loadavg)"
