#include "experiments/sweep/sweep.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "experiments/report/report.h"
#include "experiments/run/results.h"
#include "experiments/stats/paired.h"

namespace chaosbed::sweep {
namespace {

namespace fs = std::filesystem;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

std::string groupName(const std::vector<std::pair<std::string, std::string>>& overrides, bool baseline) {
  std::string g = baseline ? "baseline" : "";
  for (const auto& [path, value] : overrides) g += (g.empty() ? "" : " ") + path + "=" + value;
  return g.empty() ? "default" : g;
}

std::optional<double> asNumber(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

nlohmann::json readSummary(const std::string& dir) {
  std::ifstream in(dir + "/summary.json");
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

std::optional<double> ttaOf(const nlohmann::json& s) {
  // The sustained TTA, as tune scores recipes: one crossing of the target by a noisy evaluation is not a
  // model that holds it (docs/design.md 4.1).
  if (s.contains("tta_sustained_seconds") && s["tta_sustained_seconds"].is_number())
    return s["tta_sustained_seconds"].get<double>();
  return std::nullopt;
}

struct Series {
  std::string name;  // the other axes' values
  std::vector<std::pair<size_t, TtaRatio>> points;  // (x index, ratio), in x order
};

// One marker: a filled circle (exact), a triangle pointing the way the true ratio lies from a bound, or a
// hollow circle (direction unknown).
std::string marker(double x, double y, RatioKind kind, const char* color) {
  char buf[320];
  switch (kind) {
    case RatioKind::kExact:
      std::snprintf(buf, sizeof buf, "<circle class=\"exact\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" stroke=\"%s\" fill=\"%s\"/>\n",
                    x, y, color, color);
      break;
    case RatioKind::kAtMost:
      std::snprintf(buf, sizeof buf,
                    "<path class=\"at-most\" d=\"M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z M%.1f,%.1f V%.1f\" stroke=\"%s\" "
                    "stroke-width=\"1.5\" fill=\"%s\"/>\n",
                    x - 6, y - 5, x + 6, y - 5, x, y + 5, x, y + 5, y + 14, color, color);
      break;
    case RatioKind::kAtLeast:
      std::snprintf(buf, sizeof buf,
                    "<path class=\"at-least\" d=\"M%.1f,%.1f L%.1f,%.1f L%.1f,%.1f Z M%.1f,%.1f V%.1f\" stroke=\"%s\" "
                    "stroke-width=\"1.5\" fill=\"%s\"/>\n",
                    x - 6, y + 5, x + 6, y + 5, x, y - 5, x, y - 5, y - 14, color, color);
      break;
    case RatioKind::kUnknown:
      std::snprintf(buf, sizeof buf,
                    "<circle class=\"unknown\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" stroke=\"%s\" stroke-width=\"1.5\" fill=\"#fff\"/>\n",
                    x, y, color);
      break;
  }
  return buf;
}

std::string crossoverSvg(const std::string& xname, const std::vector<std::string>& xvalues,
                         const std::vector<Series>& series, const std::optional<TtaRatio>& baseline,
                         const std::string& ps, const std::string& mirrored, std::vector<std::string>* crossings) {
  // x: numeric (log when logAxis) or categorical.
  std::vector<std::optional<double>> xs;
  bool numeric = !xvalues.empty();
  for (const auto& v : xvalues) {
    xs.push_back(asNumber(v));
    numeric = numeric && xs.back().has_value();
  }
  const bool logx = logAxis(xvalues);
  double xmin = 0, xmax = double(std::max<size_t>(1, xvalues.size() - 1));
  if (numeric) {
    xmin = **std::min_element(xs.begin(), xs.end());
    xmax = **std::max_element(xs.begin(), xs.end());
    if (xmax == xmin) xmax = xmin + 1;
  }
  auto xcoord = [&](size_t i) -> double {
    if (!numeric) return double(i);
    return logx ? std::log10(*xs[i]) : *xs[i];
  };
  const double cx0 = numeric ? (logx ? std::log10(xmin) : xmin) : 0;
  const double cx1 = numeric ? (logx ? std::log10(xmax) : xmax) : xmax;
  double ymax = 2;
  for (const auto& s : series)
    for (const auto& [i, r] : s.points) ymax = std::max(ymax, r.value * 1.1);
  if (baseline) ymax = std::max(ymax, baseline->value * 1.1);
  std::set<RatioKind> kinds;
  for (const auto& s : series)
    for (const auto& [i, r] : s.points) kinds.insert(r.kind);
  // The plot area leaves a margin inside the frame so that end points and their markers stay clear of it.
  const double W = 760, H = 460, L = 70, R = 30, T = 40, B = 100, pw = W - L - R, ph = H - T - B, inset = 24;
  auto X = [&](double c) { return L + inset + (pw - 2 * inset) * (cx1 == cx0 ? 0.5 : (c - cx0) / (cx1 - cx0)); };
  auto Y = [&](double r) { return T + ph * (1 - r / ymax); };
  char buf[512];
  std::ostringstream o;
  o << "<svg class=\"crossover\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" viewBox=\"0 0 " << W << " " << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">TTA(" << report::htmlEscape(ps)
    << ") / TTA(" << report::htmlEscape(mirrored) << "): below 1, the parameter server reaches the target first</text>\n";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << pw << "\" height=\"" << ph << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (size_t i = 0; i < xvalues.size(); ++i) {
    std::snprintf(buf, sizeof buf, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>", X(xcoord(i)),
                  X(xcoord(i)), T + ph, T + ph + 4);
    o << buf;
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", X(xcoord(i)), T + ph + 17);
    o << buf << report::htmlEscape(xvalues[i]) << "</text>\n";
  }
  for (double r = 0; r <= ymax + 1e-9; r += ymax > 6 ? 1 : 0.5) {
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, Y(r) + 4, r);
    o << buf;
  }
  std::snprintf(buf, sizeof buf,
                "<line class=\"parity\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#000\" stroke-dasharray=\"6 4\"/>\n",
                L, L + pw, Y(1), Y(1));
  o << buf;
  if (baseline) {
    std::snprintf(buf, sizeof buf,
                  "<line class=\"baseline\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#888\" "
                  "stroke-dasharray=\"2 3\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#666\">no chaos "
                  "(baseline): %s%.2f</text>\n",
                  L, L + pw, Y(baseline->value), Y(baseline->value), L + pw - 6,
                  // Label on the side away from the parity line, which may be close.
                  Y(baseline->value) + (baseline->value < 1 ? 14 : -5),
                  baseline->kind == RatioKind::kAtMost ? "&lt;= " : baseline->kind == RatioKind::kAtLeast ? "&gt;= " : "",
                  baseline->value);
    o << buf;
  }
  o << "<text x=\"" << L + pw / 2 << "\" y=\"" << T + ph + 36 << "\" text-anchor=\"middle\">" << report::htmlEscape(xname)
    << (logx ? " (log scale)" : "") << "</text>\n";
  o << "<text transform=\"translate(16," << T + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">TTA ratio</text>\n";
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"};
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& s = series[k];
    const char* color = colors[k % std::size(colors)];
    std::ostringstream pts;
    for (const auto& [i, r] : s.points) {
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(xcoord(i)), Y(r.value));
      pts << buf;
    }
    o << "<polyline class=\"ratio\" data-series=\"" << report::htmlEscape(s.name) << "\" fill=\"none\" stroke=\"" << color
      << "\" stroke-width=\"2\" points=\"" << pts.str() << "\"/>\n";
    for (const auto& [i, r] : s.points) o << marker(X(xcoord(i)), Y(r.value), r.kind, color);
    // A crossing lies between two neighbouring points on decided, opposite sides of 1; undecided points in
    // between (weak bounds, unknown direction) do not place it.
    const std::pair<size_t, TtaRatio>* prev = nullptr;
    for (const auto& point : s.points) {
      if (point.second.side() == 0) continue;
      if (prev && prev->second.side() != point.second.side()) {
        const double r0 = prev->second.value, r1 = point.second.value;
        const double c0 = xcoord(prev->first), c1 = xcoord(point.first);
        const double c = c0 + (c1 - c0) * (1 - r0) / (r1 - r0);
        std::snprintf(buf, sizeof buf,
                      "<g class=\"crossing\"><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                      "stroke-dasharray=\"3 3\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"6\" fill=\"none\" stroke=\"%s\" "
                      "stroke-width=\"2\"/></g>\n",
                      X(c), X(c), T, T + ph, color, X(c), Y(1), color);
        o << buf;
        const bool bound = prev->second.kind != RatioKind::kExact || point.second.kind != RatioKind::kExact;
        const double xv = numeric ? (logx ? std::pow(10, c) : c) : c;
        std::snprintf(buf, sizeof buf, "%s: ratio crosses 1 (%s) between %s=%s and %s (at about %g%s%s)", s.name.c_str(),
                      point.second.side() < 0 ? "parameter server overtakes" : "mirrored overtakes", xname.c_str(),
                      xvalues[prev->first].c_str(), xvalues[point.first].c_str(), xv,
                      numeric ? (logx ? ", log-interpolated" : "") : ", interpolated index",
                      bound ? ", interpolated from a bound" : "");
        crossings->push_back(buf);
      }
      prev = &point;
    }
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s</text>\n", L + 8, T + 14 + 14 * double(k),
                  color, report::htmlEscape(s.name).c_str());
    o << buf;
  }
  // Legend of the marker kinds present, two columns under the axis title.
  std::vector<std::pair<RatioKind, std::string>> legend;
  if (kinds.count(RatioKind::kExact)) legend.emplace_back(RatioKind::kExact, "every run reached the target");
  if (kinds.count(RatioKind::kAtMost))
    legend.emplace_back(RatioKind::kAtMost, mirrored + " did not reach the target: ratio <= shown");
  if (kinds.count(RatioKind::kAtLeast)) legend.emplace_back(RatioKind::kAtLeast, ps + " did not: ratio >= shown");
  if (kinds.count(RatioKind::kUnknown))
    legend.emplace_back(RatioKind::kUnknown, "both missed it in some runs: direction unknown");
  for (size_t k = 0; k < legend.size(); ++k) {
    const double x = k % 2 ? L + pw / 2 : L, y = T + ph + 58 + 18 * double(k / 2);
    o << "<g class=\"legend\">" << marker(x + 6, y - 4, legend[k].first, "#444");
    std::snprintf(buf, sizeof buf, "<text x=\"%.1f\" y=\"%.1f\">", x + 18, y);
    o << buf << report::htmlEscape(legend[k].second) << "</text></g>\n";
  }
  o << "<text x=\"" << L << "\" y=\"" << H - 8
    << "\" fill=\"#666\">Mean TTA over the runs; an unreached run counts as the time limit (a lower bound on its TTA).</text>\n";
  o << "</svg>\n";
  return o.str();
}

}  // namespace

std::vector<std::string> PlannedPoint::assignments() const {
  // A point is a single experiment: without the sweep section (whose grid would otherwise be validated
  // against the point's document, e.g. chaos paths against a baseline that has no chaos).
  std::vector<std::string> out = {"sweep=null"};
  for (const auto& [path, value] : overrides) out.push_back(path + "=" + value);
  out.push_back("seed=" + std::to_string(seed));
  if (baseline) out.push_back("chaos=null");
  return out;
}

std::string pointId(const std::vector<std::pair<std::string, std::string>>& overrides, int64_t seed, bool baseline) {
  std::string key = baseline ? "baseline" : "point";
  std::string readable = baseline ? "baseline" : "";
  for (const auto& [path, value] : overrides) {
    key += "\n" + path + "=" + value;
    const std::string leaf = path.substr(path.find_last_of('.') == std::string::npos ? 0 : path.find_last_of('.') + 1);
    readable += (readable.empty() ? "" : "_") + slug(leaf) + "-" + slug(value);
  }
  key += "\nseed=" + std::to_string(seed);
  if (readable.size() > 80) readable.resize(80);
  char hash[16];
  std::snprintf(hash, sizeof hash, "%08llx", static_cast<unsigned long long>(fnv1a(key) & 0xffffffffull));
  return (readable.empty() ? std::string("point") : readable) + "_seed-" + std::to_string(seed) + "_" + hash;
}

std::vector<PlannedPoint> planSweep(const spec::ExperimentSpec& spec) {
  spec::SweepSpec sweep = spec.sweep.value_or(spec::SweepSpec{});
  if (sweep.seeds.empty()) sweep.seeds.push_back(spec.seed);
  std::vector<PlannedPoint> baselines, points;
  const bool has_chaos = !spec.chaos.parsed.faults.empty();
  for (const spec::SweepPoint& p : spec::sweepPoints(sweep)) {
    points.push_back({pointId(p.overrides, p.seed, false), groupName(p.overrides, false), p.overrides, p.seed, false});
    if (!has_chaos) continue;  // the points themselves are the baseline
    std::vector<std::pair<std::string, std::string>> kept;
    for (const auto& o : p.overrides)
      if (o.first != "chaos" && !o.first.starts_with("chaos.") && !o.first.starts_with("chaos[")) kept.push_back(o);
    PlannedPoint b{pointId(kept, p.seed, true), groupName(kept, true), kept, p.seed, true};
    if (std::none_of(baselines.begin(), baselines.end(), [&](const PlannedPoint& x) { return x.id == b.id; }))
      baselines.push_back(std::move(b));
  }
  baselines.insert(baselines.end(), points.begin(), points.end());
  return baselines;
}

double tQuantile95(int df) {
  static constexpr double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                      2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                      2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) df = 1;
  if (df <= 30) return kTable[df - 1];
  // Cornish-Fisher expansion around the normal quantile; within 0.001 of the exact value for df > 30.
  const double z = 1.959964, d = df;
  return z + (z * z * z + z) / (4 * d) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * d * d);
}

TtaStats ttaStats(const std::vector<std::optional<double>>& ttas, double time_limit_s) {
  TtaStats s;
  std::vector<double> v;
  double restricted_sum = 0;
  for (const auto& t : ttas) {
    ++s.runs;
    if (t) v.push_back(*t);
    restricted_sum += t ? *t : time_limit_s;
  }
  if (s.runs) s.restricted_mean = restricted_sum / s.runs;
  s.reached = int(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  std::vector<double> logs;
  for (double x : v) logs.push_back(std::log(std::max(x, 1e-9)));
  double log_mean = 0;
  for (double l : logs) log_mean += l / double(logs.size());
  s.geomean = s.ci_low = s.ci_high = std::exp(log_mean);
  if (v.size() >= 2) {
    double ss = 0;
    for (double l : logs) ss += (l - log_mean) * (l - log_mean);
    const double half = tQuantile95(int(v.size()) - 1) * std::sqrt(ss / double(v.size() - 1)) / std::sqrt(double(v.size()));
    s.ci_low = std::exp(log_mean - half);
    s.ci_high = std::exp(log_mean + half);
  }
  return s;
}

const char* ratioKindName(RatioKind kind) {
  switch (kind) {
    case RatioKind::kExact: return "exact";
    case RatioKind::kAtMost: return "at_most";
    case RatioKind::kAtLeast: return "at_least";
    case RatioKind::kUnknown: return "unknown";
  }
  return "unknown";
}

int TtaRatio::side() const {
  const bool below = value < 1, above = value > 1;
  switch (kind) {
    case RatioKind::kExact: return below ? -1 : above ? 1 : 0;
    case RatioKind::kAtMost: return below ? -1 : 0;
    case RatioKind::kAtLeast: return above ? 1 : 0;
    case RatioKind::kUnknown: return 0;
  }
  return 0;
}

std::optional<TtaRatio> ttaRatio(const TtaStats& ps, const TtaStats& mirrored) {
  if (ps.runs == 0 || mirrored.runs == 0 || (ps.reached == 0 && mirrored.reached == 0)) return std::nullopt;
  const bool ps_censored = ps.reached < ps.runs, m_censored = mirrored.reached < mirrored.runs;
  // A censored strategy's restricted mean is a lower bound on its mean TTA.
  const double num = ps_censored ? ps.restricted_mean : ps.mean;
  const double den = m_censored ? mirrored.restricted_mean : mirrored.mean;
  if (!(den > 0)) return std::nullopt;
  const RatioKind kind = ps_censored && m_censored ? RatioKind::kUnknown
                         : m_censored              ? RatioKind::kAtMost
                         : ps_censored             ? RatioKind::kAtLeast
                                                   : RatioKind::kExact;
  return TtaRatio{num / den, kind};
}

bool logAxis(const std::vector<std::string>& xvalues) {
  if (xvalues.empty()) return false;
  double lo = 0, hi = 0;
  for (size_t i = 0; i < xvalues.size(); ++i) {
    const auto v = asNumber(xvalues[i]);
    if (!v || *v <= 0) return false;
    lo = i ? std::min(lo, *v) : *v;
    hi = i ? std::max(hi, *v) : *v;
  }
  return hi / lo > 10;
}

bool pointComplete(const std::string& dir) {
  nlohmann::json j = readSummary(dir);
  return j.is_object() && j.contains("complete") && j["complete"].is_boolean() && j["complete"].get<bool>();
}

namespace {

// The spec, its points in run order, and each point's spec (overrides applied, strategies in its order).
struct LoadedSweep {
  spec::ExperimentSpec base;
  std::vector<int64_t> seeds;  // the spec's, then those --seeds auto added
  std::vector<PlannedPoint> plan;
  std::vector<spec::ExperimentSpec> specs;
};

// Appends a point with its spec, validated.
Status addPoint(const SweepOptions& options, LoadedSweep& sweep, PlannedPoint p) {
  auto s = spec::loadExperimentSpec(options.spec_path, p.assignments());
  if (!s.isOk()) return s.status().withContext("sweep point " + p.id);
  // Interleaved: odd seed positions run the strategies in the reverse order.
  const auto at = std::find(sweep.seeds.begin(), sweep.seeds.end(), p.seed) - sweep.seeds.begin();
  if (at % 2 == 1) std::reverse(s->strategies.begin(), s->strategies.end());
  sweep.plan.push_back(std::move(p));
  sweep.specs.push_back(std::move(*s));
  return Status::ok();
}

// Validates every point before any runs, so that a bad grid value fails fast.
Result<LoadedSweep> loadSweep(const SweepOptions& options) {
  LoadedSweep sweep;
  CHAOSBED_ASSIGN_OR_RETURN(sweep.base, spec::loadExperimentSpec(options.spec_path));
  sweep.seeds = sweep.base.sweep && !sweep.base.sweep->seeds.empty() ? sweep.base.sweep->seeds
                                                                     : std::vector<int64_t>{sweep.base.seed};
  for (PlannedPoint& p : planSweep(sweep.base)) CHAOSBED_RETURN_IF_ERROR(addPoint(options, sweep, std::move(p)));
  std::error_code ec;
  fs::create_directories(options.out_dir + "/points", ec);
  if (ec) return Status::ioError("cannot create " + options.out_dir + "/points: " + ec.message());
  return sweep;
}

// Runs point i afresh: an incomplete point starts over, since its events.jsonl is appended to and half a run
// is no measurement.
Result<bool> runPoint(const SweepOptions& options, const LoadedSweep& sweep, size_t i, const PointRunner& runner) {
  const std::string dir = options.out_dir + "/points/" + sweep.plan[i].id;
  std::error_code ec;
  fs::remove_all(dir, ec);
  return runner(sweep.specs[i], dir);
}

Result<SweepOutcome> writeResults(const SweepOptions& options, const LoadedSweep& sweep, SweepOutcome out);

// The labels compared: the first parameter server against each mirrored strategy.
struct Compared {
  std::string ps;
  std::vector<std::string> mirrored;
};
Compared comparedLabels(const spec::ExperimentSpec& base) {
  Compared c;
  for (const auto& s : base.strategies) {
    if (s.kind == spec::StrategyKind::kParameterServer && c.ps.empty()) c.ps = s.label;
    if (s.kind == spec::StrategyKind::kMirrored) c.mirrored.push_back(s.label);
  }
  return c;
}

// Per group, per mirrored label: (TTA of the parameter server, TTA of that mirrored strategy), one per seed
// whose point ran both.
using PairsByGroup = std::map<std::string, std::map<std::string, std::vector<stats::TtaPair>>>;
PairsByGroup pairsByGroup(const SweepOptions& options, const LoadedSweep& sweep) {
  const Compared labels = comparedLabels(sweep.base);
  PairsByGroup pairs;
  if (labels.ps.empty()) return pairs;
  for (const PlannedPoint& p : sweep.plan) {
    const nlohmann::json summary = readSummary(options.out_dir + "/points/" + p.id);
    auto has = [&](const std::string& label) {
      return summary.is_object() && summary.contains("strategies") && summary["strategies"].contains(label) &&
             summary["strategies"][label].is_object();
    };
    for (const std::string& m : labels.mirrored)
      if (has(labels.ps) && has(m))
        pairs[p.group][m].push_back({ttaOf(summary["strategies"][labels.ps]), ttaOf(summary["strategies"][m])});
  }
  return pairs;
}

// Every group's stop under the auto-seeds rule, from the points run so far.
std::map<std::string, SeedStop> seedStops(const SweepOptions& options, const LoadedSweep& sweep, int max_looks) {
  std::map<std::string, int> seeds;
  std::map<std::string, double> limit;
  for (size_t i = 0; i < sweep.plan.size(); ++i) {
    ++seeds[sweep.plan[i].group];
    limit[sweep.plan[i].group] = sweep.specs[i].training.time_limit_s;
  }
  // Holm's family: every comparison of the sweep, as sweep.csv reports it.
  const PairsByGroup pairs = pairsByGroup(options, sweep);
  std::vector<std::pair<std::string, stats::PairedRatio>> all;
  std::vector<double> p_values;
  for (const auto& [group, by_label] : pairs)
    for (const auto& [label, list] : by_label)
      if (auto r = stats::pairedRatio(list, limit[group])) all.emplace_back(group, *r), p_values.push_back(r->p_value);
  const std::vector<double> p_holm = stats::holm(p_values);
  std::map<std::string, std::vector<Comparison>> of;
  for (size_t i = 0; i < all.size(); ++i) of[all[i].first].push_back({all[i].second, p_holm[i]});
  std::map<std::string, SeedStop> stops;
  for (const auto& [group, n] : seeds) stops[group] = seedStop(of[group], n, max_looks, *options.auto_seeds);
  return stops;
}

// Runs the plan's points from `from` on (a complete one is not run again); false when interrupted.
bool runPoints(const SweepOptions& options, const LoadedSweep& sweep, size_t from, const PointRunner& runner,
               SweepOutcome& out) {
  const std::vector<PlannedPoint>& plan = sweep.plan;
  for (size_t i = from; i < plan.size(); ++i) {
    if (pointComplete(options.out_dir + "/points/" + plan[i].id)) {
      ++out.resumed;
      if (options.progress) std::fprintf(options.progress, "sweep [%zu/%zu] %s: complete, not rerun\n", i + 1, plan.size(), plan[i].id.c_str());
      continue;
    }
    if (options.progress) {
      std::fprintf(options.progress, "sweep [%zu/%zu] %s (%s, seed %lld)\n", i + 1, plan.size(), plan[i].id.c_str(),
                   plan[i].group.c_str(), static_cast<long long>(plan[i].seed));
      std::fflush(options.progress);
    }
    auto r = runPoint(options, sweep, i, runner);
    ++out.ran;
    if (!r.isOk() || !*r) {
      ++out.failed;
      if (options.progress)
        std::fprintf(options.progress, "sweep: point %s %s\n", plan[i].id.c_str(),
                     r.isOk() ? "incomplete" : ("failed: " + r.status().toString()).c_str());
      if (!r.isOk() && r.status().code() == StatusCode::kCancelled) return false;
    }
  }
  return true;
}

}  // namespace

const char* seedStopName(SeedStop stop) {
  switch (stop) {
    case SeedStop::kOpen: return "open";
    case SeedStop::kPrecise: return "precise";
    case SeedStop::kDecided: return "decided";
    case SeedStop::kMaxSeeds: return "max_seeds";
  }
  return "open";
}

SeedStop seedStop(const std::vector<Comparison>& comparisons, int seeds, int max_looks, const AutoSeeds& rule) {
  bool all_decided = !comparisons.empty(), all_settled = !comparisons.empty();
  for (const Comparison& c : comparisons) {
    const bool decided = c.p_holm < 0.05 / double(std::max(1, max_looks));
    const stats::PairedRatio& r = c.ratio;
    const bool precise = std::isfinite(r.high) && r.low > 0 && r.high <= r.estimate * (1 + rule.precision) &&
                         r.low >= r.estimate / (1 + rule.precision);
    all_decided = all_decided && decided;
    all_settled = all_settled && (decided || precise);
  }
  if (all_decided) return SeedStop::kDecided;
  if (all_settled) return SeedStop::kPrecise;
  return seeds >= rule.max_seeds ? SeedStop::kMaxSeeds : SeedStop::kOpen;
}

Result<SweepOutcome> runSweep(const SweepOptions& options, const PointRunner& runner) {
  CHAOSBED_ASSIGN_OR_RETURN(LoadedSweep sweep, loadSweep(options));
  if (const Compared labels = comparedLabels(sweep.base);
      options.auto_seeds && (labels.ps.empty() || labels.mirrored.empty()))
    return Status::invalidArgument(options.spec_path + ": --seeds auto compares the parameter server with a mirrored "
                                   "strategy, and the spec lacks one of them");
  SweepOutcome out;
  bool going = runPoints(options, sweep, 0, runner, out);
  if (options.auto_seeds) {
    const int max_looks = std::max(1, options.auto_seeds->max_seeds - int(sweep.seeds.size()) + 1);
    for (;;) {
      out.seed_stops = seedStops(options, sweep, max_looks);
      std::set<std::string> open;
      for (const auto& [group, stop] : out.seed_stops)
        if (stop == SeedStop::kOpen) open.insert(group);
      if (open.empty() || !going) break;
      const int64_t seed = *std::max_element(sweep.seeds.begin(), sweep.seeds.end()) + 1;
      sweep.seeds.push_back(seed);
      spec::ExperimentSpec one = sweep.base;
      one.sweep = one.sweep.value_or(spec::SweepSpec{});
      one.sweep->seeds = {seed};
      const size_t from = sweep.plan.size();
      for (PlannedPoint& p : planSweep(one))
        if (open.count(p.group)) CHAOSBED_RETURN_IF_ERROR(addPoint(options, sweep, std::move(p)));
      if (options.progress)
        std::fprintf(options.progress, "sweep: --seeds auto: seed %lld for %zu point(s) not yet precise or decided\n",
                     static_cast<long long>(seed), open.size());
      going = runPoints(options, sweep, from, runner, out);
    }
  }
  out.points = int(sweep.plan.size());
  return writeResults(options, sweep, out);
}

Result<bool> runSweepPoint(const SweepOptions& options, const std::string& point_id, const PointRunner& runner) {
  CHAOSBED_ASSIGN_OR_RETURN(LoadedSweep sweep, loadSweep(options));
  for (size_t i = 0; i < sweep.plan.size(); ++i) {
    if (sweep.plan[i].id != point_id) continue;
    // As in runSweep: a complete point is a result, not to be run again (a re-applied Job, a requeued task).
    if (pointComplete(options.out_dir + "/points/" + point_id)) {
      if (options.progress) std::fprintf(options.progress, "sweep: point %s: complete, not rerun\n", point_id.c_str());
      return true;
    }
    return runPoint(options, sweep, i, runner);
  }
  return Status::notFound("sweep point '" + point_id + "' is not a point of " + options.spec_path +
                          " (was the spec edited after the sweep was planned?)");
}

Result<std::vector<PlannedPoint>> plannedPoints(const SweepOptions& options) {
  CHAOSBED_ASSIGN_OR_RETURN(LoadedSweep sweep, loadSweep(options));
  return sweep.plan;
}

Result<std::vector<PlannedPoint>> pendingPoints(const SweepOptions& options) {
  CHAOSBED_ASSIGN_OR_RETURN(std::vector<PlannedPoint> plan, plannedPoints(options));
  std::vector<PlannedPoint> pending;
  for (const PlannedPoint& p : plan)
    if (!pointComplete(options.out_dir + "/points/" + p.id)) pending.push_back(p);
  return pending;
}

Result<SweepOutcome> gatherSweep(const SweepOptions& options, const std::vector<std::string>& ran) {
  CHAOSBED_ASSIGN_OR_RETURN(LoadedSweep sweep, loadSweep(options));
  SweepOutcome out;
  out.points = int(sweep.plan.size());
  out.ran = int(ran.size());
  for (const PlannedPoint& p : sweep.plan) {
    if (!pointComplete(options.out_dir + "/points/" + p.id))
      ++out.failed;
    else if (std::find(ran.begin(), ran.end(), p.id) == ran.end())
      ++out.resumed;
  }
  return writeResults(options, sweep, out);
}

namespace {

Result<SweepOutcome> writeResults(const SweepOptions& options, const LoadedSweep& sweep, SweepOutcome out) {
  const spec::ExperimentSpec& base = sweep.base;
  const std::vector<PlannedPoint>& plan = sweep.plan;
  const std::vector<spec::ExperimentSpec>& specs = sweep.specs;
  // Collect: labels in spec order.
  std::vector<std::string> labels;
  for (const auto& s : base.strategies) labels.push_back(s.label);
  const Compared compared_labels = comparedLabels(base);
  const std::string& ps_label = compared_labels.ps;
  const std::vector<std::string>& mirrored_labels = compared_labels.mirrored;
  const std::string m_label = mirrored_labels.empty() ? std::string() : mirrored_labels.front();
  std::vector<std::string> axes;
  for (const auto& a : base.sweep.value_or(spec::SweepSpec{}).grid) axes.push_back(a.path);

  std::ostringstream csv;
  csv << "row,group,point,baseline,seed";
  for (const auto& a : axes) csv << "," << csvField(a);
  csv << ",strategy,complete,tta_sustained_seconds,reached_target,final_accuracy,idle_fraction,goodput_samples_per_s,recoveries,"
         "runs,reached,censored_fraction,tta_mean,tta_geomean,tta_ci95_low,tta_ci95_high,tta_restricted_mean,"
         "ratio_ps_over_mirrored,"
         "ratio_kind,commit,dirty,load1_at_start,quiet,run_order,paired_n,paired_censored,paired_ratio,paired_low,"
         "paired_high,paired_level,paired_method,paired_p,paired_p_holm,censoring,mtbf_s,mtbf_over_baseline_tta,seeds_stop\n";
  std::vector<std::string> groups;
  std::map<std::string, std::map<std::string, std::vector<std::optional<double>>>> by_group;  // group -> label -> tta
  std::map<std::string, const PlannedPoint*> group_point;
  std::map<std::string, double> group_limit;  // where an unreached run is censored
  std::map<std::string, double> group_mtbf;   // run seconds between failures, all the point's faults together
  PairsByGroup pairs = pairsByGroup(options, sweep);
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedPoint& p = plan[i];
    if (!by_group.count(p.group))
      groups.push_back(p.group), group_point[p.group] = &p, group_limit[p.group] = specs[i].training.time_limit_s;
    auto& g = by_group[p.group];
    const nlohmann::json summary = readSummary(options.out_dir + "/points/" + p.id);
    const bool complete = summary.is_object() && summary.value("complete", false);
    const nlohmann::json prov = summary.is_object() && summary.contains("provenance") && summary["provenance"].is_object()
                                    ? summary["provenance"]
                                    : nlohmann::json::object();
    if (!group_mtbf.count(p.group) && summary.is_object() && summary.contains("fault_rates") &&
        summary["fault_rates"].is_array()) {
      double per_s = 0;  // independent arrival processes: their rates add
      for (const auto& r : summary["fault_rates"])
        if (r.is_object() && r.contains("mtbf_s") && r["mtbf_s"].is_number() && r["mtbf_s"].get<double>() > 0)
          per_s += 1 / r["mtbf_s"].get<double>();
      if (per_s > 0) group_mtbf[p.group] = 1 / per_s;
    }
    for (const auto& label : labels) {
      const nlohmann::json s = summary.is_object() && summary.contains("strategies") && summary["strategies"].contains(label)
                                   ? summary["strategies"][label]
                                   : nlohmann::json();
      if (!s.is_object()) continue;  // not run (failed or interrupted before this strategy)
      const auto tta = ttaOf(s);
      g[label].push_back(tta);
      csv << "point," << csvField(p.group) << "," << p.id << "," << (p.baseline ? 1 : 0) << "," << p.seed;
      for (const auto& a : axes) {
        auto it = std::find_if(p.overrides.begin(), p.overrides.end(), [&](const auto& o) { return o.first == a; });
        csv << "," << (it == p.overrides.end() ? "" : csvField(it->second));
      }
      csv << "," << csvField(label) << "," << (complete ? 1 : 0) << "," << (tta ? fmt(*tta) : "") << ","
          << (tta ? 1 : 0) << "," << fmt(s.value("final_accuracy", 0.0)) << "," << fmt(s.value("idle_fraction", 0.0))
          << "," << fmt(s.value("goodput_samples_per_s", 0.0)) << "," << s.value("recoveries", 0) << ",,,,,,,,,,";
      const auto& order = specs[i].strategies;
      const auto pos = std::find_if(order.begin(), order.end(), [&](const auto& x) { return x.label == label; }) - order.begin();
      csv << "," << csvField(prov.value("commit", "")) << "," << (prov.value("dirty", false) ? 1 : 0) << ","
          << (prov.contains("load1_at_start") && prov["load1_at_start"].is_number() ? fmt(prov["load1_at_start"].get<double>()) : "")
          << "," << (prov.value("quiet", true) ? 1 : 0) << "," << pos << ",,,,,,,,,,,,,\n";
    }
  }
  std::map<std::string, std::map<std::string, TtaStats>> stats;
  std::map<std::string, std::optional<TtaRatio>> ratios;
  for (const auto& group : groups) {
    for (const auto& label : labels) stats[group][label] = ttaStats(by_group[group][label], group_limit[group]);
    if (!ps_label.empty() && !m_label.empty()) ratios[group] = ttaRatio(stats[group][ps_label], stats[group][m_label]);
  }
  // Every paired comparison of the sweep (point x mirrored strategy) is one family for Holm's correction.
  std::map<std::string, std::map<std::string, stats::PairedRatio>> paired_of;
  std::vector<std::pair<std::string, std::string>> compared;
  std::vector<double> p_values;
  for (const auto& group : groups)
    for (const auto& m : mirrored_labels)
      if (auto r = stats::pairedRatio(pairs[group][m], group_limit[group])) {
        paired_of[group][m] = *r;
        compared.emplace_back(group, m);
        p_values.push_back(r->p_value);
      }
  const std::vector<double> p_holm = stats::holm(p_values);
  std::map<std::string, std::map<std::string, double>> holm_of;
  for (size_t i = 0; i < compared.size(); ++i) holm_of[compared[i].first][compared[i].second] = p_holm[i];
  // MTBF / no-fault TTA (restricted mean of the one baseline): how many failure-free TTAs fit between two
  // failures, comparable across time scales and jobs. Without a single baseline, or without a rate, empty.
  std::string baseline_group;
  int baselines = 0;
  for (const auto& group : groups)
    if (group_point[group]->baseline) baseline_group = group, ++baselines;
  for (const auto& group : groups) {
    const PlannedPoint& p = *group_point[group];
    const std::optional<TtaRatio>& ratio = ratios[group];
    for (const auto& label : labels) {
      const TtaStats& st = stats[group][label];
      csv << "summary," << csvField(group) << ",," << (p.baseline ? 1 : 0) << ",";
      for (const auto& a : axes) {
        auto it = std::find_if(p.overrides.begin(), p.overrides.end(), [&](const auto& o) { return o.first == a; });
        csv << "," << (it == p.overrides.end() ? "" : csvField(it->second));
      }
      csv << "," << csvField(label) << ",,,,,,,," << st.runs << "," << st.reached << "," << fmt(st.censoredFraction())
          << "," << (st.reached ? fmt(st.mean) : "") << "," << (st.reached ? fmt(st.geomean) : "") << ","
          << (st.reached ? fmt(st.ci_low) : "") << ","
          << (st.reached ? fmt(st.ci_high) : "") << "," << (st.runs ? fmt(st.restricted_mean) : "") << ","
          << (ratio ? fmt(ratio->value) : "") << "," << (ratio ? ratioKindName(ratio->kind) : "") << ",,,,,";
      // A mirrored strategy's row pairs the parameter server with it; the parameter server's row with the
      // first mirrored strategy.
      const bool mirrored_row = std::find(mirrored_labels.begin(), mirrored_labels.end(), label) != mirrored_labels.end();
      const std::string& against = mirrored_row ? label : m_label;
      const auto paired = paired_of[group].find(against);
      if (paired != paired_of[group].end()) {
        const stats::PairedRatio& r = paired->second;
        csv << "," << r.pairs << "," << r.censored_pairs << "," << fmt(r.estimate) << "," << fmt(r.low) << ","
            << (std::isinf(r.high) ? "inf" : fmt(r.high)) << "," << fmt(r.level) << ","
            << stats::pairedMethodName(r.method) << "," << fmt(r.p_value) << "," << fmt(holm_of[group][against]);
      } else {
        csv << ",,,,,,,,,";
      }
      csv << ",restricted_mean_at_time_limit,";
      const auto mtbf = group_mtbf.find(group);
      if (mtbf != group_mtbf.end()) {
        csv << fmt(mtbf->second);
        const TtaStats* base_stats = baselines == 1 ? &stats[baseline_group][label] : nullptr;
        if (base_stats && base_stats->runs > 0 && base_stats->restricted_mean > 0)
          csv << "," << fmt(mtbf->second / base_stats->restricted_mean);
        else
          csv << ",";
      } else {
        csv << ",";
      }
      const auto stop = out.seed_stops.find(group);
      csv << "," << (stop == out.seed_stops.end() ? "" : seedStopName(stop->second)) << "\n";
    }
  }
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(options.out_dir + "/sweep.csv", csv.str()));

  if (!axes.empty() && !ps_label.empty() && !m_label.empty()) {
    const auto& first = base.sweep->grid.front();
    std::vector<Series> series;
    std::vector<std::string> baseline_groups;
    for (const auto& group : groups) {
      const PlannedPoint& p = *group_point[group];
      if (p.baseline) {
        baseline_groups.push_back(group);
        continue;
      }
      std::string rest;
      for (size_t a = 1; a < p.overrides.size(); ++a) rest += (rest.empty() ? "" : " ") + p.overrides[a].first + "=" + p.overrides[a].second;
      if (rest.empty()) rest = "all points";
      auto it = std::find_if(series.begin(), series.end(), [&](const Series& s) { return s.name == rest; });
      if (it == series.end()) series.push_back({rest, {}}), it = series.end() - 1;
      const size_t xi = std::find(first.values.begin(), first.values.end(), p.overrides[0].second) - first.values.begin();
      if (ratios[group]) it->points.emplace_back(xi, *ratios[group]);
    }
    for (Series& s : series)
      std::stable_sort(s.points.begin(), s.points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    // One baseline (a grid over chaos parameters only) is a reference for every point; several (one per
    // value of a non-chaos axis) would each belong to their own series, which the plot does not draw.
    const std::optional<TtaRatio> baseline = baseline_groups.size() == 1 ? ratios[baseline_groups[0]] : std::nullopt;
    CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(
        options.out_dir + "/crossover.svg",
        crossoverSvg(first.path, first.values, series, baseline, ps_label, m_label, &out.crossings)));
  }
  return out;
}

}  // namespace

}  // namespace chaosbed::sweep
