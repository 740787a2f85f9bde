#!/usr/bin/env bash
# The parameter server's throughput, chaosbed vs a PyTorch parameter server (bench/torch_ps.py: RPC over
# TensorPipe on TCP loopback), same MLP, batch, sharding and SGD, N workers and S shards as processes.
# For each worker count, PAIRS interleaved pairs (ours, then theirs); prints every pair's pushes/s, the
# medians and their ratio (target >= 1.0), with the load and the CPU model. Refuses a loaded machine.
# Usage: bench/ps_compare.sh [PAIRS] [WORKERS] [SHARDS]   (defaults 3, "1,2,4,8", 1; CHAOSBED=path)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/quiet.sh
pairs=${1:-3}
counts=${2:-1,2,4,8}
shards=${3:-1}
seconds=${PS_SECONDS:-3}
chaosbed=${CHAOSBED:-build/chaosbed}
python=/usr/bin/python3  # Debian's Python: python3-torch

[ -x "$chaosbed" ] || { echo "ps_compare: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
"$python" -c 'import torch.distributed.rpc' 2>/dev/null ||
  { echo "ps_compare: $python has no torch: scripts/install-deps.sh --with-bench" >&2; exit 4; }
require_quiet ps_compare
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load at start $(quiet_load)"
echo "model: mlp 784-256-128-10, batch 64, $shards shard(s), ${seconds} s measured per run, $pairs interleaved pairs"

IFS=, read -ra worker_counts <<<"$counts"
summary=()
for n in "${worker_counts[@]}"; do
  ours=() theirs=()
  for ((i = 0; i < pairs; i++)); do
    ours+=("$("$chaosbed" bench ps --workers "$n" --shards "$shards" --bench_ps_s "$seconds" --json 2>/dev/null |
      tail -n 1 | "$python" -c 'import json, sys; print(json.load(sys.stdin)["pushes_per_s"])')")
    theirs+=("$("$python" bench/torch_ps.py --workers "$n" --shards "$shards" --seconds "$seconds" --json 2>/dev/null |
      tail -n 1 | "$python" -c 'import json, sys; print(json.load(sys.stdin)["pushes_per_s"])')")
    printf 'workers %d pair %d: chaosbed %.0f pushes/s, pytorch %.0f (load %s)\n' "$n" "$((i + 1))" \
      "${ours[-1]}" "${theirs[-1]}" "$(quiet_load)"
  done
  summary+=("$("$python" - "$n" "${ours[*]}" "${theirs[*]}" <<'PY'
import statistics, sys
n, ours, theirs = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
a, b = statistics.median(ours), statistics.median(theirs)
won = sum(x > y for x, y in zip(ours, theirs))
print(f"{n:>7} {a:12.0f} {b:12.0f} {a / b:8.2f}x   won {won}/{len(ours)}")
PY
)")
done
printf '%7s %12s %12s %9s\n' workers chaosbed pytorch ratio
printf '%s\n' "${summary[@]}"
echo "load at end $(quiet_load)"
