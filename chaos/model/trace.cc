#include "chaos/model/trace.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace chaosbed::chaos {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> splitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, ',')) out.push_back(trim(field));
  if (!line.empty() && line.back() == ',') out.push_back("");
  return out;
}

std::optional<double> number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace

Result<std::vector<TraceRow>> readTrace(const std::string& path, TraceFormat format, double time_unit_s) {
  std::ifstream in(path);
  if (!in) return Status::fromErrno(path + ": cannot read trace");
  std::vector<TraceRow> rows;
  std::string line;
  int lineno = 0;
  bool first = true;
  auto bad = [&](const std::string& msg) { return Status::invalidArgument(path + ":" + std::to_string(lineno) + ": " + msg); };
  while (std::getline(in, line)) {
    ++lineno;
    const std::string t = trim(line);
    if (t.empty() || t[0] == '#') continue;
    std::vector<std::string> f = splitCsv(t);
    const bool header = first && !number(f[0]);
    first = false;
    if (header) continue;
    TraceRow row;
    row.line = lineno;
    std::optional<double> time = number(f[0]);
    if (!time || *time < 0) return bad("time '" + f[0] + "' is not a non-negative number");
    row.time_s = *time * time_unit_s;
    if (format == TraceFormat::kCapacity) {
      if (f.size() != 2) return bad("expected `t,available_instances` (2 fields), got " + std::to_string(f.size()));
      std::optional<double> avail = number(f[1]);
      if (!avail || *avail < 0 || *avail != std::floor(*avail))
        return bad("available_instances '" + f[1] + "' is not a non-negative integer");
      row.available = static_cast<int>(*avail);
    } else {
      if (f.size() < 3 || f.size() > 4)
        return bad("expected `time_s,node,fault[,duration_s]` (3 or 4 fields), got " + std::to_string(f.size()));
      if (f[1].empty()) return bad("empty node name");
      row.node = f[1];
      std::optional<FaultKind> kind = parseFaultKind(f[2]);
      if (!kind || *kind == FaultKind::kLink)
        return bad("fault '" + f[2] + "' is not one of kill, preempt, vanish, pause, slow");
      row.kind = *kind;
      if (f.size() == 4 && !f[3].empty()) {
        std::optional<double> d = number(f[3]);
        if (!d || *d <= 0) return bad("duration_s '" + f[3] + "' is not a positive number");
        if (endsNode(row.kind))
          return bad("a " + f[2] + " has no duration");
        row.duration_s = *d;
      }
    }
    if (!rows.empty() && row.time_s < rows.back().time_s)
      return bad("time goes backwards (" + f[0] + " after an earlier, later time)");
    rows.push_back(std::move(row));
  }
  if (rows.empty()) return Status::invalidArgument(path + ": trace has no rows");
  return rows;
}

}  // namespace chaosbed::chaos
