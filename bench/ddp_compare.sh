#!/usr/bin/env bash
# Time to accuracy 0.85 on Fashion-MNIST: chaosbed `mirrored` vs PyTorch DDP (gloo), 2 and 4 workers, no faults,
# no CPU quota, same recipe (MLP 784-256-128-10, global batch 256 split over the workers, SGD lr 0.1 momentum
# 0.9). chaosbed runs bench/scenarios/ddp-<N>w.yaml (snapshots every 0.25 s, evaluated off the critical path)
# and its TTA is strategies.mirrored.tta_seconds of summary.json; PyTorch runs bench/torch_ddp.py (test accuracy
# every 50 steps, evaluation time excluded from its clock). Each pair is run REPEATS times, alternating, and the
# medians are compared: ratio = chaosbed / PyTorch (target <= 1.0; a run that misses the target counts as
# infinitely slow). Also prints DDP's share of training time spent in gloo's all-reduce and mirrored's idle
# fraction.
#
# Usage: bench/ddp_compare.sh [REPEATS]   (default 3)
#   CHAOSBED=path/to/chaosbed (default build/chaosbed)   WORKERS="2 4"   OUT=dir for the runs (default: a new
#   temporary directory, kept and printed)
# Exit status: 0 when every run completed (whether or not it reached the target), 1 when a run failed (its log
# is named), 4 when chaosbed or torch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
chaosbed=${CHAOSBED:-build/chaosbed}
read -ra workers <<<"${WORKERS:-2 4}"
python=/usr/bin/python3  # Debian's Python: python3-torch on the system OpenBLAS

[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "ddp_compare: REPEATS must be a positive integer, got '$repeats'" >&2; exit 2; }
[ -x "$chaosbed" ] || { echo "ddp_compare: $chaosbed not found: build first or set CHAOSBED" >&2; exit 4; }
"$python" -c 'import torch, torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null ||
  { echo "ddp_compare: $python has no torch with gloo: apt-get install python3-torch" >&2; exit 4; }
for w in "${workers[@]}"; do
  [ -f "bench/scenarios/ddp-${w}w.yaml" ] || { echo "ddp_compare: no bench/scenarios/ddp-${w}w.yaml" >&2; exit 2; }
done
out=${OUT:-$(mktemp -d /tmp/ddp_compare.XXXXXX)}
mkdir -p "$out"

echo "chaosbed: $chaosbed   runs: $out   repeats: $repeats   load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "system BLAS: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo unknown)," \
  "torch $("$python" -c 'import torch; print(torch.__version__)')"

failed=0
for ((i = 1; i <= repeats; i++)); do
  for w in "${workers[@]}"; do
    run="$out/chaosbed-${w}w-$i"
    if ! "$chaosbed" run "bench/scenarios/ddp-${w}w.yaml" --out "$run" >"$run.log" 2>&1 ||
       [ ! -f "$run/summary.json" ]; then
      echo "ddp_compare: chaosbed run, $w workers, repeat $i failed: see $run.log" >&2
      failed=1
    fi
    if ! "$python" bench/torch_ddp.py --workers "$w" --json >"$out/ddp-${w}w-$i.json" 2>"$out/ddp-${w}w-$i.log"; then
      echo "ddp_compare: torch_ddp.py, $w workers, repeat $i failed: see $out/ddp-${w}w-$i.log" >&2
      failed=1
    fi
    echo "  repeat $i, $w workers: done"
  done
done

"$python" - "$out" "$repeats" "${workers[@]}" <<'PY'
import json, math, os, statistics, sys

out, repeats, workers = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def fmt(x, unit=" s"):
    return "not reached" if x is None or math.isinf(x) else f"{x:.2f}{unit}"

def target_step(run_dir, target):
    """The step of the first evaluated snapshot that reached the target (events.jsonl), or None."""
    try:
        with open(os.path.join(run_dir, "events.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("type") == "eval" and e.get("strategy") == "mirrored" and e.get("accuracy", 0) >= target:
                    return e.get("step")
    except (OSError, ValueError):
        pass
    return None

def med(values):
    return statistics.median(values) if values else None

print(f"\n{'workers':>7}  {'chaosbed mirrored TTA':>22}  {'pytorch DDP TTA':>16}  {'ratio':>6}  "
      f"{'mirrored idle':>13}  {'DDP in all-reduce':>17}  {'steps to target':>15}  runs (chaosbed | pytorch)")
for w in workers:
    ours, theirs, idle, allreduce, our_steps, their_steps = [], [], [], [], [], []
    for i in range(1, repeats + 1):
        run_dir = os.path.join(out, f"chaosbed-{w}w-{i}")
        s = load(os.path.join(run_dir, "summary.json"))
        m = (s or {}).get("strategies", {}).get("mirrored")
        if m is not None:
            ours.append(m["tta_seconds"] if m.get("tta_seconds") is not None else math.inf)
            idle.append(m.get("idle_fraction"))
            if m.get("tta_seconds") is not None:
                our_steps.append(target_step(run_dir, s.get("target_accuracy", 0.85)))
        d = load(os.path.join(out, f"ddp-{w}w-{i}.json"))
        if d is not None:
            theirs.append(d["tta_seconds"] if d.get("tta_seconds") is not None else math.inf)
            allreduce.append(d.get("allreduce_fraction"))
            if d.get("reached_target"):
                their_steps.append(d.get("steps"))
    a, b = med(ours), med(theirs)
    ratio = f"{a / b:.2f}x" if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) else "-"
    idle_m = med([x for x in idle if x is not None])
    ar_m = med([x for x in allreduce if x is not None])
    steps = "{} | {}".format(*(f"{med(x):.0f}" if x else "-" for x in
                               ([v for v in our_steps if v is not None], their_steps)))
    runs = " ".join(fmt(x, "") for x in ours) + " | " + " ".join(fmt(x, "") for x in theirs)
    print(f"{w:>7}  {fmt(a):>22}  {fmt(b):>16}  {ratio:>6}  "
          f"{'-' if idle_m is None else f'{100 * idle_m:.0f}%':>13}  "
          f"{'-' if ar_m is None else f'{100 * ar_m:.0f}%':>17}  {steps:>15}  {runs}")
print("TTA and steps to target (chaosbed | pytorch): medians of the runs; ratio chaosbed / pytorch (target <= 1.0,\n"
      "aim 0.5 at 4 workers). chaosbed evaluates a snapshot every 0.25 s, PyTorch every 50 steps.")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
exit "$failed"
