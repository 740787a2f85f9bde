#!/usr/bin/env bash
# Compares `chaosbed bench p2p` with UCX's own ucx_perftest on this machine (both over loopback between two
# processes, same environment and so the same UCX_TLS): tag_bw at 16 MiB and tag_lat at 8 B, then prints
# both figures and the ratios against the targets (bandwidth >= 0.9x perftest, latency <= 1.5x perftest):
# ROUNDS interleaved rounds (perftest, then chaosbed), medians of the figures and of the per-round ratios.
# ucx_perftest runs without -e (no peer error handling), as the chaosbed data path does.
# Usage: bench/p2p_vs_perftest.sh [CHAOSBED_BINARY] [ROUNDS]   (defaults: build/chaosbed, 3)
# Exit: 0 when both targets are met, 1 when one is missed, 2 when a tool is missing or fails.
# Both sides spin on the CPU: it refuses to start unless the load is below 0.5 per core (bench/quiet.sh).
set -euo pipefail

bin=${1:-build/chaosbed}
rounds=${2:-3}
[ -x "$bin" ] || { echo "p2p_vs_perftest: $bin is not an executable (build it first, or pass its path)" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "p2p_vs_perftest: ucx_perftest not found (apt install ucx-utils)" >&2; exit 2; }
source "$(dirname "$0")/quiet.sh"
require_quiet p2p_vs_perftest
py=/usr/bin/python3
[ -x "$py" ] || py=python3

# run_perftest TEST SIZE ITERATIONS: prints the "Final:" line of the client.
run_perftest() {
  local test=$1 size=$2 iters=$3 port out server
  port=$((20000 + RANDOM % 20000))
  ucx_perftest -t "$test" -s "$size" -n "$iters" -p "$port" >/dev/null 2>&1 &
  server=$!
  # The server needs a moment to listen; the client fails fast until it does.
  for _ in $(seq 1 100); do
    if out=$(ucx_perftest 127.0.0.1 -t "$test" -s "$size" -n "$iters" -p "$port" 2>&1); then
      wait "$server" || true
      grep '^Final:' <<<"$out" && return 0
      break
    fi
    sleep 0.1
  done
  kill "$server" 2>/dev/null || true
  echo "p2p_vs_perftest: ucx_perftest $test failed: $out" >&2
  return 2
}

echo "UCX_TLS=${UCX_TLS:-<unset: all>}  rounds: $rounds  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  bw_line=$(run_perftest tag_bw 16777216 200) || exit 2
  lat_line=$(run_perftest tag_lat 8 100000) || exit 2
  # Final: iterations p50 avg overall bw_avg bw_overall rate_avg rate_overall (MB/s means MiB/s in perftest)
  perf_bw=$(awk '{printf "%.3f", $7 * 1048576 / 1e9}' <<<"$bw_line")
  perf_lat=$(awk '{printf "%.3f", $5}' <<<"$lat_line")
  json=$("$bin" bench p2p --json 2>/dev/null) || { echo "p2p_vs_perftest: $bin bench p2p failed" >&2; exit 2; }
  "$py" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$perf_bw" "$perf_lat" "$json" >>"$raw"
done
"$py" - "$raw" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys
bws, lats, bw_ratios, lat_ratios, perf_bws, perf_lats = [], [], [], [], [], []
for line in open(sys.argv[1]):
    perf_bw, perf_lat, text = json.loads(line)
    rows = {r["bytes"]: r for r in map(json.loads, text.strip().split("\n"))}
    bw, lat = rows[16777216]["bw_gbps"], rows[8]["lat_us"]
    bws.append(bw); lats.append(lat); perf_bws.append(float(perf_bw)); perf_lats.append(float(perf_lat))
    bw_ratios.append(bw / float(perf_bw)); lat_ratios.append(lat / float(perf_lat))
m = statistics.median
print(f"medians of {len(bws)} interleaved rounds:")
print(f"16 MiB bandwidth: chaosbed {m(bws):.3f} GB/s, ucx_perftest tag_bw {m(perf_bws):.3f} GB/s, ratio {m(bw_ratios):.2f} (target >= 0.90)")
print(f"8 B latency:      chaosbed {m(lats):.3f} us,   ucx_perftest tag_lat {m(perf_lats):.3f} us,   ratio {m(lat_ratios):.2f} (target <= 1.50)")
print(f"load at end: {sys.argv[2]}")
ok = m(bw_ratios) >= 0.9 and m(lat_ratios) <= 1.5
print("targets: " + ("met" if ok else "MISSED"))
sys.exit(0 if ok else 1)
PY
