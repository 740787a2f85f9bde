#!/usr/bin/python3
"""bench/plot.py end to end: a real run of experiments/scenarios/tiny-synthetic.yaml, then its figures.

Checks that the run's node_timeseries.csv has every node with cumulative times that never decrease, that
plot.py writes accuracy and nodetime figures as PDF and SVG with a step line and evaluation markers per
strategy and a TTA marker per strategy that reached the target, that it plots the recorded sweep of
docs/findings, and that malformed input exits 2 naming the file and line. Exit 77 (skip) without matplotlib.

Usage: check_plots.py CHAOSBED REPO
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PY = "/usr/bin/python3"  # Debian's Python, where python3-matplotlib lives


def svg_ids(path):
    return {e.get("id") for e in ET.parse(path).iter() if e.get("id")}


def main():
    chaosbed, repo = sys.argv[1], sys.argv[2]
    if subprocess.run([PY, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        print("SKIP: python3-matplotlib is not installed (scripts/install-deps.sh installs it)")
        return 77
    plot = os.path.join(repo, "bench/plot.py")
    failures = []
    work = tempfile.mkdtemp(prefix="chaosbed-plots-")
    try:
        results = os.path.join(work, "run")
        run = subprocess.run([chaosbed, "run", os.path.join(repo, "experiments/scenarios/tiny-synthetic.yaml"),
                              "--out", results, "--metrics_addr", "off"], capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stdout[-3000:], run.stderr[-3000:])
            print(f"FAIL: chaosbed run exited {run.returncode}")
            return 1
        with open(os.path.join(results, "summary.json")) as f:
            summary = json.load(f)
        labels = list(summary["strategies"])

        # The product's data: every node of every strategy, cumulative times that never decrease.
        with open(os.path.join(results, "node_timeseries.csv")) as f:
            rows = list(csv.DictReader(f))
        last = {}
        for r in rows:
            key = (r["strategy"], r["node"])
            values = [float(v) for k, v in r.items() if k.endswith("_s")]
            if key in last and any(v < p - 1e-9 for v, p in zip(values, last[key])):
                failures.append(f"node_timeseries.csv: {key} decreases at t={r['time_s']}")
            last[key] = values
        for label in labels:
            nodes = {n for s, n in last if s == label}
            kind = summary["strategies"][label].get("kind")
            for want in ("worker-0", "worker-1", "evaluator-0") + (("ps-0",) if kind == "parameter_server" else ()):
                if want not in nodes:
                    failures.append(f"node_timeseries.csv: no rows for {label}/{want} (has {sorted(nodes)})")
        with open(os.path.join(results, "report.html")) as f:
            report = f.read()
        for label in labels:
            if f'class="nodetime" data-strategy="{label}" data-node="worker-0"' not in report:
                failures.append(f"report.html: no node-time lane for {label}/worker-0")

        out = os.path.join(work, "figures")
        p = subprocess.run([PY, plot, results, "--out", out], capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"plot.py {results} exited {p.returncode}: {p.stderr.strip()}")
        else:
            for name in ("accuracy", "nodetime"):
                for ext in ("pdf", "svg"):
                    if not os.path.exists(os.path.join(out, f"{name}.{ext}")):
                        failures.append(f"plot.py wrote no {name}.{ext}")
            with open(os.path.join(out, "accuracy.pdf"), "rb") as f:
                if not f.read(5) == b"%PDF-":
                    failures.append("accuracy.pdf is not a PDF")
            ids = svg_ids(os.path.join(out, "accuracy.svg"))
            for label in labels:
                for want in (f"accuracy-{label}", f"evaluations-{label}"):
                    if want not in ids:
                        failures.append(f"accuracy.svg: no {want}")
                reached = isinstance(summary["strategies"][label].get("tta_seconds"), (int, float))
                if reached != (f"tta-{label}" in ids):
                    failures.append(f"accuracy.svg: TTA marker of {label} {'missing' if reached else 'without a TTA'}")
            node_ids = svg_ids(os.path.join(out, "nodetime.svg"))
            for label in labels:
                if f"nodetime-{label}-compute_s" not in node_ids:
                    failures.append(f"nodetime.svg: no compute area for {label}")

        # A recorded sweep.
        sweep_out = os.path.join(work, "sweep")
        p = subprocess.run([PY, plot, os.path.join(repo, "docs/findings/preemption-sweep.csv"), "--out", sweep_out,
                            "--formats", "svg"], capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"plot.py on the recorded sweep exited {p.returncode}: {p.stderr.strip()}")
        else:
            ids = svg_ids(os.path.join(sweep_out, "sweep.svg"))
            for want in ("tta-mirrored", "tta-parameter_server", "baseline-mirrored", "paired-ratio-mirrored"):
                if want not in ids:
                    failures.append(f"sweep.svg: no {want}")

        # Malformed input: exit 2, naming the file and the line.
        bad = os.path.join(work, "bad")
        shutil.copytree(results, bad)
        with open(os.path.join(bad, "node_timeseries.csv")) as f:
            lines = f.read().splitlines()
        cols = lines[2].split(",")
        cols[4] = "oops"
        lines[2] = ",".join(cols)
        with open(os.path.join(bad, "node_timeseries.csv"), "w") as f:
            f.write("\n".join(lines) + "\n")
        p = subprocess.run([PY, plot, bad, "--out", os.path.join(work, "bad-figures")], capture_output=True, text=True)
        want = os.path.join(bad, "node_timeseries.csv") + ":3:"
        if p.returncode != 2 or want not in p.stderr:
            failures.append(f"a malformed node_timeseries.csv: exit {p.returncode} (want 2), stderr {p.stderr.strip()!r} "
                            f"(want it to name {want})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
