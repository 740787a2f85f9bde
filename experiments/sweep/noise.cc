#include "experiments/sweep/noise.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/config/config.h"
#include "experiments/run/results.h"

namespace chaosbed::sweep {
namespace {

namespace fs = std::filesystem;

std::optional<double> field(const nlohmann::json& s, const char* key) {
  if (s.contains(key) && s[key].is_number()) return s[key].get<double>();
  return std::nullopt;
}

std::string num(const std::optional<double>& v) { return v ? config::formatDouble(*v) : ""; }

}  // namespace

Spread spreadOf(const std::vector<std::optional<double>>& values) {
  Spread s;
  std::vector<double> v;
  for (const auto& x : values) {
    ++s.runs;
    if (x) v.push_back(*x);
  }
  s.reached = int(v.size());
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= double(v.size());
  if (v.size() >= 2) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / double(v.size() - 1));
  }
  return s;
}

Result<NoiseOutcome> runNoise(const NoiseOptions& options, const PointRunner& runner) {
  if (options.runs < 2) return Status::invalidArgument("noise: --runs must be at least 2 (a spread needs two runs)");
  CHAOSBED_ASSIGN_OR_RETURN(spec::ExperimentSpec base, spec::loadExperimentSpec(options.spec_path));
  std::error_code ec;
  fs::create_directories(options.out_dir + "/runs", ec);
  if (ec) return Status::ioError("cannot create " + options.out_dir + "/runs: " + ec.message());
  NoiseOutcome out;
  std::map<std::string, std::vector<std::optional<double>>> tta, sustained;
  std::map<std::string, double> worst_resolution;  // the largest tta_resolution_fraction of a strategy's runs
  std::ostringstream csv;
  csv << "run,seed,strategy,tta_seconds,tta_sustained_seconds,tta_steps,tta_resolution_s,tta_resolution_steps,commit,"
         "load1_at_start,quiet\n";
  for (int i = 0; i < options.runs; ++i) {
    const int64_t seed = base.seed + i;
    spec::ExperimentSpec s = base;
    s.chaos.yaml.reset();  // reset(), not assignment: assigning writes through to base's shared node
    s.chaos.parsed = {};
    s.sweep.reset();
    s.seed = seed;
    s.training.seed = seed;
    if (i % 2 == 1) std::reverse(s.strategies.begin(), s.strategies.end());
    const std::string dir = options.out_dir + "/runs/" + std::to_string(i) + "-seed-" + std::to_string(seed);
    if (pointComplete(dir)) {
      ++out.resumed;
    } else {
      fs::remove_all(dir, ec);
      if (options.progress) std::fprintf(options.progress, "noise [%d/%d] seed %lld\n", i + 1, options.runs, static_cast<long long>(seed));
      Result<bool> complete = runner(s, dir);
      if (!complete.isOk() && complete.status().code() == StatusCode::kCancelled) return complete.status();
      if (!complete.isOk() || !*complete) ++out.failed;
      else ++out.ran;
    }
    std::ifstream in(dir + "/summary.json");
    const nlohmann::json summary = nlohmann::json::parse(in, nullptr, false);
    if (!summary.is_object() || !summary.value("complete", false)) continue;  // a failed run has no TTA to count
    const nlohmann::json prov = summary.value("provenance", nlohmann::json::object());
    for (const auto& st : base.strategies) {
      if (!summary["strategies"].contains(st.label)) continue;
      const nlohmann::json& r = summary["strategies"][st.label];
      const auto t = field(r, "tta_seconds"), ts = field(r, "tta_sustained_seconds");
      tta[st.label].push_back(t);
      sustained[st.label].push_back(ts);
      if (const auto share = field(r, "tta_resolution_fraction"))
        worst_resolution[st.label] = std::max(worst_resolution[st.label], *share);
      csv << i << "," << seed << "," << st.label << "," << num(t) << "," << num(ts) << "," << num(field(r, "tta_steps"))
          << "," << num(field(r, "tta_resolution_s")) << "," << num(field(r, "tta_resolution_steps")) << ","
          << prov.value("commit", "")
          << "," << num(field(prov, "load1_at_start")) << "," << (prov.value("quiet", true) ? 1 : 0) << "\n";
    }
  }
  nlohmann::json j = {{"spec", options.spec_path}, {"runs", options.runs}, {"first_seed", base.seed},
                      {"statistics", "mean, sample sd and CV (sd / mean) over the runs that reached the target"}};
  auto spreadJson = [](const Spread& s) {
    return nlohmann::json{{"runs", s.runs},          {"reached", s.reached}, {"mean_s", s.mean},
                          {"sd_s", s.sd},            {"cv", s.cv()},
                          {"censored_fraction", s.runs ? double(s.runs - s.reached) / s.runs : 0.0}};
  };
  for (const auto& st : base.strategies) {
    NoiseRow row{st.label, spreadOf(tta[st.label]), spreadOf(sustained[st.label]), worst_resolution[st.label]};
    j["strategies"][st.label] = {{"tta_seconds", spreadJson(row.tta)},
                                 {"tta_sustained_seconds", spreadJson(row.tta_sustained)},
                                 {"worst_resolution_fraction", row.worst_resolution_fraction}};
    out.strategies.push_back(row);
  }
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(options.out_dir + "/noise.csv", csv.str()));
  CHAOSBED_RETURN_IF_ERROR(writeFileAtomically(options.out_dir + "/noise.json", j.dump(2) + "\n"));
  return out;
}

}  // namespace chaosbed::sweep
