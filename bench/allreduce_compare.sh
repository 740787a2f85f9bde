#!/usr/bin/env bash
# Compares `chaosbed bench allreduce` with Open MPI's MPI_Allreduce (default path and --mca pml ucx) and
# Gloo's ring all-reduce over TCP, all with the same number of ranks as processes on this machine, float32
# sum, timed the same way (warm-up, then the slowest rank's per-iteration mean). Prints busbw
# (= algbw * 2(N-1)/N, GB/s = 1e9 B/s) at 1 MiB and 16 MiB for each and chaosbed's ratios to them, against
# the targets: chaosbed >= Open MPI (best of both paths) and >= 5x Gloo at both sizes.
# Installs its own dependencies (openmpi-bin libopenmpi-dev libgloo-dev, as scripts/install-deps.sh --with-bench does)
# and builds bench/peers/*.{c,cc} into build-bench/.
# Usage: bench/allreduce_compare.sh [CHAOSBED_BINARY] [RANKS]   (defaults: build/chaosbed, 4)
# Exit: 0 when the targets are met, 1 when one is missed, 2 when a tool is missing or fails.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${1:-build/chaosbed}
ranks=${2:-4}
[ -x "$bin" ] || { echo "allreduce_compare: $bin is not an executable (build it first, or pass its path)" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3

missing=()
for p in openmpi-bin libopenmpi-dev libgloo-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  echo "allreduce_compare: installing ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 ||
    { echo "allreduce_compare: could not install ${missing[*]}" >&2; exit 2; }
fi

out=build-bench
mkdir -p "$out"
mpicc -O3 -o "$out/mpi_allreduce" bench/peers/mpi_allreduce.c ||
  { echo "allreduce_compare: mpicc failed" >&2; exit 2; }
g++ -O3 -std=c++17 -o "$out/gloo_allreduce" bench/peers/gloo_allreduce.cc -lgloo -lpthread ||
  { echo "allreduce_compare: building the Gloo peer failed" >&2; exit 2; }

sizes="1048576 16777216"
echo "ranks: $ranks  load: $(cut -d' ' -f1-3 /proc/loadavg)  UCX_TLS=${UCX_TLS:-<unset: all>}"

chaosbed_json=$("$bin" bench allreduce --ranks "$ranks" --json --bench_allreduce_max_bytes 16777216 2>/dev/null) ||
  { echo "allreduce_compare: $bin bench allreduce failed" >&2; exit 2; }
mpirun_args=(--allow-run-as-root --oversubscribe -np "$ranks")
mpi_default=$(mpirun "${mpirun_args[@]}" "$out/mpi_allreduce" $sizes 2>/dev/null) ||
  { echo "allreduce_compare: mpirun (default) failed" >&2; exit 2; }
# Open MPI 4.1's pml ucx only selects itself on InfiniBand devices unless told to take any transport.
mpi_ucx=$(mpirun "${mpirun_args[@]}" --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
  "$out/mpi_allreduce" $sizes 2>/dev/null) ||
  { echo "allreduce_compare: mpirun --mca pml ucx failed" >&2; exit 2; }

store=$(mktemp -d)
trap 'rm -rf "$store"' EXIT
pids=()
for ((r = 1; r < ranks; r++)); do
  timeout 300 "$out/gloo_allreduce" "$r" "$ranks" "$store" $sizes >/dev/null &
  pids+=($!)
done
gloo=$(timeout 300 "$out/gloo_allreduce" 0 "$ranks" "$store" $sizes) ||
  { echo "allreduce_compare: gloo_allreduce failed" >&2; kill "${pids[@]}" 2>/dev/null; exit 2; }
wait "${pids[@]}" || { echo "allreduce_compare: a gloo_allreduce rank failed" >&2; exit 2; }

"$py" - "$ranks" "$chaosbed_json" "$mpi_default" "$mpi_ucx" "$gloo" <<'PY'
import json, sys
n = int(sys.argv[1])
factor = 2 * (n - 1) / n
def busbw(bytes_, time_us): return bytes_ / (time_us * 1e-6) / 1e9 * factor
def peer(text): return {int(b): busbw(int(b), float(t)) for b, t in (l.split() for l in text.strip().splitlines())}
chaosbed = {r["bytes"]: r["busbw_gbps"] for r in map(json.loads, sys.argv[2].strip().splitlines())}
mpi, mpi_ucx, gloo = peer(sys.argv[3]), peer(sys.argv[4]), peer(sys.argv[5])
ok = True
print(f"{'size':>8} {'chaosbed':>9} {'ompi':>9} {'ompi+ucx':>9} {'gloo':>9}   busbw GB/s   ratios")
for b in (1 << 20, 16 << 20):
    c, m, mu, g = chaosbed[b], mpi[b], mpi_ucx[b], gloo[b]
    best = max(m, mu)
    r_mpi, r_gloo = c / best, c / g
    ok &= r_mpi >= 1.0 and r_gloo >= 5.0
    print(f"{b >> 20:>5} MiB {c:9.3f} {m:9.3f} {mu:9.3f} {g:9.3f}   "
          f"chaosbed/best-ompi {r_mpi:.2f} (>= 1.00)  chaosbed/gloo {r_gloo:.2f} (>= 5.00)")
print("targets: " + ("met" if ok else "MISSED"))
sys.exit(0 if ok else 1)
PY
