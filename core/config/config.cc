#include "core/config/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "core/config/schema.h"

namespace chaosbed::config {
namespace {

// yaml-cpp marks are 0-based and -1 when unknown.
bool validMark(const YAML::Mark& m) { return m.line >= 0 && m.column >= 0; }

// A scalar written in quotes carries the non-specific tag "!"; a plain one "?".
bool isQuoted(const YAML::Node& n) { return n.Tag() == "!"; }

std::string joinChoices(std::span<const std::string_view> choices) {
  std::string out;
  for (std::string_view c : choices) {
    if (!out.empty()) out += ", ";
    out += c;
  }
  return out;
}

std::optional<double> parseNumber(std::string_view s) {
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf") return std::numeric_limits<double>::infinity();
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -std::numeric_limits<double>::infinity();
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

template <class Int>
std::optional<Int> parseInteger(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  Int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

// ---- Diagnostic / Diagnostics ----

std::string Diagnostic::toString() const {
  std::string out = file;
  if (line > 0) out += ":" + std::to_string(line) + ":" + std::to_string(column);
  out += ": ";
  if (!field.empty()) out += field + ": ";
  return out + message;
}

void Diagnostics::add(Diagnostic diagnostic) {
  if (all_.size() >= kMaxKept) {
    ++total_;  // beyond the cap duplicates are not sorted out: the count is an upper bound
    return;
  }
  if (!seen_.insert(diagnostic.toString()).second) return;
  ++total_;
  all_.push_back(std::move(diagnostic));
}

void Diagnostics::add(std::string file, int line, int column, std::string field, std::string message) {
  add(Diagnostic{std::move(file), line, column, std::move(field), std::move(message)});
}

std::string Diagnostics::toString() const {
  std::string out;
  for (const Diagnostic& d : all_) out += d.toString() + "\n";
  if (total_ > all_.size()) out += "... and " + std::to_string(total_ - all_.size()) + " more problem(s) not shown\n";
  return out;
}

Status Diagnostics::toStatus() const {
  if (all_.empty()) return Status::ok();
  std::string text = toString();
  text.pop_back();  // the last newline
  return Status::invalidArgument(std::move(text));
}

// ---- Range ----

bool Range::contains(double v) const {
  if (!std::isfinite(v)) return false;  // .inf and .nan are never a setting
  if (min_open ? !(v > min) : !(v >= min)) return false;
  if (max_open ? !(v < max) : !(v <= max)) return false;
  return true;
}

std::string Range::describe() const {
  bool has_min = std::isfinite(min), has_max = std::isfinite(max);
  if (has_min && has_max)
    return std::string("in ") + (min_open ? "(" : "[") + formatDouble(min) + ", " + formatDouble(max) +
           (max_open ? ")" : "]");
  if (has_min) return std::string(min_open ? "> " : ">= ") + formatDouble(min);
  if (has_max) return std::string(max_open ? "< " : "<= ") + formatDouble(max);
  return "a finite number";
}

// ---- ConfigNode ----

ConfigNode::ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics)
    : ConfigNode(std::move(node), std::move(file), diagnostics, std::string()) {}

ConfigNode::ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics, std::string path)
    : node_(std::move(node)), file_(std::move(file)), diagnostics_(diagnostics), path_(std::move(path)) {
  present_ = node_.IsDefined();
  YAML::Mark m = node_.Mark();
  if (validMark(m)) {
    line_ = key_line_ = m.line + 1;
    column_ = key_column_ = m.column + 1;
  }
}

ConfigNode::ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics, std::string path,
                       bool present, int line, int column, int key_line, int key_column, std::string schema_place)
    : node_(std::move(node)),
      file_(std::move(file)),
      diagnostics_(diagnostics),
      path_(std::move(path)),
      present_(present),
      line_(line),
      column_(column),
      key_line_(key_line),
      key_column_(key_column),
      schema_place_(std::move(schema_place)) {}

std::string ConfigNode::childPath(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

ConfigNode ConfigNode::childAt(const YAML::Node& key, const YAML::Node& value, const std::string& name) const {
  int kl = line_, kc = column_;
  if (validMark(key.Mark())) {
    kl = key.Mark().line + 1;
    kc = key.Mark().column + 1;
  }
  int vl = kl, vc = kc;
  // An empty value (`key:`) has the mark of whatever token follows it; point at its key instead.
  if (!value.IsNull() && validMark(value.Mark())) {
    vl = value.Mark().line + 1;
    vc = value.Mark().column + 1;
  }
  return ConfigNode(value, file_, diagnostics_, childPath(name), true, vl, vc, kl, kc, childPlace(name));
}

std::string ConfigNode::describe() const {
  if (!present_) return "nothing";
  if (node_.IsNull()) return "null";
  if (node_.IsMap()) return "a map";
  if (node_.IsSequence()) return "a list";
  if (isQuoted(node_)) return "the string \"" + node_.Scalar() + "\"";
  return "'" + node_.Scalar() + "'";
}

void ConfigNode::errorAtLocation(int line, int column, std::string field, std::string message) const {
  diagnostics_->add(file_, line, column, std::move(field), std::move(message));
}

void ConfigNode::error(std::string message) const { errorAtLocation(line_, column_, path_, std::move(message)); }

void ConfigNode::errorAt(const std::string& key, std::string message) const {
  if (isMap()) {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) {
        const YAML::Mark m = it->first.Mark();
        errorAtLocation(validMark(m) ? m.line + 1 : line_, validMark(m) ? m.column + 1 : column_, childPath(key),
                        std::move(message));
        return;
      }
    }
  }
  errorAtLocation(line_, column_, childPath(key), std::move(message));
}

bool ConfigNode::has(const std::string& key) const { return child(key).present(); }

ConfigNode ConfigNode::child(const std::string& key) const {
  if (isMap()) {
    for (auto it = node_.begin(); it != node_.end(); ++it)
      if (it->first.IsScalar() && it->first.Scalar() == key) return childAt(it->first, it->second, key);
  }
  return ConfigNode(YAML::Node(), file_, diagnostics_, childPath(key), false, line_, column_, line_, column_,
                    childPlace(key));
}

ConfigNode ConfigNode::requiredChild(const std::string& key) const {
  ConfigNode c = child(key);
  if (recording()) SchemaRecorder::active()->required(schema_place_, key, !c.present());
  if (!c.present()) {
    if (present_ && !node_.IsNull() && !node_.IsMap())
      error("expected a map, got " + describe());
    else
      errorAtLocation(line_, column_, c.path(), "missing required field");
  }
  return c;
}

std::vector<ConfigNode> ConfigNode::items() const {
  std::vector<ConfigNode> out;
  if (recording()) SchemaRecorder::active()->list(schema_place_);
  if (isNull()) return out;
  if (!node_.IsSequence()) {
    error("expected a list, got " + describe());
    return out;
  }
  for (size_t i = 0; i < node_.size(); ++i) {
    YAML::Node item = node_[i];
    int l = line_, c = column_;
    if (validMark(item.Mark())) {
      l = item.Mark().line + 1;
      c = item.Mark().column + 1;
    }
    out.push_back(ConfigNode(item, file_, diagnostics_, path_ + "[" + std::to_string(i) + "]", true, l, c, l, c,
                             childPlace("[]")));
  }
  return out;
}

std::vector<std::pair<std::string, ConfigNode>> ConfigNode::entries() const {
  std::vector<std::pair<std::string, ConfigNode>> out;
  if (!expectMap() || isNull()) return out;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (!it->first.IsScalar()) {
      error("map keys must be plain strings");
      continue;
    }
    std::string key = it->first.Scalar();
    ConfigNode value = childAt(it->first, it->second, key);
    value.schema_place_ = childPlace("*");  // a free-form key: every value shares one place
    out.emplace_back(key, std::move(value));
  }
  return out;
}

bool ConfigNode::expectMap() const {
  if (recording()) SchemaRecorder::active()->freeMap(schema_place_);
  if (isNull() || node_.IsMap()) return true;
  error("expected a map, got " + describe());
  return false;
}

void ConfigNode::checkKeys(std::span<const std::string_view> allowed) const {
  checkKeys(std::vector<std::string>(allowed.begin(), allowed.end()));
}

void ConfigNode::checkKeys(const std::vector<std::string>& allowed) const {
  if (recording()) SchemaRecorder::active()->closedMap(schema_place_, allowed);
  if (!expectMap() || isNull()) return;
  std::unordered_map<std::string, int> first_line;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    int l = validMark(it->first.Mark()) ? it->first.Mark().line + 1 : line_;
    int c = validMark(it->first.Mark()) ? it->first.Mark().column + 1 : column_;
    if (!it->first.IsScalar()) {
      errorAtLocation(l, c, path_, "map keys must be plain strings");
      continue;
    }
    const std::string& key = it->first.Scalar();
    auto [seen, inserted] = first_line.emplace(key, l);
    if (!inserted) {
      errorAtLocation(l, c, childPath(key), "duplicate field (first given at line " + std::to_string(seen->second) + ")");
      continue;
    }
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string message = "unknown field";
    if (std::optional<std::string> s = suggest(key, allowed)) {
      message += " (did you mean '" + *s + "'?)";
    } else {
      std::string list;
      for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
      message += " (expected one of: " + list + ")";
    }
    errorAtLocation(l, c, childPath(key), std::move(message));
  }
}

void ConfigNode::rejectKey(const std::string& key, const std::string& reason) const {
  if (recording()) SchemaRecorder::active()->rejected(schema_place_, key);
  if (has(key)) errorAt(key, reason);
}

bool ConfigNode::checkRange(double v, const Range& range) const {
  if (range.contains(v)) return true;
  const std::string got = isScalar() ? node_.Scalar() : formatDouble(v);
  if (!std::isfinite(v)) error("must be a finite number" + (range.describe() == "a finite number" ? std::string() : " " + range.describe()) + ", got " + got);
  else error("must be " + range.describe() + ", got " + got);
  return false;
}

bool ConfigNode::decode(bool* out, const Range&) const {
  if (isScalar() && !isQuoted(node_)) {
    bool v = false;
    if (YAML::convert<bool>::decode(node_, v)) {
      *out = v;
      return true;
    }
  }
  error("expected true or false, got " + describe());
  return false;
}

bool ConfigNode::decode(int* out, const Range& range) const {
  std::optional<int> v;
  if (isScalar() && !isQuoted(node_)) v = parseInteger<int>(node_.Scalar());
  if (!v) {
    error("expected an integer, got " + describe());
    return false;
  }
  if (!checkRange(*v, range)) return false;
  *out = *v;
  return true;
}

bool ConfigNode::decode(int64_t* out, const Range& range) const {
  std::optional<int64_t> v;
  if (isScalar() && !isQuoted(node_)) v = parseInteger<int64_t>(node_.Scalar());
  if (!v) {
    error("expected an integer, got " + describe());
    return false;
  }
  if (!checkRange(static_cast<double>(*v), range)) return false;
  *out = *v;
  return true;
}

bool ConfigNode::decode(double* out, const Range& range) const {
  std::optional<double> v;
  if (isScalar() && !isQuoted(node_)) v = parseNumber(node_.Scalar());
  if (!v) {
    error("expected a number, got " + describe());
    return false;
  }
  if (!checkRange(*v, range)) return false;
  *out = *v;
  return true;
}

bool ConfigNode::decode(std::string* out, const Range&) const {
  if (!isScalar()) {
    error("expected a string, got " + describe());
    return false;
  }
  *out = node_.Scalar();
  return true;
}

bool ConfigNode::decode(Seconds* out, const Range& range) const {
  std::optional<double> v;
  if (isScalar()) v = parseDurationSeconds(node_.Scalar());  // "90s" may be quoted or plain
  if (!v) {
    error("expected a duration (seconds, or e.g. \"250ms\", \"90s\", \"2m\", \"1h30m\"), got " + describe());
    return false;
  }
  if (!checkRange(*v, range)) return false;
  out->value = *v;
  return true;
}

std::string ConfigNode::asOneOf(std::span<const std::string_view> choices, std::string fallback) const {
  recordChoices(choices);
  std::string v;
  if (!decode(&v, Range::any())) return fallback;
  if (std::find(choices.begin(), choices.end(), v) != choices.end()) return v;
  std::string message = "'" + v + "' is not one of: " + joinChoices(choices);
  if (std::optional<std::string> s = suggest(v, std::vector<std::string>(choices.begin(), choices.end())))
    message += " (did you mean '" + *s + "'?)";
  error(std::move(message));
  return fallback;
}

std::string ConfigNode::oneOf(const std::string& key, std::initializer_list<std::string_view> choices,
                              std::string fallback) const {
  ConfigNode c = child(key);
  const std::span<const std::string_view> all(choices.begin(), choices.size());
  c.recordChoices(all);
  c.recordDefault(fallback);  // an empty fallback ("not given") is not recorded
  if (c.isNull()) return fallback;
  return c.asOneOf(all, std::move(fallback));
}

std::string ConfigNode::requiredOneOf(const std::string& key, std::span<const std::string_view> choices) const {
  ConfigNode c = requiredChild(key);
  c.recordChoices(choices);
  if (c.isNull()) {
    if (c.present()) c.error("required field has no value; expected one of: " + joinChoices(choices));
    return std::string();
  }
  return c.asOneOf(choices, std::string());
}

// ---- schema recording ----

bool ConfigNode::recording() { return SchemaRecorder::active() != nullptr; }

std::string ConfigNode::childPlace(const std::string& segment) const {
  return recording() ? SchemaRecorder::childOf(schema_place_, segment) : std::string();
}

void ConfigNode::recordScalar(const char* type, const Range& range, bool list) const {
  SchemaRecorder* r = SchemaRecorder::active();
  if (!r) return;
  if (list) r->list(schema_place_);
  r->scalar(list ? SchemaRecorder::childOf(schema_place_, "[]") : schema_place_, type, range.min, range.max,
            range.min_open, range.max_open);
}

void ConfigNode::recordNullable() const {
  if (SchemaRecorder* r = SchemaRecorder::active()) r->nullable(schema_place_);
}

void ConfigNode::recordChoices(std::span<const std::string_view> choices) const {
  if (SchemaRecorder* r = SchemaRecorder::active())
    r->choices(schema_place_, std::vector<std::string>(choices.begin(), choices.end()));
}

void ConfigNode::recordDefault(bool v) const {
  if (SchemaRecorder* r = SchemaRecorder::active()) r->defaultValue(schema_place_, v);
}
void ConfigNode::recordDefault(int64_t v) const {
  if (SchemaRecorder* r = SchemaRecorder::active()) r->defaultValue(schema_place_, v);
}
void ConfigNode::recordDefault(double v) const {
  if (SchemaRecorder* r = SchemaRecorder::active(); r && std::isfinite(v)) r->defaultValue(schema_place_, v);
}
void ConfigNode::recordDefault(const std::string& v) const {
  // An empty string is "not given" in these parsers (role: "", profile: ""), not a value to suggest.
  if (SchemaRecorder* r = SchemaRecorder::active(); r && !v.empty()) r->defaultValue(schema_place_, v);
}

// ---- loading ----

std::optional<YAML::Node> loadYamlString(const std::string& text, const std::string& file, Diagnostics* diagnostics) {
  if (text.size() > kMaxSpecBytes) {
    diagnostics->add(file, 0, 0, "", "text of " + std::to_string(text.size()) + " bytes: a spec may have at most " +
                                         std::to_string(kMaxSpecBytes >> 20) + " MiB");
    return std::nullopt;
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    int line = validMark(e.mark) ? e.mark.line + 1 : 0;
    int column = validMark(e.mark) ? e.mark.column + 1 : 0;
    diagnostics->add(file, line, column, "", "YAML syntax error: " + e.msg);
  }
  return std::nullopt;
}

std::optional<YAML::Node> loadYamlFile(const std::string& path, Diagnostics* diagnostics) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    diagnostics->add(path, 0, 0, "", std::string("cannot read: ") + std::strerror(errno));
    return std::nullopt;
  }
  if (!S_ISREG(st.st_mode)) {
    diagnostics->add(path, 0, 0, "", "cannot read: not a regular file");
    return std::nullopt;
  }
  if (uint64_t(st.st_size) > kMaxSpecBytes) {
    diagnostics->add(path, 0, 0, "", "file of " + std::to_string(st.st_size) + " bytes: a spec may have at most " +
                                         std::to_string(kMaxSpecBytes >> 20) + " MiB");
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) {
    diagnostics->add(path, 0, 0, "", std::string("cannot read: ") + std::strerror(errno));
    return std::nullopt;
  }
  return loadYamlString(text.str(), path, diagnostics);
}

// ---- helpers ----

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return out;
  };
  const std::string w = lower(word);
  // A typo is at most a third of the word's letters away (and at least one).
  const size_t limit = std::max<size_t>(1, w.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = editDistance(w, lower(c));
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::optional<double> parseDurationSeconds(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return std::nullopt;
  if (std::optional<double> bare = parseNumber(text)) return bare;
  double total = 0;
  while (!text.empty()) {
    size_t n = 0;
    while (n < text.size() && (std::isdigit(static_cast<unsigned char>(text[n])) || text[n] == '.')) ++n;
    if (n == 0) return std::nullopt;
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + n, v);
    if (ec != std::errc() || end != text.data() + n) return std::nullopt;
    text.remove_prefix(n);
    double unit = 0;
    if (text.starts_with("ms")) {
      unit = 1e-3;
      text.remove_prefix(2);
    } else if (text.starts_with("s")) {
      unit = 1;
      text.remove_prefix(1);
    } else if (text.starts_with("m")) {
      unit = 60;
      text.remove_prefix(1);
    } else if (text.starts_with("h")) {
      unit = 3600;
      text.remove_prefix(1);
    } else {
      return std::nullopt;
    }
    total += v * unit;
  }
  return total;
}

std::string formatDouble(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

}  // namespace chaosbed::config
