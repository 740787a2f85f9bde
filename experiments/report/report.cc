#include "experiments/report/report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "chaos/model/fault.h"
#include "core/metrics/accounting.h"
#include "transports/base/files.h"

namespace chaosbed::report {
namespace {

// Strategies and fault kinds have colour sets of their own (cool hues for strategies, warm and grey ones
// for faults), so that a strategy's line is never read as a fault band.
constexpr const char* kPalette[] = {"#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#e377c2"};
constexpr const char* kPartColors[][2] = {{"compute", "#4c78a8"},       {"transfer", "#72b7b2"},
                                          {"idle_peer", "#e45756"},     {"idle_server", "#f58518"},
                                          {"idle_recovery", "#b279a2"}};

// Each TimeCategory, in its order (node_timeseries.csv's columns), and a cell where nothing was booked.
constexpr const char* kCategoryColors[] = {"#4c78a8", "#72b7b2", "#54a24b", "#e45756", "#f58518",
                                           "#b279a2", "#9d755d", "#bab0ac", "#000000"};
constexpr const char* kNoneColor = "#e8e8e8";
static_assert(std::size(kCategoryColors) == kTimeCategories);
static_assert(std::tuple_size_v<decltype(NodeSeriesPoint::seconds)> == kTimeCategories);

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string num(double v) { return fmt("%.1f", v); }

Result<std::string> readFile(const std::string& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (required) return Status::notFound("cannot read " + path);
    return std::string();
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* bandColor(const std::string& kind) {
  if (kind == "pause") return "#9e9e9e";
  if (kind == "slow") return "#ffb300";
  if (kind == "link") return "#8d6e63";
  if (kind == "transport_error") return "#ff7043";
  if (auto k = chaos::parseFaultKind(kind); k && chaos::endsNode(*k)) return "#e53935";
  return "#bdbdbd";
}

double jnum(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string colorOf(size_t i) { return kPalette[i % std::size(kPalette)]; }

// Nice round tick step for a range.
double tickStep(double range, int target_ticks) {
  if (range <= 0) return 1;
  double raw = range / target_ticks;
  double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string accuracyChart(const ReportInput& in, const std::vector<std::string>& labels) {
  const double W = 960, H = 380, L = 130, R = 20, T = 20, B = 40;
  const double lane_h = 14;
  double tmax = 1;
  for (const auto& p : in.series) tmax = std::max(tmax, p.time_s);
  for (const auto& f : in.faults) tmax = std::max(tmax, f.end_s);
  if (in.summary.contains("strategies"))
    for (const auto& [label, s] : in.summary["strategies"].items()) tmax = std::max(tmax, jnum(s, "wall_seconds"));
  const double pw = W - L - R, ph = H - T - B;
  auto x = [&](double t) { return L + pw * t / tmax; };
  auto y = [&](double a) { return T + ph * (1 - std::clamp(a, 0.0, 1.0)); };
  const double lanes_top = H + 10;
  const double total_h = lanes_top + lane_h * double(labels.size()) + 10;

  std::ostringstream o;
  o << "<svg class=\"chart accuracy\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << total_h
    << "\" viewBox=\"0 0 " << W << " " << total_h << "\" role=\"img\" aria-label=\"accuracy vs time\">\n";
  // Fault shading (all strategies, translucent) behind the curves.
  for (const auto& f : in.faults) {
    if (f.end_s > f.start_s) {
      o << "<rect class=\"fault\" data-kind=\"" << htmlEscape(f.kind) << "\" data-strategy=\"" << htmlEscape(f.strategy)
        << "\" x=\"" << num(x(f.start_s)) << "\" y=\"" << T << "\" width=\"" << num(std::max(1.0, x(f.end_s) - x(f.start_s)))
        << "\" height=\"" << ph << "\" fill=\"" << bandColor(f.kind) << "\" fill-opacity=\"0.15\"><title>"
        << htmlEscape(f.strategy + ": " + f.kind + " " + f.node + " " + num(f.start_s) + "-" + num(f.end_s) + " s")
        << "</title></rect>\n";
    } else if (f.kind == "kill" || f.kind == "preempt") {
      o << "<line class=\"mark\" data-kind=\"" << htmlEscape(f.kind) << "\" data-strategy=\"" << htmlEscape(f.strategy)
        << "\" x1=\"" << num(x(f.start_s)) << "\" x2=\"" << num(x(f.start_s)) << "\" y1=\"" << T << "\" y2=\"" << T + ph
        << "\" stroke=\"" << bandColor(f.kind) << "\" stroke-width=\"1.5\" stroke-dasharray=\"2 3\"><title>"
        << htmlEscape(f.strategy + ": " + f.kind + " " + f.node + " at " + num(f.start_s) + " s") << "</title></line>\n";
    }
  }
  // Axes and grid.
  const double step = tickStep(tmax, 10);
  for (double t = 0; t <= tmax + 1e-9; t += step)
    o << "<line class=\"grid\" x1=\"" << num(x(t)) << "\" x2=\"" << num(x(t)) << "\" y1=\"" << T << "\" y2=\"" << T + ph
      << "\"/><text x=\"" << num(x(t)) << "\" y=\"" << T + ph + 16 << "\" text-anchor=\"middle\">" << fmt("%g", t)
      << "</text>\n";
  for (int i = 0; i <= 10; i += 2) {
    double a = i / 10.0;
    o << "<line class=\"grid\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << num(y(a)) << "\" y2=\"" << num(y(a))
      << "\"/><text x=\"" << L - 6 << "\" y=\"" << num(y(a) + 4) << "\" text-anchor=\"end\">" << fmt("%.1f", a)
      << "</text>\n";
  }
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  o << "<text x=\"" << L + pw / 2 << "\" y=\"" << H - 4 << "\" text-anchor=\"middle\">time since start of training (s)</text>\n";
  o << "<text transform=\"translate(" << L - 40 << "," << T + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">test accuracy</text>\n";
  if (in.summary.contains("target_accuracy") && in.summary["target_accuracy"].is_number()) {
    double target = in.summary["target_accuracy"].get<double>();
    o << "<line class=\"target\" x1=\"" << L << "\" x2=\"" << L + pw << "\" y1=\"" << num(y(target)) << "\" y2=\""
      << num(y(target)) << "\" stroke=\"#000\" stroke-dasharray=\"6 4\"/><text x=\"" << L + pw - 4 << "\" y=\""
      << num(y(target) - 4) << "\" text-anchor=\"end\">target " << fmt("%g", target) << "</text>\n";
  }
  // One step line per strategy: an accuracy is known only from its evaluation on, and holds until the next
  // (or the end of the strategy's run), so the line reaches the target exactly at the TTA. A marker per
  // evaluation; a TTA marker per strategy that reached the target.
  for (size_t i = 0; i < labels.size(); ++i) {
    std::vector<const SeriesPoint*> evals;
    for (const auto& p : in.series)
      if (p.strategy == labels[i]) evals.push_back(&p);
    std::stable_sort(evals.begin(), evals.end(), [](auto* a, auto* b) { return a->time_s < b->time_s; });
    const nlohmann::json* s = nullptr;
    if (in.summary.contains("strategies") && in.summary["strategies"].contains(labels[i]))
      s = &in.summary["strategies"][labels[i]];
    std::ostringstream pts;
    for (size_t k = 0; k < evals.size(); ++k) {
      if (k > 0) pts << num(x(evals[k]->time_s)) << "," << num(y(evals[k - 1]->accuracy)) << " ";
      pts << num(x(evals[k]->time_s)) << "," << num(y(evals[k]->accuracy)) << " ";
    }
    if (!evals.empty() && s) {
      const double end = std::max(evals.back()->time_s, jnum(*s, "wall_seconds"));
      pts << num(x(end)) << "," << num(y(evals.back()->accuracy)) << " ";
    }
    o << "<polyline class=\"series\" data-strategy=\"" << htmlEscape(labels[i]) << "\" fill=\"none\" stroke=\""
      << colorOf(i) << "\" stroke-width=\"2\" points=\"" << pts.str() << "\"/>\n";
    for (const SeriesPoint* p : evals)
      o << "<circle class=\"eval\" data-strategy=\"" << htmlEscape(labels[i]) << "\" data-t=\"" << fmt("%.6g", p->time_s)
        << "\" cx=\"" << num(x(p->time_s)) << "\" cy=\"" << num(y(p->accuracy)) << "\" r=\"2.5\" fill=\"" << colorOf(i)
        << "\"><title>" << htmlEscape(labels[i] + ": accuracy " + fmt("%.4f", p->accuracy) + " at " + num(p->time_s) + " s")
        << "</title></circle>\n";
    if (s && s->contains("tta_seconds") && (*s)["tta_seconds"].is_number()) {
      const double tta = (*s)["tta_seconds"].get<double>();
      o << "<line class=\"tta\" data-strategy=\"" << htmlEscape(labels[i]) << "\" data-t=\"" << fmt("%.6g", tta) << "\" x1=\""
        << num(x(tta)) << "\" x2=\"" << num(x(tta)) << "\" y1=\"" << T << "\" y2=\"" << T + ph << "\" stroke=\"" << colorOf(i)
        << "\" stroke-width=\"1\" stroke-dasharray=\"1 3\"/><path class=\"tta-mark\" d=\"M" << num(x(tta)) << " "
        << T + 2 << " l5 6 l-5 6 l-5 -6 z\" fill=\"" << colorOf(i) << "\"><title>"
        << htmlEscape(labels[i] + ": TTA " + num(tta) + " s") << "</title></path>\n";
    }
  }
  // Node exits as dots on the time axis.
  for (const auto& f : in.faults)
    if (f.kind == "node.exited") {
      size_t idx = std::find(labels.begin(), labels.end(), f.strategy) - labels.begin();
      o << "<circle class=\"exit\" data-strategy=\"" << htmlEscape(f.strategy) << "\" cx=\"" << num(x(f.start_s))
        << "\" cy=\"" << T + ph - 4 << "\" r=\"3.5\" fill=\"" << colorOf(idx) << "\"><title>"
        << htmlEscape(f.strategy + ": " + f.node + " exited at " + num(f.start_s) + " s") << "</title></circle>\n";
    }
  // Fault lanes: one per strategy, exactly what happened to it.
  for (size_t i = 0; i < labels.size(); ++i) {
    const double ly = lanes_top + lane_h * double(i);
    o << "<text x=\"" << L - 6 << "\" y=\"" << num(ly + 10) << "\" text-anchor=\"end\" fill=\"" << colorOf(i)
      << "\" class=\"lane-label\">" << htmlEscape(labels[i]) << "</text><line class=\"grid\" x1=\"" << L << "\" x2=\""
      << L + pw << "\" y1=\"" << num(ly + 6) << "\" y2=\"" << num(ly + 6) << "\"/>\n";
    for (const auto& f : in.faults) {
      if (f.strategy != labels[i] || f.kind == "node.exited") continue;
      if (f.end_s > f.start_s)
        o << "<rect class=\"lane\" x=\"" << num(x(f.start_s)) << "\" y=\"" << num(ly + 1) << "\" width=\""
          << num(std::max(1.0, x(f.end_s) - x(f.start_s))) << "\" height=\"10\" fill=\"" << bandColor(f.kind)
          << "\"><title>" << htmlEscape(f.kind + " " + f.node) << "</title></rect>\n";
      else
        o << "<path class=\"lane\" d=\"M" << num(x(f.start_s)) << " " << num(ly + 1) << " l4 10 h-8 z\" fill=\""
          << bandColor(f.kind) << "\"><title>" << htmlEscape(f.kind + " " + f.node) << "</title></path>\n";
    }
  }
  o << "</svg>\n";
  return o.str();
}

std::string idleChart(const ReportInput& in, const std::vector<std::string>& labels) {
  const double W = 960, bar_h = 26, gap = 12, L = 170, R = 70, T = 10;
  const double H = T + (bar_h + gap) * double(labels.size()) + 50;
  std::vector<std::array<double, 5>> parts;
  double vmax = 1e-9;
  for (const auto& label : labels) {
    const auto& s = in.summary["strategies"][label];
    nlohmann::json idle = s.contains("idle_seconds") ? s["idle_seconds"] : nlohmann::json::object();
    std::array<double, 5> p = {jnum(s, "compute_seconds"), jnum(s, "transfer_seconds"), jnum(idle, "peer"),
                               jnum(idle, "server"), jnum(idle, "recovery")};
    double sum = 0;
    for (double v : p) sum += v;
    vmax = std::max(vmax, sum);
    parts.push_back(p);
  }
  const double pw = W - L - R;
  std::ostringstream o;
  o << "<svg class=\"chart idle\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" role=\"img\" aria-label=\"time by category\">\n";
  for (size_t i = 0; i < labels.size(); ++i) {
    const double by = T + (bar_h + gap) * double(i);
    o << "<text x=\"" << L - 8 << "\" y=\"" << num(by + bar_h / 2 + 4) << "\" text-anchor=\"end\">"
      << htmlEscape(labels[i]) << "</text>\n";
    double acc = 0;
    for (size_t k = 0; k < 5; ++k) {
      const double v = parts[i][k];
      o << "<rect class=\"bar\" data-strategy=\"" << htmlEscape(labels[i]) << "\" data-part=\"" << kPartColors[k][0]
        << "\" x=\"" << num(L + pw * acc / vmax) << "\" y=\"" << num(by) << "\" width=\"" << fmt("%.2f", pw * v / vmax)
        << "\" height=\"" << bar_h << "\" fill=\"" << kPartColors[k][1] << "\"><title>" << kPartColors[k][0] << ": "
        << fmt("%.2f", v) << " s</title></rect>\n";
      acc += v;
    }
    o << "<text x=\"" << num(L + pw * acc / vmax + 4) << "\" y=\"" << num(by + bar_h / 2 + 4) << "\">"
      << fmt("%.1f", acc) << " s</text>\n";
  }
  const double ly = H - 30;
  double lx = L;
  for (const auto& [name, color] : kPartColors) {
    o << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\"" << color << "\"/><text x=\""
      << lx + 16 << "\" y=\"" << ly + 10 << "\">" << name << "</text>\n";
    lx += 130;
  }
  o << "<text x=\"" << L << "\" y=\"" << H - 4 << "\">node-seconds summed over workers (compute, transfer, idle by reason)</text>\n";
  o << "</svg>\n";
  return o.str();
}

// One strategy's nodes over time: a lane per node (nodes that never booked any time, such as the evaluator,
// have none), a cell per interval between two of its samples (nodeCells), split bottom to top in
// TimeCategory order by the share of the interval each category took, grey above for what stays unbooked.
std::string nodeTimeChart(const ReportInput& in, const std::string& label) {
  std::vector<std::string> nodes;
  std::map<std::string, std::vector<const NodeSeriesPoint*>> by_node;
  double t_max = 0;
  for (const NodeSeriesPoint& p : in.node_series) {
    if (p.strategy != label) continue;
    if (!by_node.count(p.node)) nodes.push_back(p.node);
    by_node[p.node].push_back(&p);
    t_max = std::max(t_max, p.time_s);
  }
  std::erase_if(nodes, [&](const std::string& n) {
    return std::none_of(by_node[n].begin(), by_node[n].end(), [](const NodeSeriesPoint* p) { return p->wall_s > 0; });
  });
  if (nodes.empty() || t_max <= 0) return "";
  const double W = 960, lane_h = 16, gap = 4, L = 110, R = 20, T = 8;
  const double pw = W - L - R;
  const double plot_h = (lane_h + gap) * double(nodes.size());
  const double H = T + plot_h + 62;
  auto x = [&](double t) { return L + pw * std::clamp(t / t_max, 0.0, 1.0); };
  std::ostringstream o;
  o << "<svg class=\"chart nodetime\" data-strategy=\"" << htmlEscape(label)
    << "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" role=\"img\" aria-label=\"time by category per node over time: " << htmlEscape(label) << "\">\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const double y0 = T + (lane_h + gap) * double(i);
    o << "<text x=\"" << L - 8 << "\" y=\"" << num(y0 + lane_h - 4) << "\" text-anchor=\"end\">" << htmlEscape(nodes[i])
      << "</text>\n";
    for (const NodeCell& cell : nodeCells(by_node[nodes[i]])) {
      const double dt = cell.end_s - cell.start_s;
      double booked = 0;
      for (double v : cell.seconds) booked += v;
      const double scale = std::max(dt, booked);  // a surplus no earlier cell could take stays here
      const std::string rect = "<rect class=\"nodetime\" data-strategy=\"" + htmlEscape(label) + "\" data-node=\"" +
                               htmlEscape(nodes[i]) + "\" x=\"" + fmt("%.2f", x(cell.start_s)) + "\" width=\"" +
                               fmt("%.2f", x(cell.end_s) - x(cell.start_s)) + "\"";
      const std::string title = htmlEscape(nodes[i]) + " " + fmt("%.1f", cell.start_s) + "–" + fmt("%.1f", cell.end_s) + " s: ";
      double y = y0 + lane_h;
      for (int c = 0; c < kTimeCategories; ++c) {
        if (cell.seconds[size_t(c)] <= 0) continue;
        const double h = lane_h * cell.seconds[size_t(c)] / scale;
        y -= h;
        const char* part = timeCategoryName(static_cast<TimeCategory>(c));
        o << rect << " data-part=\"" << part << "\" y=\"" << fmt("%.2f", y) << "\" height=\"" << fmt("%.2f", h)
          << "\" fill=\"" << kCategoryColors[c] << "\"><title>" << title << part << " "
          << fmt("%.2f", cell.seconds[size_t(c)]) << " s</title></rect>\n";
      }
      if (const double none = dt - booked; none > 1e-6 * std::max(dt, 1.0)) {
        const double h = lane_h * none / scale;
        o << rect << " data-part=\"none\" y=\"" << fmt("%.2f", y - h) << "\" height=\"" << fmt("%.2f", h)
          << "\" fill=\"" << kNoneColor << "\"><title>" << title << "nothing booked " << fmt("%.2f", none)
          << " s</title></rect>\n";
      }
    }
  }
  // Time axis, in seconds since the strategy started.
  const double axis_y = T + plot_h + 2;
  o << "<line x1=\"" << L << "\" y1=\"" << axis_y << "\" x2=\"" << L + pw << "\" y2=\"" << axis_y
    << "\" stroke=\"#999\"/>\n";
  const double step = tickStep(t_max, 8);
  for (double t = 0; t <= t_max + 1e-9; t += step)
    o << "<text x=\"" << num(x(t)) << "\" y=\"" << num(axis_y + 14) << "\" text-anchor=\"middle\">" << fmt("%g", t)
      << "</text>\n";
  o << "<text x=\"" << L + pw << "\" y=\"" << num(axis_y + 14) << "\" text-anchor=\"end\" dy=\"14\">time (s)</text>\n";
  double lx = L;
  const double ly = H - 16;
  for (int c = 0; c <= kTimeCategories; ++c) {
    const bool none = c == kTimeCategories;
    const std::string name = none ? "nothing booked" : timeCategoryName(static_cast<TimeCategory>(c));
    o << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"12\" height=\"12\" fill=\""
      << (none ? kNoneColor : kCategoryColors[c]) << "\"/><text x=\"" << lx + 16 << "\" y=\"" << ly + 10 << "\">"
      << (none || c < 3 || c == 6 ? "" : "idle: ") << name << "</text>\n";
    lx += none ? 0 : 100;
  }
  o << "</svg>\n";
  return o.str();
}

std::string summaryTable(const ReportInput& in, const std::vector<std::string>& labels) {
  std::ostringstream o;
  o << "<table class=\"summary\"><thead><tr><th>strategy</th><th>kind</th><th>TTA (s)</th><th>final accuracy</th>"
       "<th>goodput (samples/s)</th><th>idle fraction</th><th>faults</th><th>failures</th><th>recoveries</th>"
       "<th>mean recovery (s)</th><th>samples lost</th><th>stop</th></tr></thead><tbody>\n";
  for (size_t i = 0; i < labels.size(); ++i) {
    const auto& s = in.summary["strategies"][labels[i]];
    std::string tta = s.contains("tta_seconds") && s["tta_seconds"].is_number() ? fmt("%.1f", s["tta_seconds"].get<double>())
                                                                                 : "not reached";
    double mean_rec = 0;
    size_t n_rec = 0;
    if (s.contains("recovery_seconds") && s["recovery_seconds"].is_array())
      for (const auto& v : s["recovery_seconds"])
        if (v.is_number()) mean_rec += v.get<double>(), ++n_rec;
    o << "<tr><td><span class=\"swatch\" style=\"background:" << colorOf(i) << "\"></span>" << htmlEscape(labels[i])
      << "</td><td>" << htmlEscape(s.value("kind", "")) << "</td><td>" << tta << "</td><td>"
      << fmt("%.4f", jnum(s, "final_accuracy")) << "</td><td>" << fmt("%.0f", jnum(s, "goodput_samples_per_s"))
      << "</td><td>" << fmt("%.1f%%", 100 * jnum(s, "idle_fraction")) << "</td><td>" << fmt("%.0f", jnum(s, "faults_applied"))
      << "</td><td>" << fmt("%.0f", jnum(s, "failures")) << "</td><td>" << fmt("%.0f", jnum(s, "recoveries"))
      << "</td><td>" << (n_rec ? fmt("%.2f", mean_rec / double(n_rec)) : "-") << "</td><td>"
      << fmt("%.0f", jnum(s, "samples_lost")) << "</td><td>" << htmlEscape(s.value("stop_reason", "")) << "</td></tr>\n";
  }
  o << "</tbody></table>\n";
  return o.str();
}

constexpr const char* kCss = R"(body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#666;font-size:13px}svg text{font-size:12px;fill:#333}svg .grid{stroke:#e5e5e5}
table.summary{border-collapse:collapse;font-size:13px}table.summary th,table.summary td{border:1px solid #ddd;padding:4px 8px;text-align:right}
table.summary th{background:#f5f5f5}table.summary td:first-child,table.summary td:nth-child(2){text-align:left;white-space:nowrap}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.legend span{margin-right:14px;font-size:13px}pre.spec{background:#f7f7f7;border:1px solid #e3e3e3;padding:10px;font-size:12px;overflow:auto})";

}  // namespace

std::string htmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Result<std::vector<SeriesPoint>> parseTimeseries(const std::string& text, const std::string& file) {
  std::vector<SeriesPoint> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1 || line.empty()) continue;  // header
    std::vector<std::string> cols;
    std::stringstream ls(line);
    std::string col;
    while (std::getline(ls, col, ',')) cols.push_back(col);
    if (cols.size() < 3)
      return Status::invalidArgument(file + ":" + std::to_string(lineno) + ": expected time_s,strategy,accuracy,..., got '" +
                                     line + "'");
    SeriesPoint p;
    char* end = nullptr;
    p.time_s = std::strtod(cols[0].c_str(), &end);
    if (end == cols[0].c_str())
      return Status::invalidArgument(file + ":" + std::to_string(lineno) + ": time_s is not a number: '" + cols[0] + "'");
    p.strategy = cols[1];
    p.accuracy = std::strtod(cols[2].c_str(), &end);
    if (end == cols[2].c_str())
      return Status::invalidArgument(file + ":" + std::to_string(lineno) + ": accuracy is not a number: '" + cols[2] + "'");
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<NodeCell> nodeCells(const std::vector<const NodeSeriesPoint*>& samples) {
  std::vector<NodeCell> cells;
  NodeSeriesPoint zero;  // the node's time starts at 0: the first cell runs from there to the first sample
  const NodeSeriesPoint* prev = &zero;
  for (const NodeSeriesPoint* p : samples) {
    if (p->time_s <= prev->time_s) continue;
    NodeCell cell{prev->time_s, p->time_s, {}};
    double booked = 0;
    for (size_t c = 0; c < cell.seconds.size(); ++c)
      booked += cell.seconds[c] = std::max(0.0, p->seconds[c] - prev->seconds[c]);
    prev = p;
    // More booked than the interval lasted: a call that ended here began earlier. Hand the surplus, in this
    // cell's proportions, to the latest earlier cells with room.
    const double dt = cell.end_s - cell.start_s;
    if (booked > dt) {
      std::array<double, kTimeCategories> surplus{};
      double left = booked - dt;
      for (size_t c = 0; c < surplus.size(); ++c) cell.seconds[c] -= surplus[c] = cell.seconds[c] * left / booked;
      for (auto it = cells.rbegin(); it != cells.rend() && left > 1e-12; ++it) {
        double held = 0;
        for (double v : it->seconds) held += v;
        const double room = (it->end_s - it->start_s) - held;
        if (room <= 0) continue;
        const double share = std::min(room, left) / left;
        for (size_t c = 0; c < surplus.size(); ++c) {
          const double moved = surplus[c] * share;
          it->seconds[c] += moved;
          surplus[c] -= moved;
        }
        left -= std::min(room, left);
      }
      for (size_t c = 0; c < surplus.size(); ++c) cell.seconds[c] += surplus[c];  // no room before: stays here
    }
    cells.push_back(cell);
  }
  return cells;
}

Result<std::vector<NodeSeriesPoint>> parseNodeTimeseries(const std::string& text, const std::string& file) {
  std::vector<NodeSeriesPoint> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  constexpr size_t kColumns = 4 + kTimeCategories;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1 || line.empty()) continue;  // header
    std::vector<std::string> cols;
    std::stringstream ls(line);
    for (std::string col; std::getline(ls, col, ',');) cols.push_back(col);
    const std::string where = file + ":" + std::to_string(lineno) + ": ";
    // Results written before throttled and unattributed existed have their 7 categories; those read as 0.
    if (cols.size() != kColumns && cols.size() != kColumns - 2)
      return Status::invalidArgument(where + "expected " + std::to_string(kColumns) + " columns (time_s,strategy,node,"
                                     "wall_s and one per category), got " + std::to_string(cols.size()));
    auto number = [&](size_t i, double* v) {
      char* end = nullptr;
      *v = std::strtod(cols[i].c_str(), &end);
      return end != cols[i].c_str() && *end == '\0' && std::isfinite(*v);
    };
    NodeSeriesPoint p;
    p.strategy = cols[1];
    p.node = cols[2];
    bool ok = number(0, &p.time_s) && number(3, &p.wall_s);
    for (size_t c = 0; 4 + c < cols.size() && ok; ++c) ok = number(4 + c, &p.seconds[c]);
    if (!ok) return Status::invalidArgument(where + "a time is not a finite number: '" + line + "'");
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<FaultBand> faultBandsFromEvents(const std::string& text) {
  std::vector<FaultBand> bands;
  std::string strategy;
  int64_t start_ns = 0;
  double last_t = 0;
  std::map<std::string, size_t> open;  // fault_id/node -> index into bands
  auto closeOpen = [&](double t) {
    for (auto& [key, idx] : open) bands[idx].end_s = std::max(bands[idx].start_s, t);
    open.clear();
  };
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto e = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!e.is_object() || !e.contains("type") || !e["type"].is_string()) continue;
    const std::string type = e["type"];
    const double t = e.contains("wall_ns") && e["wall_ns"].is_number() && start_ns > 0
                         ? double(e["wall_ns"].get<int64_t>() - start_ns) * 1e-9
                         : jnum(e, "t");
    if (type == "run.start") {
      closeOpen(last_t);
      strategy = e.value("strategy", "");
      start_ns = e.contains("start_ns") && e["start_ns"].is_number() ? e["start_ns"].get<int64_t>() : 0;
      last_t = 0;
      continue;
    }
    if (type == "run.stop") {
      last_t = jnum(e, "t");
      closeOpen(last_t);
      continue;
    }
    if (type == "node.exited") {
      bands.push_back({e.value("strategy", strategy), "node.exited", e.value("node", ""), jnum(e, "t"), jnum(e, "t")});
      continue;
    }
    if (!type.starts_with("chaos.") || strategy.empty()) continue;
    last_t = std::max(last_t, t);
    const std::string kind = e.value("kind", "");
    const std::string node = e.value("node", "");
    const std::string key = std::to_string(e.value("fault_id", -1)) + "/" + node;
    if (type == "chaos.applied") {
      if (kind == "kill" || kind == "preempt") {
        bands.push_back({strategy, kind, node, t, t});
      } else {
        open[key] = bands.size();
        bands.push_back({strategy, kind, node, t, t});
      }
    } else if (type == "chaos.reverted") {
      auto it = open.find(key);
      if (it != open.end()) {
        bands[it->second].end_s = std::max(bands[it->second].start_s, t);
        open.erase(it);
      }
    }
  }
  closeOpen(last_t);
  return bands;
}

Result<ReportInput> loadReportInput(const std::string& dir) {
  ReportInput in;
  CHAOSBED_ASSIGN_OR_RETURN(std::string summary, readFile(dir + "/summary.json", true));
  in.summary = nlohmann::json::parse(summary, nullptr, false);
  if (!in.summary.is_object() || !in.summary.contains("strategies") || !in.summary["strategies"].is_object())
    return Status::invalidArgument(dir + "/summary.json: not a chaosbed summary (expected an object with 'strategies')");
  CHAOSBED_ASSIGN_OR_RETURN(std::string series, readFile(dir + "/timeseries.csv", false));
  CHAOSBED_ASSIGN_OR_RETURN(in.series, parseTimeseries(series, dir + "/timeseries.csv"));
  CHAOSBED_ASSIGN_OR_RETURN(std::string node_series, readFile(dir + "/node_timeseries.csv", false));
  CHAOSBED_ASSIGN_OR_RETURN(in.node_series, parseNodeTimeseries(node_series, dir + "/node_timeseries.csv"));
  CHAOSBED_ASSIGN_OR_RETURN(std::string events, readFile(dir + "/events.jsonl", false));
  in.faults = faultBandsFromEvents(events);
  std::istringstream lines(events);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("\"run.start\"") == std::string::npos) continue;
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("type", "") == "run.start" && e.contains("strategy") && e["strategy"].is_string())
      in.run_order.push_back(e["strategy"].get<std::string>());
  }
  CHAOSBED_ASSIGN_OR_RETURN(in.spec_yaml, readFile(dir + "/spec.yaml", false));
  return in;
}

std::string renderReport(const ReportInput& in) {
  std::vector<std::string> labels;
  if (in.summary.contains("strategies"))
    for (const auto& [label, s] : in.summary["strategies"].items()) labels.push_back(label);
  // summary.json keys are sorted; show strategies in run order (events.jsonl), then time-series order.
  std::vector<std::string> ordered;
  for (const auto& l : in.run_order)
    if (std::find(ordered.begin(), ordered.end(), l) == ordered.end() &&
        std::find(labels.begin(), labels.end(), l) != labels.end())
      ordered.push_back(l);
  for (const auto& p : in.series)
    if (std::find(ordered.begin(), ordered.end(), p.strategy) == ordered.end() &&
        std::find(labels.begin(), labels.end(), p.strategy) != labels.end())
      ordered.push_back(p.strategy);
  for (const auto& l : labels)
    if (std::find(ordered.begin(), ordered.end(), l) == ordered.end()) ordered.push_back(l);

  const std::string name = in.summary.value("experiment", "experiment");
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>chaosbed: " << htmlEscape(name)
    << "</title>\n<style>" << kCss << "</style></head><body>\n";
  o << "<h1>chaosbed report: " << htmlEscape(name) << "</h1>\n<p class=\"meta\">seed "
    << htmlEscape(in.summary.contains("seed") ? in.summary["seed"].dump() : "?") << " · target accuracy "
    << htmlEscape(in.summary.contains("target_accuracy") ? in.summary["target_accuracy"].dump() : "?") << " · "
    << (in.summary.value("complete", false) ? "complete" : "incomplete (interrupted or failed)") << " · "
    << in.faults.size() << " fault/exit event(s)</p>\n";
  if (in.summary.contains("emulation") && in.summary["emulation"].is_object()) {
    o << "<p class=\"meta\"><strong>" << htmlEscape(in.summary["emulation"].value("note", std::string()))
      << "</strong></p>\n";
    // A strategy that ran far from its emulated ratio measured another regime than the one named.
    const nlohmann::json strategies = in.summary.value("strategies", nlohmann::json::object());
    for (const std::string& label : ordered) {
      if (!strategies.is_object() || !strategies.contains(label) || !strategies[label].is_object()) continue;
      const nlohmann::json ccr = strategies[label].value("comm_compute_ratio", nlohmann::json());
      if (!ccr.is_object()) continue;
      const auto on_target = ccr.find("on_target");
      if (on_target == ccr.end() || !on_target->is_boolean() || on_target->get<bool>()) continue;
      auto number = [&](const char* key) { return ccr.contains(key) && ccr[key].is_number() ? ccr[key].get<double>() : NAN; };
      char text[256];
      std::snprintf(text, sizeof text, ": comm/compute ratio %.2f against the emulated %.2f (off by %+.0f%%), not the regime named",
                    number("measured"), number("target"), number("off_by") * 100);
      o << "<p class=\"meta\"><strong>warning: " << htmlEscape(label) << htmlEscape(text) << "</strong></p>\n";
    }
  }
  // A node the workers spent most of their time waiting for: the same diagnosis as the terminal's warning.
  if (const nlohmann::json strategies = in.summary.value("strategies", nlohmann::json::object()); strategies.is_object())
    for (const std::string& label : ordered) {
      if (!strategies.contains(label) || !strategies[label].is_object()) continue;
      const nlohmann::json b = strategies[label].value("bottleneck", nlohmann::json());
      if (!b.is_object() || !b.contains("node") || !b["node"].is_string() || !b.contains("waiting_fraction") ||
          !b["waiting_fraction"].is_number())
        continue;
      char pct[32];
      std::snprintf(pct, sizeof pct, "%.0f%%", 100 * b["waiting_fraction"].get<double>());
      o << "<p class=\"meta\"><strong>warning: " << htmlEscape(label) << "'s workers spent " << pct
        << " of their time waiting for " << htmlEscape(b["node"].get<std::string>()) << " ("
        << htmlEscape(b.value("why", std::string())) << ")</strong></p>\n";
    }
  if (in.summary.contains("simulated") && in.summary["simulated"].is_string())
    o << "<p class=\"meta\"><strong>" << htmlEscape(in.summary["simulated"].get<std::string>()) << "</strong></p>\n";
  o << "<h2>Accuracy vs time</h2>\n<p class=\"legend\">";
  for (size_t i = 0; i < ordered.size(); ++i)
    o << "<span><span class=\"swatch\" style=\"background:" << colorOf(i) << "\"></span>" << htmlEscape(ordered[i])
      << "</span>";
  for (const char* kind : {"pause", "slow", "link", "transport_error", "kill"})
    o << "<span><span class=\"swatch\" style=\"background:" << bandColor(kind) << "\"></span>"
      << (std::string(kind) == "kill" ? "kill / preempt / vanish" : kind) << "</span>";
  o << "<span>small dots: evaluations (the line holds each until the next)</span><span>&#9670; dotted: TTA</span>"
       "<span>&#9679; on the axis: node exit</span></p>\n";
  o << accuracyChart(in, ordered);
  o << "<h2>Where the time went</h2>\n" << idleChart(in, ordered);
  for (const std::string& label : ordered)
    if (std::string chart = nodeTimeChart(in, label); !chart.empty())
      o << "<h3>" << htmlEscape(label) << ": each node over time</h3>\n" << chart;
  o << "<h2>Summary</h2>\n" << summaryTable(in, ordered);
  o << "<h2>Resolved spec</h2>\n<pre class=\"spec\">" << htmlEscape(in.spec_yaml) << "</pre>\n</body></html>\n";
  return o.str();
}

Status writeReport(const std::string& dir) {
  CHAOSBED_ASSIGN_OR_RETURN(ReportInput in, loadReportInput(dir));
  return writeFileAtomically(dir + "/report.html", renderReport(in));
}

}  // namespace chaosbed::report
