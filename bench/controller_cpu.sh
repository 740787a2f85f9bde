#!/usr/bin/env bash
# The controller's own CPU over a many-node run: runs experiments/scenarios/many-workers.yaml with one
# strategy (default parameter_server: 64 workers, 4 server shards and the evaluator, 69 nodes) and samples
# the `chaosbed run` process's utime+stime (its own threads, not its children) from /proc once a second.
# Prints its CPU seconds, their share of one core over the process's life, and the load at start and end.
# Usage: bench/controller_cpu.sh [STRATEGY] [TIME_LIMIT_S] [CHAOSBED_BINARY]
# Refuses to start unless the 1-minute load is below 0.5 per core: a figure taken under load is not a result.
set -euo pipefail
cd "$(dirname "$0")/.."
strategy=${1:-parameter_server}
limit=${2:-40}
bin=${3:-build/chaosbed}
[ -x "$bin" ] || { echo "controller_cpu: $bin is not an executable (build it first, or pass its path)" >&2; exit 2; }
source bench/quiet.sh
require_quiet controller_cpu
out=$(mktemp -d /tmp/chaosbed-controller-cpu.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "strategy: $strategy  time limit: ${limit} s  load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin" run experiments/scenarios/many-workers.yaml --out "$out/run" --set "training.time_limit_s=$limit" \
  --set "strategies=[{name: $strategy}]" >"$out/log" 2>&1 &
pid=$!
started=$(date +%s.%N)
tick=$(getconf CLK_TCK)
ticks=0
# Sampled every 0.2 s with shell builtins (only the sleep is a process), so sampling adds next to no load;
# the CPU of the process's last 0.2 s is what the figure can miss.
while kill -0 "$pid" 2>/dev/null; do
  if read -r stat <"/proc/$pid/stat" 2>/dev/null; then
    # After the parenthesised name: state is field 3, utime and stime fields 14 and 15.
    read -r -a fields <<<"${stat##*) }"
    ticks=$((fields[11] + fields[12]))
  fi
  sleep 0.2
done
rc=0
wait "$pid" || rc=$?
ended=$(date +%s.%N)
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$rc" -eq 0 ] || { echo "controller_cpu: the run failed (exit $rc):" >&2; tail -20 "$out/log" >&2; exit 2; }
/usr/bin/python3 - "$out/run/summary.json" "$strategy" "$ticks" "$tick" "$started" "$ended" <<'EOF'
import json, sys
summary, strategy = json.load(open(sys.argv[1])), sys.argv[2]
cpu = int(sys.argv[3]) / int(sys.argv[4])
life = float(sys.argv[6]) - float(sys.argv[5])
wall = summary["strategies"][strategy]["wall_seconds"]
print(f"controller CPU: {cpu:.2f} s in its {life:.1f} s life (training {wall:.1f} s, plus start-up and shutdown): "
      f"{100 * cpu / life:.1f}% of a core")
EOF
