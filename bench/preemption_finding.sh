#!/usr/bin/env bash
# Regenerates docs/findings/preemption-sweep.{md,csv,svg} from measurements alone: tunes each strategy's
# recipe without faults (chaosbed tune), sweeps the tuned spec under Poisson preemptions (chaosbed sweep),
# measures the tuned spec's no-fault spread (chaosbed noise), then writes the finding (bench/findings.py).
# About an hour on 2 cores; each step resumes what a previous invocation finished. Run it on an otherwise idle
# machine: the runs follow each other without --wait_quiet_s, because the 1-minute load average that it
# waits on still holds the previous run's own load for a minute after it ended (so each point's recorded
# load1_at_start is mostly the sweep's own). Needs python3-matplotlib for the figure.
# Usage: bench/preemption_finding.sh [WORK_DIR=/tmp/preemption-finding]   (CHAOSBED=path, default build/chaosbed)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/tmp/preemption-finding}
chaosbed=${CHAOSBED:-build/chaosbed}
spec=experiments/scenarios/sweep-preemption.yaml
[ -x "$chaosbed" ] || { echo "preemption_finding: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
echo "preemption_finding: load at start $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores; work in $work"
"$chaosbed" tune "$spec" --out "$work/tune" --tune_lr 0.02,0.05,0.1 --tune_momentum 0,0.9 --tune_seeds 1
"$chaosbed" sweep "$work/tune/tuned.yaml" --out "$work/sweep"
"$chaosbed" noise "$work/tune/tuned.yaml" --runs 5 --out "$work/noise"
/usr/bin/python3 bench/findings.py --sweep "$work/sweep" --tune "$work/tune" --noise "$work/noise" \
  --out docs/findings --name preemption-sweep --command "bench/preemption_finding.sh $work"
echo "preemption_finding: load at end $(cut -d' ' -f1-3 /proc/loadavg)"
