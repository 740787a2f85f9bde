#!/usr/bin/python3
"""Publication figures (PDF and SVG) from chaosbed results.

  bench/plot.py RESULTS_DIR [--out DIR] [--formats pdf,svg]
      accuracy.*   accuracy against time per strategy: a step line that holds each evaluation until the next,
                   a marker at every evaluation, the target, a TTA marker per strategy that reached it, and the
                   faults it met shaded (events.jsonl)
      nodetime.*   per strategy, where its nodes' time went over time: node-seconds per second by category,
                   stacked (node_timeseries.csv)
  bench/plot.py SWEEP_DIR_OR_CSV [--out DIR] [--formats pdf,svg]
      sweep.*      geometric mean TTA with its 95% CI against the first swept variable per strategy (hollow: some runs
                   never reached the target, so the mean is over those that did), and the TTA ratio paired by
                   seed (parameter server / mirrored) with its interval (sweep.csv's paired_*)

The figures default to RESULTS_DIR/figures (or the sweep directory's). Needs Debian's python3-matplotlib.
Exit 0 written, 2 bad input (the file and line are named), 4 matplotlib missing.
"""
import argparse
import csv
import glob
import itertools
import json
import math
import os
import sys

# Categories in chaosbed's TimeCategory order (node_timeseries.csv's columns), with the report's colours.
CATEGORIES = [("compute_s", "compute", "#4c78a8"), ("transfer_s", "transfer", "#72b7b2"),
              ("checkpoint_s", "checkpoint", "#54a24b"), ("idle_peer_s", "idle: peer", "#e45756"),
              ("idle_server_s", "idle: server", "#f58518"), ("idle_recovery_s", "idle: recovery", "#b279a2"),
              ("paused_s", "paused", "#9d755d"), ("throttled_s", "throttled", "#bab0ac"),
              ("unattributed_s", "unattributed", "#000000")]
STRATEGY_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#e377c2"]
FAULT_COLORS = {"pause": "#9e9e9e", "slow": "#ffb300", "link": "#8d6e63", "transport_error": "#ff7043"}
ENDING_FAULTS = ("kill", "preempt", "vanish")


class BadInput(Exception):
    pass


def number(value, where):
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BadInput(f"{where}: not a number: {value!r}") from None
    if not math.isfinite(v):
        raise BadInput(f"{where}: not a finite number: {value!r}")
    return v


def read_csv(path, required):
    """The rows as dicts; each knows its line ("_line") and file ("_file") for error messages."""
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = [dict(r, _line=i + 2, _file=path) for i, r in enumerate(reader)]
            header = reader.fieldnames or []
    except FileNotFoundError:
        raise BadInput(f"{path}: missing") from None
    for name in required:
        if name not in header:
            raise BadInput(f"{path}:1: no column {name!r}")
    return rows, header


def field(r, col):
    """A number from a CSV row, with the file, line and column in the error."""
    return number(r[col], f"{r['_file']}:{r['_line']}: {col}")


def strategy_order(summary, rows):
    """Strategies as they ran (summary.json sorts its keys; the time series keeps run order)."""
    order = []
    for r in rows:
        if r["strategy"] not in order:
            order.append(r["strategy"])
    for label in summary.get("strategies", {}):
        if label not in order:
            order.append(label)
    return order


def fault_bands(events_path):
    """(strategy, kind, start_s, end_s) from events.jsonl: chaos.applied .. chaos.reverted per fault and node,
    times relative to the strategy's run.start; an ending fault is an instant."""
    bands, open_bands, strategy, start_ns = [], {}, None, 0
    if not os.path.exists(events_path):
        return bands
    with open(events_path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a torn last line of an interrupted run
            if not isinstance(e, dict):
                continue
            kind, typ = e.get("kind", ""), e.get("type", "")
            if typ == "run.start":
                strategy, start_ns, open_bands = e.get("strategy"), e.get("start_ns", 0), {}
                continue
            if not typ.startswith("chaos.") or strategy is None:
                continue
            t = (e["wall_ns"] - start_ns) * 1e-9 if isinstance(e.get("wall_ns"), int) and start_ns else e.get("t", 0)
            key = (e.get("fault_id"), e.get("node"))
            if typ == "chaos.applied":
                if kind in ENDING_FAULTS:
                    bands.append((strategy, kind, t, t))
                else:
                    open_bands[key] = len(bands)
                    bands.append((strategy, kind, t, None))
            elif typ == "chaos.reverted" and key in open_bands:
                i = open_bands.pop(key)
                bands[i] = bands[i][:3] + (t,)
    return bands


def save(fig, out_dir, name, formats):
    paths = []
    for fmt in formats:
        path = os.path.join(out_dir, f"{name}.{fmt}")
        tmp = path + ".tmp"
        fig.savefig(tmp, format=fmt, bbox_inches="tight")
        os.replace(tmp, path)  # atomic: a reader never sees half a figure
        paths.append(path)
    return paths


def plot_run(plt, results, out_dir, formats):
    try:
        with open(os.path.join(results, "summary.json")) as f:
            summary = json.load(f)
    except FileNotFoundError:
        raise BadInput(f"{results}/summary.json: missing (not a results directory)") from None
    except ValueError as e:
        raise BadInput(f"{results}/summary.json: not JSON ({e})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("strategies"), dict):
        raise BadInput(f"{results}/summary.json: not a chaosbed summary (no 'strategies')")
    series_path = os.path.join(results, "timeseries.csv")
    series, _ = read_csv(series_path, ["time_s", "strategy", "accuracy"])
    order = strategy_order(summary, series)
    target = summary.get("target_accuracy")
    written = []

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for strategy, kind, start, end in fault_bands(os.path.join(results, "events.jsonl")):
        if kind in ENDING_FAULTS:
            ax.axvline(start, color="#e53935", lw=0.8, ls=":", gid=f"fault-{kind}")
        else:
            ax.axvspan(start, end if end is not None else start, color=FAULT_COLORS.get(kind, "#bdbdbd"), alpha=0.15,
                       lw=0, gid=f"fault-{kind}")
    for i, label in enumerate(order):
        color = STRATEGY_COLORS[i % len(STRATEGY_COLORS)]
        pts = sorted((field(r, "time_s"), field(r, "accuracy")) for r in series if r["strategy"] == label)
        s = summary["strategies"].get(label, {})
        end = max([p[0] for p in pts] + [s.get("wall_seconds") or 0])
        if pts:
            xs = [p[0] for p in pts] + [end]
            ys = [p[1] for p in pts] + [pts[-1][1]]
            ax.step(xs, ys, where="post", color=color, lw=1.6, label=label, gid=f"accuracy-{label}")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", ms=2.5, color=color, gid=f"evaluations-{label}")
        tta = s.get("tta_seconds")
        if isinstance(tta, (int, float)) and target is not None:
            ax.plot([tta], [target], "D", ms=6, color=color, mec="black", mew=0.6, gid=f"tta-{label}")
            ax.axvline(tta, color=color, lw=0.8, ls=":")
    if target is not None:
        ax.axhline(target, color="#555", lw=0.8, ls="--", label=f"target {target}")
    ax.set_xlabel("time since the strategy started (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(summary.get("experiment", ""))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    written += save(fig, out_dir, "accuracy", formats)
    plt.close(fig)

    nodes_path = os.path.join(results, "node_timeseries.csv")
    if os.path.exists(nodes_path):
        # Results from before throttled and unattributed existed lack those columns: they read as 0.
        rows, _ = read_csv(nodes_path, ["time_s", "strategy", "node", "wall_s"] + [c for c, _, _ in CATEGORIES[:7]])
        for r in rows:
            for c, _, _ in CATEGORIES[7:]:
                r.setdefault(c, "0")
        labels = [l for l in order if any(r["strategy"] == l for r in rows)]
        if labels:
            fig, axes = plt.subplots(len(labels), 1, figsize=(7, 2.4 * len(labels)), squeeze=False, sharex=True)
            for ax, label in zip(axes[:, 0], labels):
                plot_node_time(ax, [r for r in rows if r["strategy"] == label], label)
            axes[-1, 0].set_xlabel("time since the strategy started (s)")
            handles, names = axes[0, 0].get_legend_handles_labels()
            fig.legend(handles, names, loc="upper center", ncol=4, fontsize=8, bbox_to_anchor=(0.5, 1.06))
            written += save(fig, out_dir, "nodetime", formats)
            plt.close(fig)
    return written


def node_cells(samples):
    """A node's samples as cells (start, end, {column: seconds}) from 0, as the report draws them: a call booked
    when it ended (a collective, a frozen stretch) gives what its cell booked beyond the cell's length to the
    latest earlier cells that booked less (see nodeCells in experiments/report/report.h)."""
    cols = [c for c, _, _ in CATEGORIES]
    cells, prev_t, prev = [], 0.0, {c: 0.0 for c in cols}
    for r in samples:
        t = field(r, "time_s")
        if t <= prev_t:
            continue
        cur = {c: field(r, c) for c in cols}
        grew = {c: max(0.0, cur[c] - prev[c]) for c in cols}
        booked, dt = sum(grew.values()), t - prev_t
        if booked > dt:
            left = booked - dt
            surplus = {c: grew[c] * left / booked for c in cols}
            for c in cols:
                grew[c] -= surplus[c]
            for cell in reversed(cells):
                if left <= 1e-12:
                    break
                room = (cell[1] - cell[0]) - sum(cell[2].values())
                if room <= 0:
                    continue
                share = min(room, left) / left
                for c in cols:
                    cell[2][c] += surplus[c] * share
                    surplus[c] -= surplus[c] * share
                left -= min(room, left)
            for c in cols:
                grew[c] += surplus[c]
        cells.append((prev_t, t, grew))
        prev_t, prev = t, cur
    return cells


def plot_node_time(ax, rows, label):
    """Node-seconds per second of each category, summed over the strategy's nodes, stacked (node_cells; nodes
    that never booked time, such as the evaluator, are left out)."""
    by_node = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r)
    by_node = {n: sorted(s, key=lambda r: field(r, "time_s")) for n, s in by_node.items()
               if any(field(r, "wall_s") > 0 for r in s)}
    cells = {n: node_cells(s) for n, s in by_node.items()}
    times = sorted({0.0} | {c[1] for cs in cells.values() for c in cs})
    if len(times) < 2:
        return
    rate = {c: [0.0] * (len(times) - 1) for c, _, _ in CATEGORIES}
    for cs in cells.values():
        for start, end, amounts in cs:
            for k in range(len(times) - 1):  # spread over the global intervals this cell covers
                lo, hi = max(start, times[k]), min(end, times[k + 1])
                if hi > lo:
                    for c in rate:
                        rate[c][k] += amounts[c] / (end - start) * (hi - lo) / (times[k + 1] - times[k])
    xs = [t for k in range(len(times) - 1) for t in (times[k], times[k + 1])]
    bottom = [0.0] * len(xs)
    for c, name, color in CATEGORIES:
        ys = [v for v in rate[c] for _ in (0, 1)]
        top = [b + y for b, y in zip(bottom, ys)]
        ax.fill_between(xs, bottom, top, color=color, lw=0, label=name, gid=f"nodetime-{label}-{c}")
        bottom = top
    ax.set_ylim(0, max(1.0, len(by_node) * 1.05))
    ax.set_ylabel("nodes")
    ax.set_title(f"{label}: {len(by_node)} nodes; the gap to the top: nodes not running", fontsize=9, loc="left")
    ax.grid(alpha=0.3)


def parameter_server_labels(sweep_dir, strategies):
    """The parameter-server strategies, from a point's summary.json when the sweep directory is there, else
    by the default label."""
    for path in sorted(glob.glob(os.path.join(sweep_dir, "points", "*", "summary.json")))[:1]:
        try:
            with open(path) as f:
                s = json.load(f)
            return {l for l, st in s.get("strategies", {}).items() if st.get("kind") == "parameter_server"}
        except (OSError, ValueError):
            pass
    return {l for l in strategies if l == "parameter_server"}


def plot_sweep(plt, csv_path, out_dir, formats):
    rows, header = read_csv(csv_path, ["row", "group", "seed", "strategy", "tta_ci95_low", "tta_ci95_high"])
    # The centre of the interval: the geometric mean (log-t interval); sweeps before it had the mean (t interval).
    centre = "tta_geomean" if "tta_geomean" in header else "tta_mean"
    if centre not in header:
        raise BadInput(f"{csv_path}:1: no column 'tta_geomean'")
    axes_cols = header[header.index("seed") + 1:header.index("strategy")]
    summaries = [r for r in rows if r["row"] == "summary"]
    if not summaries:
        raise BadInput(f"{csv_path}: no summary rows (an unfinished sweep? run chaosbed sweep again to resume)")
    # The last axis is the x axis; with more, each value of the others is a series of its own (a line style).
    axis = axes_cols[-1] if axes_cols else None
    series_cols = axes_cols[:-1]
    strategies = []
    for r in summaries:
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])
    series = sorted({tuple(r[c] for c in series_cols) for r in summaries},
                    key=lambda t: tuple(float(v) if v != "" else 0.0 for v in t))
    styles = ["-", "--", ":", "-."]

    def x_of(r):
        return field(r, axis) if axis and r[axis] != "" else None

    def series_name(label, key):
        if not series_cols:
            return label
        return label + " (" + ", ".join(f"{c.rsplit('.', 1)[-1]} {v}" for c, v in zip(series_cols, key)) + ")"

    fig, (ax, ax_ratio) = plt.subplots(1, 2, figsize=(10, 3.6))
    for (i, label), (j, key) in itertools.product(enumerate(strategies), enumerate(series)):
        color = STRATEGY_COLORS[i % len(STRATEGY_COLORS)]
        pts = []
        for r in summaries:
            if r["strategy"] != label or tuple(r[c] for c in series_cols) != key:
                continue
            x = x_of(r)
            if x is None:  # the no-chaos baseline: a reference line (one figure per strategy only)
                if r[centre] != "" and not series_cols:
                    ax.axhline(field(r, centre), color=color, lw=0.8, ls="--",
                               gid=f"baseline-{label}")
                continue
            if r[centre] == "":
                continue  # no run reached the target
            censored = r.get("censored_fraction", "") not in ("", "0", "0.000") and field(r, "censored_fraction") > 0
            pts.append((x, field(r, centre), field(r, "tta_ci95_low"), field(r, "tta_ci95_high"), censored))
        pts.sort()
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        err = [[max(0.0, p[1] - max(p[2], 0.0)) for p in pts], [max(0.0, p[3] - p[1]) for p in pts]]
        name = series_name(label, key)
        ax.errorbar(xs, ys, yerr=err, color=color, capsize=3, lw=1.4, ls=styles[j % len(styles)], label=name,
                    gid=f"tta-{name}")
        for p in pts:
            ax.plot([p[0]], [p[1]], "o", color=color, mfc="white" if p[4] else color, ms=5)
    # One paired-ratio line per mirrored strategy: its rows carry PS / it (the PS's own row repeats the first).
    ps_labels = parameter_server_labels(os.path.dirname(os.path.abspath(csv_path)), strategies)
    ratio_pts = []
    for (i, label), (j, key) in itertools.product(enumerate(strategies), enumerate(series)):
        if label in ps_labels:
            continue
        pts = []
        for r in summaries:
            x = x_of(r)
            if (r["strategy"] != label or tuple(r[c] for c in series_cols) != key or x is None
                    or r.get("paired_ratio", "") == ""):
                continue
            v = field(r, "paired_ratio")
            # An unknown bound (one pair; a censored pair's side) is 0 or inf: drawn as a bar out to 10x.
            lo = field(r, "paired_low") if r.get("paired_low", "") != "" else v
            hi = v * 10 if r.get("paired_high", "") in ("", "inf") else field(r, "paired_high")
            pts.append((x, v, lo if lo > 0 else v / 10, hi))
        pts.sort()
        if pts:
            name = series_name(label, key)
            ax_ratio.errorbar([p[0] for p in pts], [p[1] for p in pts],
                              yerr=[[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]],
                              color=STRATEGY_COLORS[i % len(STRATEGY_COLORS)], ls=styles[j % len(styles)],
                              capsize=3, marker="o", ms=4, label=f"PS / {name}", gid=f"paired-ratio-{name}")
        ratio_pts += pts
    ax_ratio.axhline(1.0, color="#999", lw=0.8, ls="--")
    for a in (ax, ax_ratio):
        a.set_xlabel(axis or "point")
        a.grid(alpha=0.3)
        xs = [p[0] for p in ratio_pts] or [x_of(r) for r in summaries if x_of(r) is not None]
        if xs and min(xs) > 0 and max(xs) / min(xs) >= 20:
            a.set_xscale("log")
    ax.set_ylabel("time to accuracy (s), mean and 95% CI")
    ax.set_title("hollow: some runs never reached the target", fontsize=8, loc="left")
    ax.legend(fontsize=8)
    ax_ratio.set_ylabel("TTA ratio paired by seed")
    ax_ratio.set_title("< 1: the parameter server is faster", fontsize=8, loc="left")
    if ratio_pts:
        ax_ratio.legend(fontsize=8)
    written = save(fig, out_dir, "sweep", formats)
    plt.close(fig)
    return written


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input", help="a results directory, a sweep directory or a sweep.csv")
    parser.add_argument("--out", help="where the figures go (default: INPUT/figures)")
    parser.add_argument("--formats", default="pdf,svg", help="comma-separated: pdf, svg, png (default pdf,svg)")
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    if not formats or any(f not in ("pdf", "svg", "png") for f in formats):
        print(f"plot.py: --formats {args.formats}: expected pdf, svg or png, comma-separated", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        matplotlib.rcParams["svg.hashsalt"] = "chaosbed"  # the same input gives the same SVG
        matplotlib.rcParams["svg.fonttype"] = "none"      # text stays text: searchable and editable
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        return 4
    src = args.input
    sweep_csv = src if src.endswith(".csv") else os.path.join(src, "sweep.csv")
    base = os.path.dirname(os.path.abspath(src)) if src.endswith(".csv") else src
    out_dir = args.out or os.path.join(base, "figures")
    try:
        os.makedirs(out_dir, exist_ok=True)
        if os.path.exists(sweep_csv):
            written = plot_sweep(plt, sweep_csv, out_dir, formats)
        else:
            written = plot_run(plt, src, out_dir, formats)
    except BadInput as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
