#!/usr/bin/env bash
# Metrics overhead against the observability targets: a scrape of /metrics during a 4-worker run < 10 ms,
# and metric updates < 1% of step time.
#   bench/metrics_bench.sh [BUILD_DIR]     (BUILD_DIR holds the `chaosbed` binary; default build)
# 1. builds bench/metrics_bench.cc (with the exporter's sources) and runs its micro-benchmarks;
# 2. runs experiments/scenarios/tiny-synthetic.yaml with 4 workers (if the binary exists), scrapes it every
#    25 ms for the whole run, and relates the per-step metrics cost to the run's mean step time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
work="$(mktemp -d /tmp/chaosbed_metrics_bench.XXXXXX)"
trap 'kill $run_pid 2>/dev/null || true; rm -rf "$work"' EXIT
run_pid=

[ -f "$build/core/libchaosbed_core.a" ] || { echo "metrics_bench: no $build/core/libchaosbed_core.a: build first (scripts/build.sh)" >&2; exit 4; }
# Against the built libraries, so that the bench measures the exporter the product runs.
g++ -std=c++20 -O2 -DNDEBUG -I"$root" -I"$build/generated/include" -o "$work/metrics_bench" "$root/bench/metrics_bench.cc" \
  "$build/core/libchaosbed_core.a" "$build/transports/libchaosbed_transports.a" \
  -lprometheus-cpp-core -lglog -lgflags -lyaml-cpp -lcrypto -lz -lucp -luct -lucs -lucm -lpthread
echo "== micro-benchmarks"
"$work/metrics_bench" micro | tee "$work/micro.txt"

if [ ! -x "$build/chaosbed" ]; then
  echo "== no $build/chaosbed: skipping the live 4-worker run"
  exit 0
fi
echo "== live scrape of a 4-worker run (tiny-synthetic with workers: 4)"
sed -e 's/^  workers: 2/  workers: 4/' "$root/experiments/scenarios/tiny-synthetic.yaml" > "$work/four.yaml"
grep -q '^  workers: 4' "$work/four.yaml" || { echo "metrics_bench: could not set workers: 4" >&2; exit 1; }
stdbuf -oL "$build/chaosbed" run "$work/four.yaml" --out "$work/results" --metrics_addr 127.0.0.1:0 > "$work/run.log" 2>&1 &
run_pid=$!
addr=
for _ in $(seq 1 600); do
  addr="$(sed -n 's|^metrics: http://\([^/]*\)/metrics.*|\1|p' "$work/run.log" | head -1)"
  [ -n "$addr" ] && break
  kill -0 $run_pid 2>/dev/null || break
  sleep 0.1
done
[ -n "$addr" ] || { echo "metrics_bench: the run printed no metrics address:" >&2; cat "$work/run.log" >&2; exit 1; }
"$work/metrics_bench" scrape "$addr" 120 | tee "$work/live.txt" || echo "metrics_bench: no scrape of the run succeeded"
wait $run_pid || { rc=$?; echo "(chaosbed run exited with $rc):"; tail -5 "$work/run.log"; }
run_pid=

step_ms="$(sed -n 's/^run_mean_step_ms: \([0-9.]*\).*/\1/p' "$work/live.txt")"
acct_ns="$(sed -n 's/^node_accounting_per_step_ns: \([0-9.]*\)/\1/p' "$work/micro.txt")"
if [ -n "$step_ms" ]; then
  awk -v ns="$acct_ns" -v ms="$step_ms" \
    'BEGIN { printf "metrics_cost_per_step: %.1f ns of a %.3f ms step = %.4f%% (target < 1%%)\n", ns, ms, 100 * ns / (ms * 1e6) }'
fi
