#include "experiments/run/provenance.h"

#include "transports/bootstrap/secret.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

namespace chaosbed::run {
namespace {

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0)
      if (auto colon = line.find(':'); colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
  return "unknown";
}

std::string commandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str(), out;
  for (char c : text) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

double loadAverage1() {
  std::ifstream in("/proc/loadavg");
  double load = -1;
  if (!(in >> load)) return -1;
  return load;
}

double cpuBusyFraction(std::chrono::milliseconds window) {
  // The first line of /proc/stat: user nice system idle iowait irq softirq steal ..., in ticks.
  auto read = [](uint64_t* busy, uint64_t* total) {
    std::ifstream in("/proc/stat");
    std::string cpu;
    if (!(in >> cpu) || cpu != "cpu") return false;
    *busy = *total = 0;
    uint64_t v = 0;
    for (int i = 0; i < 8 && in >> v; ++i) {
      *total += v;
      if (i != 3 && i != 4) *busy += v;
    }
    return *total > 0;
  };
  uint64_t busy0, total0, busy1, total1;
  if (!read(&busy0, &total0)) return -1;
  std::this_thread::sleep_for(window);
  if (!read(&busy1, &total1) || total1 <= total0) return -1;
  return double(busy1 - busy0) / double(total1 - total0);
}

bool waitForQuiet(double max_wait_s, FILE* progress) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_wait_s);
  bool said = false;
  for (;;) {
    const double busy = cpuBusyFraction(std::chrono::seconds(1));
    if (busy >= 0 && busy < kQuietBusy) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    if (!said && progress) {
      std::fprintf(progress, "waiting for the CPUs to be quiet (%.0f%% busy over the last second; want < %.0f%%), at most %.0f s\n",
                   100 * busy, 100 * kQuietBusy, max_wait_s);
      std::fflush(progress);
      said = true;
    }
  }
}

namespace {

// Which Slurm job (array task) ran this, so that a result can be traced to its job's log and accounting.
std::string slurmJob() {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v).substr(0, 32) : std::string();
  };
  const std::string array = env("SLURM_ARRAY_JOB_ID"), task = env("SLURM_ARRAY_TASK_ID");
  return !array.empty() && !task.empty() ? array + "_" + task : env("SLURM_JOB_ID");
}

}  // namespace

Provenance Provenance::atStart() {
  Provenance p;
  const BuildInfo b = buildInfo();
  p.version = b.version;
  p.commit = b.commit;
  p.dirty = b.dirty;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) p.host = host;
  p.cpu_model = cpuModel();
  p.cores = int(std::thread::hardware_concurrency());
  p.load1_at_start = loadAverage1();
  p.cpu_busy_at_start = cpuBusyFraction(kQuietWindow);
  p.quiet = p.cpu_busy_at_start >= 0 && p.cpu_busy_at_start < kQuietBusy;
  p.command_line = commandLine();
  p.slurm_job = slurmJob();
  p.started_at = utcNow();
  return p;
}

void Provenance::end() {
  ended_at = utcNow();
  load1_at_end = loadAverage1();
}

std::string sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &n, EVP_sha256(), nullptr) != 1) return "";
  return toHex(std::string_view(reinterpret_cast<const char*>(digest), n));
}

nlohmann::json Provenance::toJson() const {
  return {{"version", version},       {"commit", commit},           {"dirty", dirty},
          {"host", host},             {"cpu_model", cpu_model},     {"cores", cores},
          {"load1_at_start", load1_at_start}, {"cpu_busy_at_start", cpu_busy_at_start}, {"quiet", quiet},
          {"command_line", command_line},
          {"load1_at_end", load1_at_end < 0 ? nlohmann::json(nullptr) : nlohmann::json(load1_at_end)},
          {"slurm_job", slurm_job.empty() ? nlohmann::json(nullptr) : nlohmann::json(slurm_job)},
          {"spec_sha256", spec_sha256.empty() ? nlohmann::json(nullptr) : nlohmann::json(spec_sha256)},
          {"started_at", started_at}, {"ended_at", ended_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(ended_at)}};
}

}  // namespace chaosbed::run
