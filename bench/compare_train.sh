#!/usr/bin/env bash
# Training-step throughput, chaosbed vs PyTorch, same MLP (784-256-128-10), batch 64, one thread each, run
# one after the other. Prints both figures and the ratio chaosbed / PyTorch (target >= 1.0), over wall time
# and per CPU second (the fair one when other processes compete for the cores).
# Usage: bench/compare_train.sh [SECONDS]   (CHAOSBED=path/to/chaosbed, default build/chaosbed)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-3}
chaosbed=${CHAOSBED:-build/chaosbed}
python=/usr/bin/python3  # Debian's Python: python3-torch on the system OpenBLAS

[ -x "$chaosbed" ] || { echo "compare_train: $chaosbed not found: build first (scripts/build.sh)" >&2; exit 4; }
"$python" -c 'import torch' 2>/dev/null ||
  { echo "compare_train: $python has no torch: scripts/install-deps.sh --with-bench" >&2; exit 4; }

blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
echo "system BLAS: ${blas:-unknown}"
"$python" -c 'import re, torch; print("torch", torch.__version__, re.findall(r"BLAS_INFO=[^,]*", torch.__config__.show()), "(generic: the system libblas.so.3 above)")'

ours=$("$chaosbed" bench train --json --bench_train_s "$seconds" | tail -n 1)
theirs=$("$python" bench/torch_train.py --json --seconds "$seconds" | tail -n 1)
"$python" - "$ours" "$theirs" <<'PY'
import json, sys
ours, theirs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"chaosbed: {ours['samples_per_s']:.0f} samples/s, {ours['samples_per_cpu_s']:.0f} per CPU second "
      f"({ours['gflops']:.1f} GFLOP/s in GEMMs)")
print(f"pytorch:  {theirs['samples_per_s']:.0f} samples/s, {theirs['samples_per_cpu_s']:.0f} per CPU second "
      f"(torch {theirs['torch']})")
print(f"ratio chaosbed/pytorch: {ours['samples_per_s'] / theirs['samples_per_s']:.2f}x wall, "
      f"{ours['samples_per_cpu_s'] / theirs['samples_per_cpu_s']:.2f}x per CPU second")
PY
