#!/usr/bin/env bash
# Training-step throughput against PyTorch, interleaved: for each model (mlp, cnn, resnet) it runs
# `chaosbed bench train --model M --json` and bench/torch_train.py --model M (same shape, batch 64, one thread,
# SGD with momentum) one after the other, PAIRS times (ours, peer, ours, peer, ...), and prints a table of
# the medians and the median of the per-pair ratios, with the load at the start and at the end.
# It refuses to start when the 1-minute load is above 0.5 per core: a figure taken under load is not a result.
# The all-reduce and p2p peers have their own scripts (bench/allreduce_compare.sh, bench/p2p_vs_perftest.sh),
# not folded in here yet.
# Usage: bench/compare.sh [PAIRS] [SECONDS]   (defaults 3 pairs, 3 s per measurement; CHAOSBED=build/chaosbed)
# Exit: 0 when every model is at or above 1.0x PyTorch, 1 when one is below, 2 refused, 4 a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-3}
seconds=${2:-3}
chaosbed=${CHAOSBED:-build/chaosbed}
python=/usr/bin/python3  # Debian's Python: python3-torch on the system OpenBLAS
models=(mlp cnn resnet)

[ -x "$chaosbed" ] || { echo "compare: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
"$python" -c 'import torch' 2>/dev/null ||
  { echo "compare: $python has no torch: scripts/install-deps.sh --with-bench" >&2; exit 4; }
[ "$pairs" -ge 3 ] 2>/dev/null || { echo "compare: PAIRS must be at least 3, got '$pairs'" >&2; exit 2; }

cores=$(nproc)
load_start=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load_start" -v c="$cores" 'BEGIN { exit !(l > 0.5 * c) }'; then
  echo "compare: load $load_start on $cores cores is above 0.5 per core; refusing to measure (wait for a quiet machine)" >&2
  exit 2
fi

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

"$python" - "$raw" "$load_start" "$load_end" "$cores" <<'PY'
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
      f"{'ratio range':>12}")
ok = True
for model, pairs in rows.items():
    ratios = [o["samples_per_s"] / t["samples_per_s"] for o, t in pairs]
    ours = statistics.median(o["samples_per_s"] for o, _ in pairs)
    gflops = statistics.median(o["gflops"] for o, _ in pairs)
    theirs = statistics.median(t["samples_per_s"] for _, t in pairs)
    ratio = statistics.median(ratios)
    ok = ok and ratio >= 1.0
    print(f"{model:8} {ours:19.0f} {gflops:8.1f} {theirs:18.0f} {ratio:14.2f}x {min(ratios):5.2f}-{max(ratios):.2f}x")
print("target: >= 1.0x PyTorch for every model:", "met" if ok else "MISSED")
sys.exit(0 if ok else 1)
PY
