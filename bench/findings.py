#!/usr/bin/python3
"""Writes a sweep's finding (Markdown) from its result files alone: no number in it is typed by hand.

  bench/findings.py --sweep SWEEP_DIR [--tune TUNE_DIR] [--noise NOISE_DIR] --out DIR --name NAME

Reads SWEEP_DIR/sweep.csv (and each point's summary.json for the recipes and provenance), TUNE_DIR/tune.json
(the recipe grid and each strategy's winner) and NOISE_DIR/noise.json (the no-fault spread); writes
DIR/NAME.md, a copy of the CSV as DIR/NAME.csv and the sweep figure DIR/NAME.svg (bench/plot.py).
The verdict at each rate is read off the TTA ratio paired by seed (experiments/stats/paired.h): its p-value
after Holm's correction over every comparison of the sweep below 0.05, and the ratio's side of 1 (below: the
parameter server is faster, above: slower); otherwise not separated by this many seeds.
"""
import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys


def fnum(v, digits=2):
    return "–" if v in ("", None) else f"{float(v):.{digits}f}"


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"findings.py: {path}: {e}")


def verdict(r):
    """The paired comparison's verdict: decided only where Holm's corrected p-value is below 0.05."""
    if r.get("paired_p_holm", "") == "":
        return "no pairs"
    if float(r["paired_p_holm"]) >= 0.05:
        return "not separated"
    return "**parameter server faster**" if float(r["paired_ratio"]) < 1 else "**mirrored faster**"


def interval(r):
    hi = r["paired_high"]
    return f"[{fnum(r['paired_low'])}, {'∞' if hi == 'inf' else fnum(hi)}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--tune")
    ap.add_argument("--noise")
    ap.add_argument("--out", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--command", default="", help="the command line that produced the inputs, quoted in the text")
    ap.add_argument("--allow-dirty", action="store_true", help="accept points run by a binary built from a dirty tree")
    args = ap.parse_args()

    csv_path = os.path.join(args.sweep, "sweep.csv")
    with open(csv_path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames
    # The grid's axes (one column each); a point's label names its values, a baseline's its non-chaos ones.
    axes = header[header.index("seed") + 1:header.index("strategy")]
    axis = " / ".join(a.rsplit(".", 1)[-1] for a in axes) if axes else None

    def label_of(r):
        values = [r.get(a, "") for a in axes]
        if len(axes) == 1:
            return values[0]
        text = ", ".join(f"{a.rsplit('.', 1)[-1]} {v}" for a, v in zip(axes, values) if v != "")
        return text + (" (no faults)" if r.get("baseline") == "1" else "") if text else ""

    def sort_key(r):
        return tuple((0, 0.0) if r.get(a, "") == "" else (1, float(r[a])) for a in axes)
    points = [r for r in rows if r["row"] == "point"]
    summaries = [r for r in rows if r["row"] == "summary"]
    strategies = []
    for r in summaries:
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])

    # Recipes, kinds and provenance from the points' own summaries.
    recipes, kinds, provenance, s = {}, {}, [], {}
    ratios = {}  # (emulated profile, strategy) -> ([measured comm/compute ratios], target)
    for path in sorted(glob.glob(os.path.join(args.sweep, "points", "*", "summary.json"))):
        s = load_json(path)  # the last one also names the experiment and its target below
        provenance.append(s.get("provenance", {}))
        em = s.get("emulation")
        for label, st in s.get("strategies", {}).items():
            recipes.setdefault(label, st.get("recipe"))
            kinds.setdefault(label, st.get("kind"))
            ccr = st.get("comm_compute_ratio") or {}
            if em and isinstance(ccr.get("measured"), (int, float)):
                profile = (em.get("model"), em.get("accelerator"), float(em.get("network_gbps", 0)))
                ratios.setdefault((profile, label), ([], ccr.get("target")))[0].append(ccr["measured"])
    experiment = s.get("experiment", args.name)
    target = s.get("target_accuracy")
    commits = sorted({(p.get("commit", "?"), bool(p.get("dirty"))) for p in provenance})
    if any(d for _, d in commits) and not args.allow_dirty:
        sys.exit(f"findings.py: {args.sweep}: some points ran a binary built from a dirty tree ("
                 + ", ".join(c for c, d in commits if d) + "); a finding is made from a commit "
                 "(rebuild from a clean tree, or --allow-dirty for a draft)")
    loads = [p["load1_at_start"] for p in provenance if isinstance(p.get("load1_at_start"), (int, float))]
    busy = [p["cpu_busy_at_start"] for p in provenance if isinstance(p.get("cpu_busy_at_start"), (int, float))]
    cores = sorted({p.get("cpu_cores") or p.get("cores") for p in provenance} - {None})
    cpus = sorted({p.get("cpu_model", "") for p in provenance} - {""})
    hosts = sorted({p.get("host", "") for p in provenance} - {""})
    seeds = sorted({int(r["seed"]) for r in points})
    starts = sorted(p.get("started_at", "") for p in provenance if p.get("started_at"))
    ends = sorted(p.get("ended_at", "") for p in provenance if p.get("ended_at"))
    unquiet = sum(1 for p in provenance if p.get("quiet") is False)
    ps = next((l for l in strategies if kinds.get(l) == "parameter_server"), None)
    mirrored = [l for l in strategies if kinds.get(l) == "mirrored"]

    def groups():
        seen, keys = [], {}
        for r in summaries:
            if r["group"] not in keys:
                keys[r["group"]] = sort_key(r)
                seen.append((r["group"], label_of(r)))
        # the baselines first, then the swept values in numeric order (axis by axis)
        return sorted(seen, key=lambda g: keys[g[0]])

    def row(group, label):
        return next((r for r in summaries if r["group"] == group and r["strategy"] == label), None)

    out = []
    w = out.append
    w(f"# {experiment}: where does the parameter server overtake synchronous all-reduce?\n")
    w(f"Generated by `bench/findings.py` from the sweep's own files ({os.path.basename(csv_path)}, each point's "
      "summary.json" + (", tune.json" if args.tune else "") + (", noise.json" if args.noise else "") +
      "); no number here is typed by hand." + (f" Regenerate: `{args.command}`." if args.command else "") + "\n")

    # The verdicts.
    w("## Verdict per rate\n")
    w(f"TTA ratio parameter server / mirrored strategy, paired by seed, with its interval and confidence level, "
      f"and Holm's corrected p-value over all {sum(1 for r in summaries if r.get('paired_p_holm', '') != '' and kinds.get(r['strategy']) == 'mirrored')} "
      f"comparisons of this sweep (experiments/stats/paired.h). Without censoring: the geometric mean of the "
      f"per-seed ratios and Student's t on their logs. A run that never reached the target is censored at the "
      f"time limit: its pair's ratio is then only a bound, and the point's estimate is the median ratio with a "
      f"distribution-free (sign-test) interval, whose level falls below 95% with few seeds. A verdict needs the "
      f"corrected p-value below 0.05. Below 1 the parameter server reached {target} first.\n")
    head = "| " + (axis or "point") + " | " + " | ".join(f"PS / {m}" for m in mirrored) + " |"
    w(head)
    w("|" + "---|" * (1 + len(mirrored)))
    for group, x in groups():
        cells = []
        for m in mirrored:
            r = row(group, m)
            if not r or r.get("paired_ratio", "") == "":
                cells.append("–")
                continue
            cells.append(f"{fnum(r['paired_ratio'])} {interval(r)} at {100 * float(r['paired_level']):.1f}%, "
                         f"p = {fnum(r['paired_p'], 3)} (Holm {fnum(r['paired_p_holm'], 3)}), "
                         f"{r['paired_censored']}/{r['paired_n']} censored"
                         + (f", seeds stopped: {r['seeds_stop']}" if r.get("seeds_stop") else "")
                         + f": {verdict(r)}")
        w(f"| {x or 'none (baseline)'} | " + " | ".join(cells) + " |")
    w("")
    for m in mirrored:
        faster = [x for g, x in groups() if x and row(g, m) and verdict(row(g, m)).startswith("**parameter")]
        slower = [x for g, x in groups() if x and row(g, m) and verdict(row(g, m)).startswith("**mirrored")]
        w(f"- Against `{m}`: the parameter server is faster (Holm-corrected p < 0.05) at "
          f"{', '.join(faster) if faster else 'no rate'}; slower at {', '.join(slower) if slower else 'no rate'}"
          f" ({axis}).")
    w("")

    if ratios:
        w("## Communication/computation ratio of each emulated regime\n")
        w("Workers' transfer seconds / compute seconds (summary.json `comm_compute_ratio`), mean over the runs of "
          "each emulated profile (every run, faults or not), beside the profile's target (docs/design.md §2.7). "
          "Accuracy is the small real model's, not the emulated model's. A ratio far below its target is "
          "bounded by the small model's own step: the emulated compute cannot be shorter than the real one, so "
          "such a regime runs at the highest ratio this machine reaches, not at its target.\n")
        w("| emulated job | strategy | runs | measured ratio (mean) | target | off by |")
        w("|---|---|---|---|---|---|")
        for (profile, label), (measured, target) in sorted(ratios.items(), key=lambda kv: (kv[0][0][2], kv[0][1])):
            mean = sum(measured) / len(measured)
            off = f"{100 * (mean / target - 1):+.0f}%" if isinstance(target, (int, float)) and target else "–"
            w(f"| {profile[0]} on {profile[1]} at {profile[2]:g} Gb/s | {label} | {len(measured)} | "
              f"{fnum(mean)} | {fnum(target)} | {off} |")
        w("")

    # TTA per strategy.
    w("## Time to accuracy per strategy\n")
    w("Geometric mean and its 95% interval (Student's t on log TTA) over the runs that reached the target, how "
      "many did, and the restricted mean (every unreached run counted as the time limit: a lower bound on the "
      "mean).\n")
    w("| " + (axis or "point") + " | strategy | reached | geometric mean TTA (s) [95% CI] | restricted mean (s) | MTBF ÷ no-fault TTA |")
    w("|---|---|---|---|---|---|")
    for group, x in groups():
        for label in strategies:
            r = row(group, label)
            if not r:
                continue
            ci = (f"{fnum(r['tta_geomean'], 1)} [{fnum(r['tta_ci95_low'], 1)}, {fnum(r['tta_ci95_high'], 1)}]"
                  if r.get("tta_geomean") else "–")
            w(f"| {x or 'none'} | {label} | {r['reached']}/{r['runs']} | {ci} | {fnum(r['tta_restricted_mean'], 1)} | "
              f"{fnum(r.get('mtbf_over_baseline_tta', ''), 1)} |")
    w("")

    # Per seed, so that the pairing can be seen.
    w("## Every run\n")
    w("Sustained TTA in seconds per seed (– : not reached within the time limit).\n")
    w("| " + (axis or "point") + " | seed | " + " | ".join(strategies) + " |")
    w("|---|---|" + "---|" * len(strategies))
    for group, x in groups():
        for seed in seeds:
            cells = []
            for label in strategies:
                r = next((p for p in points if p["group"] == group and p["strategy"] == label
                          and int(p["seed"]) == seed), None)
                t = r.get("tta_sustained_seconds", r.get("tta_seconds")) if r else None  # older sweeps: first crossing
                cells.append(fnum(t, 1) if t else ("–" if r else "not run"))
            w(f"| {x or 'none'} | {seed} | " + " | ".join(cells) + " |")
    w("")

    # What was run.
    w("## What was run\n")
    if args.command:
        w(f"```sh\n{args.command}\n```\n")
    w(f"- Seeds: {', '.join(map(str, seeds))} ({len(seeds)} per point); {len(points)} strategy runs in "
      f"{len(provenance)} points, strategies interleaved (odd seeds run them in reverse order).")
    for label in strategies:
        rc = recipes.get(label) or {}
        w(f"- `{label}` ({kinds.get(label, '?')}): learning rate {rc.get('learning_rate', '?')}, momentum "
          f"{rc.get('momentum', '?')}, batch {rc.get('batch_per_worker', '?')} per worker, weight decay "
          f"{rc.get('weight_decay', '?')}.")
    if args.tune:
        t = load_json(os.path.join(args.tune, "tune.json"))
        w(f"- Recipes: each strategy's winner of `chaosbed tune` without faults over seeds "
          f"{', '.join(map(str, t.get('seeds', [])))} (score: {t.get('score', '?')}):")
        for label, st in t.get("strategies", {}).items():
            grid = ", ".join(f"lr {r['learning_rate']} m {r['momentum']}: {fnum(r['score_s'], 1)} s"
                             for r in st.get("recipes", []))
            wn = st.get("winner", {})
            tie = f" ({wn['tie']})" if wn.get("tie") else ""
            grown = f" (grown past its edge {st['grid_grown']} time(s))" if st.get("grid_grown") else ""
            w(f"  - `{label}`: winner lr {wn.get('learning_rate')} momentum {wn.get('momentum')} "
              f"({fnum(wn.get('score_s'), 1)} s){tie}; grid{grown}: {grid}.")
    if args.noise:
        n = load_json(os.path.join(args.noise, "noise.json"))
        parts = []
        for label, st in n.get("strategies", {}).items():
            tta = st.get("tta_sustained_seconds", {})
            parts.append(f"`{label}` CV {fnum(tta.get('cv'))} (mean {fnum(tta.get('mean_s'), 1)} s, sd "
                         f"{fnum(tta.get('sd_s'), 1)} s, {tta.get('reached')}/{tta.get('runs')} reached)")
        w(f"- No-fault spread of sustained TTA (`chaosbed noise {n.get('spec', '')} --runs {n.get('runs')}`): "
          + "; ".join(parts) + ". A difference smaller than this spread is noise.")
    w(f"- Machine: {', '.join(hosts) or '?'}; {', '.join(cpus) or '?'}, {', '.join(map(str, cores)) or '?'} cores. "
      + (f"CPU busy in the 200 ms before each point (/proc/stat): median {fnum(100 * sorted(busy)[len(busy) // 2], 1)}%, "
         f"max {fnum(100 * max(busy), 1)}%; " if busy else "")
      + f"{unquiet} of {len(provenance)} points started on a busy machine (marked not quiet). The 1-minute load "
      f"average at a point's start (median {fnum(sorted(loads)[len(loads) // 2]) if loads else '?'}) still holds "
      "the previous run's own load, so it is recorded but not what quiet means.")
    w(f"- Build: " + "; ".join(f"{c}{' (dirty tree)' if d else ''}" for c, d in commits) + ".")
    if starts and ends:
        w(f"- From {starts[0]} to {ends[-1]} (UTC).")
    w("")
    w(f"Data: [{args.name}.csv]({args.name}.csv) (the sweep's `sweep.csv`), figure "
      f"[{args.name}.svg]({args.name}.svg) (`bench/plot.py`): geometric mean sustained TTA per strategy and the paired ratio.\n")

    os.makedirs(args.out, exist_ok=True)
    shutil.copyfile(csv_path, os.path.join(args.out, f"{args.name}.csv"))
    plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
    tmp = os.path.join(args.out, ".figure")
    subprocess.run([sys.executable, plot, csv_path, "--out", tmp, "--formats", "svg"], check=True,
                   stdout=subprocess.DEVNULL)
    os.replace(os.path.join(tmp, "sweep.svg"), os.path.join(args.out, f"{args.name}.svg"))
    shutil.rmtree(tmp, ignore_errors=True)
    md = os.path.join(args.out, f"{args.name}.md")
    with open(md + ".tmp", "w") as f:
        f.write("\n".join(out))
    os.replace(md + ".tmp", md)
    print(md)


if __name__ == "__main__":
    main()
