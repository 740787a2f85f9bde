#!/usr/bin/env bash
# The controller at scale: runs experiments/scenarios/control-plane-256.yaml (simulated nodes: control plane
# only, no training; a kill wave and a pause) with cluster.workers set to each SIZE, and prints per size and
# strategy what summary.json's control_plane measured (node events taken, their latency from the node's
# append to the controller's read: p50, p99, max; the controller's CPU as a share of one core and its peak
# RSS) and, from events.jsonl, how long a membership generation published after training started took to
# reach its members (p50 of every member's delay, and the median over generations of the slowest member's).
# Each size starts only once the 1-minute load is below 0.5 per core (a run of hundreds of processes
# leaves it high for minutes; it waits up to 15 minutes, then refuses). The nodes themselves share the
# machine's cores with the controller: the load at the start and the end of each size is printed beside it.
# Usage: bench/control_plane_scale.sh [CHAOSBED_BINARY] [SIZES...]   (defaults: build/chaosbed 64 256 512)
# Exit: 0 when every run completed, 2 when one failed or a tool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/chaosbed}
shift || true
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(64 256 512)
[ -x "$bin" ] || { echo "control_plane_scale: $bin is not an executable (build it first, or pass its path)" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || py=python3
source bench/quiet.sh
cores=$quiet_cores
out=$(mktemp -d /tmp/chaosbed-control-plane.XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "scenario: experiments/scenarios/control-plane-256.yaml  cores: $cores"
printf '%6s %-17s %7s %9s %9s %9s %6s %7s %12s %12s %6s %s\n' nodes strategy events "p50 ms" "p99 ms" "max ms" cpu "rss MB" "memb p50 ms" "memb all ms" "load1 at start" "load at end"
for n in "${sizes[@]}"; do
  wait_quiet 900 >/dev/null || { echo "control_plane_scale: the CPUs stayed busy (${quiet_busy}%, load $(quiet_load)) on $cores cores" >&2; exit 2; }
  load_start=$(cut -d' ' -f1 /proc/loadavg)
  if ! "$bin" run experiments/scenarios/control-plane-256.yaml --out "$out/$n" --set "cluster.workers=$n" \
      --metrics_addr off >"$out/$n.log" 2>&1; then
    echo "control_plane_scale: the run with $n workers failed:" >&2
    tail -20 "$out/$n.log" >&2
    exit 2
  fi
  "$py" - "$out/$n" "$load_start" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'EOF'
import json, statistics, sys
run, load_start, load = sys.argv[1], sys.argv[2], sys.argv[3]
summary = json.load(open(f"{run}/summary.json"))
events = [json.loads(line) for line in open(f"{run}/events.jsonl")]
def ms(x): return "-" if x is None else f"{x:.0f}"
for label, s in summary["strategies"].items():
    cp = s["control_plane"]
    published = {e["membership"]["generation"]: (e["t"], e["membership"]["workers"])
                 for e in events if e.get("type") == "membership" and e.get("strategy") == label}
    seen = {}
    for e in events:
        if e.get("type") == "membership.seen" and e.get("strategy") == label:
            seen.setdefault((e["generation"], e["node"]), e["t"])
    delays, slowest = [], []
    for g, (t, workers) in published.items():
        if g == 0:
            continue  # published before training: members see it as they start, not as it is published
        d = [seen[(g, f"worker-{w}")] - t for w in workers if (g, f"worker-{w}") in seen]
        if d:
            delays += d
            slowest.append(max(d))
    print(f"{run.rsplit('/', 1)[1]:>6} {label:<17} {cp['events']:>7} {ms(cp['event_latency_ms']['p50']):>9} "
          f"{ms(cp['event_latency_ms']['p99']):>9} {ms(cp['event_latency_ms']['max']):>9} "
          f"{cp['controller_cpu_fraction']:>6.2f} {cp['controller_peak_rss_mb']:>7.1f} "
          f"{ms(statistics.median(delays) * 1e3 if delays else None):>12} "
          f"{ms(statistics.median(slowest) * 1e3 if slowest else None):>12} {load_start:>6} {load}")
EOF
done
echo "nodes: workers (plus 4 servers for parameter_server, and the evaluator); cpu: the controller's CPU seconds"
echo "per second of training (1.00 = one core); memb: membership generations after the start (mirrored elastic)"
