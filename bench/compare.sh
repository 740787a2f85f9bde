#!/usr/bin/env bash
# Every peer comparison, interleaved, medians of PAIRS pairs, each section started on a quiet machine:
# 1. the training step against PyTorch: for each model (mlp, cnn, resnet) `chaosbed bench train --model M`
#    and bench/torch_train.py --model M (same shape, batch 64, one thread, SGD with momentum), one after the
#    other, PAIRS times (ours, peer, ours, peer, ...); a table of the medians and the median per-pair ratio;
# 2. all-reduce against Open MPI and Gloo at 64 KiB, 1 MiB, 16 MiB on 4 ranks (bench/allreduce_compare.sh),
#    ALLREDUCE_ROUNDS rounds (default 15, at least PAIRS; a round takes about 8 s, and a single one swings by
#    tens of percent, so the ratios come with a 95% interval of their median);
# 3. point to point against ucx_perftest (bench/p2p_vs_perftest.sh).
# It refuses to start unless the CPUs are quiet (bench/quiet.sh; a figure taken under load is not a
# result), and before each later section waits up to 10 minutes for the CPUs to be quiet again
# (bench/quiet.sh).
# Usage: bench/compare.sh [PAIRS] [SECONDS]   (defaults 3 pairs, 3 s per measurement; CHAOSBED=build/chaosbed,
#        ALLREDUCE_ROUNDS=15)
# Exit: 0 when every target is met, 1 when one is missed, 2 when a section was refused (a loaded machine) or
# failed, 4 when a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
seconds=${2:-3}
chaosbed=${CHAOSBED:-build/chaosbed}
python=/usr/bin/python3  # Debian's Python: python3-torch on the system OpenBLAS
models=(mlp cnn resnet)
allreduce_rounds=${ALLREDUCE_ROUNDS:-15}

[ -x "$chaosbed" ] || { echo "compare: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
"$python" -c 'import torch' 2>/dev/null ||
  { echo "compare: $python has no torch: scripts/install-deps.sh --with-bench" >&2; exit 4; }
[ "$pairs" -ge 3 ] 2>/dev/null || { echo "compare: PAIRS must be at least 3, got '$pairs'" >&2; exit 2; }
[ "$allreduce_rounds" -ge "$pairs" ] 2>/dev/null ||
  { echo "compare: ALLREDUCE_ROUNDS must be a number of at least PAIRS ($pairs), got '$allreduce_rounds'" >&2; exit 2; }

source bench/quiet.sh
require_quiet compare
cores=$quiet_cores
load_start=$(quiet_load)

status=0
echo "== training step against PyTorch"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for ((p = 1; p <= pairs; ++p)); do
  for m in "${models[@]}"; do
    ours=$("$chaosbed" bench train --model "$m" --json --bench_train_s "$seconds" | tail -n 1)
    theirs=$("$python" bench/torch_train.py --model "$m" --json --seconds "$seconds" | tail -n 1)
    printf '%s\t%s\t%s\n' "$m" "$ours" "$theirs" >>"$raw"
    echo "pair $p/$pairs $m done" >&2
  done
done
load_end=$(cut -d' ' -f1 /proc/loadavg)

"$python" - "$raw" "$load_start" "$load_end" "$cores" <<'PY' || status=1
import json, statistics, sys
path, load_start, load_end, cores = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
rows = {}
torch_version = "?"
for line in open(path):
    model, ours, theirs = line.rstrip("\n").split("\t")
    ours, theirs = json.loads(ours), json.loads(theirs)
    torch_version = theirs.get("torch", torch_version)
    rows.setdefault(model, []).append((ours, theirs))
print(f"load at start {load_start}, at end {load_end} ({cores} cores); torch {torch_version}; "
      f"{len(next(iter(rows.values())))} interleaved pairs per model, one thread each, batch 64")
print(f"{'model':8} {'chaosbed samples/s':>19} {'GFLOP/s':>8} {'pytorch samples/s':>18} {'ratio (median)':>15} "
      f"{'ratio range':>12} {'most cores used (ours, torch)':>30}")
ok = True
for model, pairs in rows.items():
    ratios = [o["samples_per_s"] / t["samples_per_s"] for o, t in pairs]
    ours = statistics.median(o["samples_per_s"] for o, _ in pairs)
    gflops = statistics.median(o["gflops"] for o, _ in pairs)
    theirs = statistics.median(t["samples_per_s"] for _, t in pairs)
    ratio = statistics.median(ratios)
    # CPU seconds per wall second, the most of any pair: a side that used more than one core in any pair
    # is not a one-thread figure.
    cores_ours = max(o["samples_per_s"] / o["samples_per_cpu_s"] for o, _ in pairs)
    cores_theirs = max(t["samples_per_s"] / t["samples_per_cpu_s"] for _, t in pairs)
    one_thread = cores_ours <= 1.1 and cores_theirs <= 1.1
    ok = ok and ratio >= 1.0 and one_thread
    print(f"{model:8} {ours:19.0f} {gflops:8.1f} {theirs:18.0f} {ratio:14.2f}x {min(ratios):5.2f}-{max(ratios):.2f}x "
          f"{cores_ours:17.2f}, {cores_theirs:.2f}" + ("" if one_thread else "  (not one thread: no result)"))
print("target: >= 1.0x PyTorch for every model, each side on one core:", "met" if ok else "MISSED")
sys.exit(0 if ok else 1)
PY

echo "== all-reduce against Open MPI and Gloo"
# A section's exit status: 1 missed, 2 refused or failed; the run's is the worst of them.
worst() { [ "$1" -le "$status" ] || status=$1; }
if wait_quiet 600; then rc=0; bench/allreduce_compare.sh "$chaosbed" 4 "$allreduce_rounds" || rc=$?; worst "$rc"
else echo "compare: the CPUs stayed busy; all-reduce not measured" >&2; worst 2; fi
echo "== point to point against ucx_perftest"
if wait_quiet 600; then rc=0; bench/p2p_vs_perftest.sh "$chaosbed" "$pairs" || rc=$?; worst "$rc"
else echo "compare: the CPUs stayed busy; p2p not measured" >&2; worst 2; fi
exit "$status"
