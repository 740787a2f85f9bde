#!/usr/bin/env bash
# Regenerates docs/findings/preemption-sweep.{md,csv,svg} from measurements alone: tunes each strategy's
# recipe without faults (chaosbed tune), sweeps the tuned spec under Poisson preemptions (chaosbed sweep),
# measures the tuned spec's no-fault spread (chaosbed noise), then writes the finding (bench/findings.py).
# About two and a half hours on 2 cores; each step resumes what a previous invocation finished. It refuses a
# busy machine (bench/quiet.sh: CPU use over the last seconds, from /proc/stat) and waits for a quiet one
# before each run (--wait_quiet_s), so every point starts quiet. Needs python3-matplotlib for the figure.
# Usage: bench/preemption_finding.sh [WORK_DIR=/tmp/preemption-finding]   (CHAOSBED=path, default build/chaosbed)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/preemption-finding}
chaosbed=${CHAOSBED:-build/chaosbed}
spec=experiments/scenarios/sweep-preemption.yaml
[ -x "$chaosbed" ] || { echo "preemption_finding: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
# A finding is made from a commit: a clean tree, and a binary built from it.
[ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "preemption_finding: the tree has uncommitted changes; commit first" >&2; exit 2; }
case "$("$chaosbed" --version)" in
  *"commit $(git rev-parse HEAD))") ;;
  *) echo "preemption_finding: $chaosbed is not built from this commit ($("$chaosbed" --version)); rebuild (scripts/build.sh)" >&2; exit 2 ;;
esac
. bench/quiet.sh
require_quiet preemption_finding
echo "preemption_finding: $quiet_busy% busy, load $(cut -d' ' -f1-3 /proc/loadavg) at start on $(nproc) cores" \
  "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')); work in $work"
"$chaosbed" tune "$spec" --out "$work/tune" --tune_lr 0.02,0.05,0.1 --tune_momentum 0,0.9 \
  --tune_shards 1,2 --wait_quiet_s 120
"$chaosbed" sweep "$work/tune/tuned.yaml" --out "$work/sweep" --wait_quiet_s 120
"$chaosbed" noise "$work/tune/tuned.yaml" --runs 5 --out "$work/noise" --wait_quiet_s 120
/usr/bin/python3 bench/findings.py --sweep "$work/sweep" --tune "$work/tune" --noise "$work/noise" \
  --out docs/findings --name preemption-sweep --command "bench/preemption_finding.sh $work"
echo "preemption_finding: load at end $(cut -d' ' -f1-3 /proc/loadavg)"
