#!/usr/bin/python3
"""report.html as a browser draws it: a real run of experiments/scenarios/tiny-synthetic.yaml, its report
rendered in headless Chromium, and the rendered geometry checked against the run's own records.

A probe script, added to a copy of the report, reads what Chromium laid out (screen coordinates of the
accuracy chart's axis labels, target line, step lines and evaluation markers). From that alone the check
rebuilds the chart's axes and asserts, per strategy:
  - the accuracy line never reaches the target line before the TTA in summary.json (and, where the strategy
    reached the target, it reaches it at the TTA, within a pixel);
  - every evaluation in timeseries.csv has exactly one marker where its time and accuracy put it.
Two doctored copies prove the check can fail: straight lines between evaluations (the chart's old lie, which
crosses the target before the TTA) and one evaluation marker removed.

Exit 77 (skip) without Chromium (scripts/install-deps.sh --with-browser installs it).
Usage: check_report_browser.py CHAOSBED REPO
"""
import csv
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

PROBE = r"""
<script>
(() => {
  const svg = document.querySelector('svg.chart.accuracy');
  const out = {texts: [], series: {}, evals: [], target_y: null};
  const center = (e) => { const r = e.getBoundingClientRect(); return [(r.left + r.right) / 2, (r.top + r.bottom) / 2]; };
  if (svg) {
    for (const t of svg.querySelectorAll('text'))
      out.texts.push({text: t.textContent, anchor: t.getAttribute('text-anchor'), c: center(t)});
    const target = svg.querySelector('line.target');
    if (target) out.target_y = target.getBoundingClientRect().top + target.getBoundingClientRect().height / 2;
    const ctm = svg.getScreenCTM();
    for (const p of svg.querySelectorAll('polyline.series')) {
      const pts = [];
      for (let i = 0; i < p.points.numberOfItems; ++i) {
        const q = p.points.getItem(i).matrixTransform(ctm);
        pts.push([q.x, q.y]);
      }
      out.series[p.dataset.strategy] = pts;
    }
    for (const c of svg.querySelectorAll('circle.eval'))
      out.evals.push({strategy: c.dataset.strategy, c: center(c)});
  }
  const pre = document.createElement('pre');
  pre.id = 'chaosbed-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


class ProbeExtractor(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.inside = False
        self.text = None

    def handle_starttag(self, tag, attrs):
        if tag == "pre" and ("id", "chaosbed-probe") in attrs:
            self.inside, self.text = True, ""

    def handle_endtag(self, tag):
        if tag == "pre":
            self.inside = False

    def handle_data(self, data):
        if self.inside:
            self.text += data


def find_chromium():
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def render(chromium, report, work):
    """The probe's JSON for report, as Chromium laid it out."""
    with open(report) as f:
        page = f.read()
    probed = os.path.join(work, "probed-" + os.path.basename(report))
    with open(probed, "w") as f:
        f.write(page.replace("</body>", PROBE + "</body>", 1))
    profile = tempfile.mkdtemp(prefix="profile-", dir=work)
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
                           "--disable-background-networking", "--no-first-run", "--window-size=1200,2400",
                           f"--user-data-dir={profile}", "--dump-dom", "file://" + probed],
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited {done.returncode}: {done.stderr[-2000:]}")
    extractor = ProbeExtractor()
    extractor.feed(done.stdout)
    if extractor.text is None:
        raise RuntimeError("the probe's output is not in Chromium's DOM (the script did not run)")
    return json.loads(extractor.text)


def fit(pairs):
    """Least-squares line value = a + b * pixel through (pixel, value) pairs."""
    n = len(pairs)
    mx = sum(p for p, _ in pairs) / n
    my = sum(v for _, v in pairs) / n
    sxx = sum((p - mx) ** 2 for p, _ in pairs)
    b = sum((p - mx) * (v - my) for p, v in pairs) / sxx
    return my - b * mx, b


def axes(probe, target):
    """Pixel<->value maps rebuilt from what was drawn: time from the x tick labels (centred on their ticks),
    accuracy from the y tick labels' spacing, anchored at the target line (drawn at the target exactly)."""
    number = re.compile(r"^-?[0-9]+(\.[0-9]+)?$")
    xt = [(t["c"][0], float(t["text"])) for t in probe["texts"] if t["anchor"] == "middle" and number.match(t["text"])]
    yt = [(t["c"][1], float(t["text"])) for t in probe["texts"] if t["anchor"] == "end" and number.match(t["text"])]
    if len(xt) < 2 or len(yt) < 2 or probe["target_y"] is None:
        raise RuntimeError(f"the accuracy chart has no readable axes ({len(xt)} x ticks, {len(yt)} y ticks, "
                           f"target line {'present' if probe['target_y'] is not None else 'missing'})")
    ta, tb = fit(xt)
    _, ab = fit(yt)
    ty = probe["target_y"]
    return (lambda px: ta + tb * px), (lambda t: (t - ta) / tb), (lambda a: ty + (a - target) / ab), abs(tb), abs(1 / ab)


def check(probe, summary, evaluations):
    """Failures of the rendered chart against summary.json and timeseries.csv."""
    target = summary["target_accuracy"]
    time_of, x_of, y_of, s_per_px, px_per_acc = axes(probe, target)
    failures = []
    for label, s in summary["strategies"].items():
        tta = s.get("tta_seconds")
        pts = probe["series"].get(label)
        if not pts:
            failures.append(f"{label}: no accuracy line")
            continue
        # The first point of the drawn path at or above the target line (screen y grows downwards).
        ty = probe["target_y"]
        first = None
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            if y0 <= ty + 0.5:
                first = x0
                break
            if y1 <= ty + 0.5:
                first = x0 + (x1 - x0) * (y0 - ty) / (y0 - y1) if y0 != y1 else x1
                break
        else:
            if pts[-1][1] <= ty + 0.5:
                first = pts[-1][0]
        if first is None:
            if tta is not None:
                failures.append(f"{label}: TTA {tta:.3f} s, but its line never reaches the target")
            continue
        reached = time_of(first)
        if tta is None:
            failures.append(f"{label}: never reached the target, but its line does at {reached:.3f} s")
        elif reached < tta - s_per_px:
            failures.append(f"{label}: line reaches the target at {reached:.3f} s, before its TTA {tta:.3f} s")
        elif reached > tta + s_per_px:
            failures.append(f"{label}: line reaches the target at {reached:.3f} s, after its TTA {tta:.3f} s")

        markers = [e["c"] for e in probe["evals"] if e["strategy"] == label]
        mine = [e for e in evaluations if e["strategy"] == label]
        if len(markers) != len(mine):
            failures.append(f"{label}: {len(mine)} evaluations in timeseries.csv, {len(markers)} markers")
        free = list(markers)
        for e in mine:
            want = (x_of(e["t"]), y_of(e["acc"]))
            # timeseries.csv rounds time to 1 ms and accuracy to 1e-4: allow that, plus a pixel.
            tol_x = 1.0 + 0.0005 / s_per_px
            tol_y = 1.0 + 0.00005 * px_per_acc
            hit = next((m for m in free if abs(m[0] - want[0]) <= tol_x and abs(m[1] - want[1]) <= tol_y), None)
            if hit is None:
                failures.append(f"{label}: no marker for the evaluation at {e['t']:.3f} s, accuracy {e['acc']:.4f}")
            else:
                free.remove(hit)
    return failures


def straight_lines(page):
    """The report with each strategy's step line replaced by straight lines through its markers."""
    markers = {}
    for m in re.finditer(r'<circle class="eval" data-strategy="([^"]*)"[^>]*cx="([^"]*)" cy="([^"]*)"', page):
        markers.setdefault(m.group(1), []).append(f"{m.group(2)},{m.group(3)}")
    return re.sub(r'(<polyline class="series" data-strategy="([^"]*)"[^>]*points=")[^"]*"',
                  lambda m: m.group(1) + " ".join(markers.get(m.group(2), [])) + '"', page)


def main():
    chaosbed, repo = sys.argv[1], sys.argv[2]
    chromium = find_chromium()
    if chromium is None:
        print("SKIP: no Chromium on PATH (scripts/install-deps.sh --with-browser installs Debian's chromium)")
        return 77
    work = tempfile.mkdtemp(prefix="chaosbed-report-browser-")
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
        with open(os.path.join(results, "timeseries.csv")) as f:
            evaluations = [{"strategy": r["strategy"], "t": float(r["time_s"]), "acc": float(r["accuracy"])}
                           for r in csv.DictReader(f)]
        reached = [l for l, s in summary["strategies"].items() if s.get("tta_seconds") is not None]
        if not reached:
            print("FAIL: no strategy reached the target, so the TTA check would check nothing")
            return 1
        report = os.path.join(results, "report.html")

        failures = check(render(chromium, report, work), summary, evaluations)
        for f in failures:
            print("FAIL:", f)

        # The check must catch the lies it is for.
        with open(report) as f:
            page = f.read()
        # Straight lines cross the target before the TTA wherever the evaluation before it was below target.
        lies_possible = any(
            any(abs(b["t"] - s["tta_seconds"]) < 0.002 and a["acc"] < summary["target_accuracy"]
                for a, b in zip(es, es[1:]))
            for l, s in summary["strategies"].items() if s.get("tta_seconds") is not None
            for es in [sorted((e for e in evaluations if e["strategy"] == l), key=lambda e: e["t"])])
        doctored = {"dropped-marker.html": re.sub(r'<circle class="eval"[^>]*>.*?</circle>', "", page, count=1)}
        if lies_possible:
            doctored["straight-lines.html"] = straight_lines(page)
        else:
            print("note: every TTA came at the first evaluation or after one above target: no straight-line mutant")
        for name, text in doctored.items():
            path = os.path.join(work, name)
            with open(path, "w") as f:
                f.write(text)
            caught = check(render(chromium, path, work), summary, evaluations)
            if caught:
                print(f"{name}: caught ({caught[0]})")
            else:
                failures.append(f"{name}: the doctored report passed the check")
                print(f"FAIL: {name}: the doctored report passed the check")

        if failures:
            return 1
        print(f"report ok: {len(summary['strategies'])} strategies, {len(evaluations)} evaluations, "
              f"TTA of {', '.join(reached)} matches the drawn line")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
