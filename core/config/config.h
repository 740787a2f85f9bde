#pragma once
// Validating reader over yaml-cpp for chaosbed's config files (experiment specs, the chaos section, suites).
//
// Contract: nothing here throws and nothing stops at the first error. Every problem becomes a Diagnostic
// with the file, the 1-based line and column, the dotted field path and a message; a parser walks the
// whole document once, then looks at Diagnostics::empty(). Getters return the fallback (optional) or a
// value-initialised T (required) when they record an error, so parsing can go on.
//
// Locations: type, range and enum errors point at the value; unknown or rejected keys point at the key; a
// missing field points at the map that should hold it; an empty value (`key:`) points at its key.
//
// Usage:
//   Diagnostics diags;
//   std::optional<YAML::Node> doc = loadYamlFile("spec.yaml", &diags);   // syntax errors land in diags
//   if (!doc) return diags.toStatus();
//   ConfigNode root(*doc, "spec.yaml", &diags);
//   ConfigNode cluster = root.child("cluster");
//   cluster.checkKeys({"workers", "servers", "transport"});            // unknown keys: did-you-mean
//   int workers = cluster.required<int>("workers", Range::positive());
//   int servers = cluster.optional<int>("servers", 0, Range::nonNegative());
//   std::string transport = cluster.oneOf("transport", {"ucx", "nccl"}, "ucx");
//   std::optional<int> staleness = s.nullable<int>("max_staleness", std::nullopt, Range::nonNegative());
//   for (const ConfigNode& fault : root.child("faults").items()) { ... }   // paths "faults[0]", ...
//   if (workers < servers) cluster.errorAt("servers", "must not exceed cluster.workers");
//   if (!diags.empty()) for (const Diagnostic& d : diags.all()) std::cerr << d.toString() << "\n";
//
// Value types for required/optional/nullable/as: bool, int, int64_t, double, std::string, Seconds, and
// std::vector of any of these (a YAML list; each item is checked and located on its own). Numbers must be
// plain YAML scalars: a quoted "4" is a string, not an int. Seconds accepts a number (seconds) or a string
// such as "250ms", "90s", "2m", "1h30m".
//
// Dotted-path overrides of a document before parsing ("cluster.workers=8"): core/config/override.h.
// A JSON Schema of what a parser accepts, recorded from these same calls: core/config/schema.h.
//
// Threads: a ConfigNode and its Diagnostics belong to one thread. A ConfigNode holds a raw pointer to the
// Diagnostics, which must outlive it.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::config {

// One problem in a config file. line and column are 1-based; 0 means unknown (e.g. an unreadable file).
struct Diagnostic {
  std::string file;
  int line = 0;
  int column = 0;
  std::string field;  // dotted path: "strategies[1].on_failure"; empty for the whole document
  std::string message;

  // "file:line:col: field: message"; the location and the field are left out when unknown or empty.
  std::string toString() const;
  bool operator==(const Diagnostic&) const = default;
};

// An ordered collection of diagnostics; adding the same diagnostic twice keeps one.
class Diagnostics {
 public:
  // The first kMaxKept distinct diagnostics are kept; later ones are only counted (a hostile spec of 10,000
  // bad faults must not cost more to report than to read).
  static constexpr size_t kMaxKept = 1000;
  void add(Diagnostic diagnostic);
  void add(std::string file, int line, int column, std::string field, std::string message);
  bool empty() const { return total_ == 0; }
  size_t size() const { return total_; }  // every diagnostic added, kept or not
  const std::vector<Diagnostic>& all() const { return all_; }  // the kept ones
  // Every kept diagnostic's toString(), one per line, then "... and N more" when some were not kept.
  std::string toString() const;
  // OK when empty, else InvalidArgument carrying toString().
  Status toStatus() const;

 private:
  std::vector<Diagnostic> all_;
  std::unordered_set<std::string> seen_;  // toString() of each kept one, so that adding stays O(1)
  size_t total_ = 0;
};

// A numeric constraint; its description goes into the error message ("must be > 0, got -1").
struct Range {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false;  // min itself is excluded
  bool max_open = false;

  static Range any() { return {}; }
  static Range positive() { return {0, std::numeric_limits<double>::infinity(), true, false}; }   // > 0
  static Range nonNegative() { return {0, std::numeric_limits<double>::infinity(), false, false}; }  // >= 0
  static Range unit() { return {0, 1, false, false}; }                                   // [0, 1]
  static Range atLeast(double lo) { return {lo, std::numeric_limits<double>::infinity(), false, false}; }
  static Range closed(double lo, double hi) { return {lo, hi, false, false}; }           // [lo, hi]

  bool contains(double v) const;
  std::string describe() const;  // "> 0", ">= 1", "in [0, 1]", "in (0, 1]"
};

// A duration in seconds; see the header comment for the accepted spellings.
struct Seconds {
  double value = 0;
  bool operator==(const Seconds&) const = default;
};

// A YAML value plus where it sits: its dotted path, its file and location, and the Diagnostics that errors
// about it go to. Cheap to copy (yaml-cpp nodes are handles). A child that is absent from the document is
// still a ConfigNode (present() == false) whose errors land at the nearest map that exists.
class ConfigNode {
 public:
  // The root of a document; its path is empty, so children are "cluster", "cluster.workers", ...
  ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics);
  // A node somewhere below a root, e.g. the `chaos:` section handed to another parser: paths continue
  // from `path` ("chaos.faults[0]").
  ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics, std::string path);

  const YAML::Node& yaml() const { return node_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  Diagnostics* diagnostics() const { return diagnostics_; }
  int line() const { return line_; }      // 1-based
  int column() const { return column_; }  // 1-based

  bool present() const { return present_; }                        // in the document (maybe null)
  bool isNull() const { return !present_ || node_.IsNull(); }      // absent, `key:` or `key: null`
  bool isMap() const { return present_ && node_.IsMap(); }
  bool isSequence() const { return present_ && node_.IsSequence(); }
  bool isScalar() const { return present_ && node_.IsScalar(); }
  // "a map", "a list", "a scalar 'abc'", "null": for messages such as "expected a number, got a list".
  std::string describe() const;

  // Records an error about this node (field = path()).
  void error(std::string message) const;
  // Records an error about the child `key` of this map, at the key when present (field = path().key).
  void errorAt(const std::string& key, std::string message) const;

  bool has(const std::string& key) const;        // the key is present, even with a null value
  ConfigNode child(const std::string& key) const;  // absent key -> present() == false
  // Like child(), but records "missing required field" when the key is absent.
  ConfigNode requiredChild(const std::string& key) const;

  // A list's items (paths "path[i]"). Null or absent -> empty; anything else but a list is an error.
  std::vector<ConfigNode> items() const;
  // A map's entries in document order. Null or absent -> empty; anything else but a map is an error.
  std::vector<std::pair<std::string, ConfigNode>> entries() const;
  // True for a map, or for null/absent (treated as an empty map); otherwise records an error.
  bool expectMap() const;

  // Every key must be in `allowed`: others are errors with a did-you-mean suggestion; duplicate keys are
  // errors too. Also records an error when this node is neither a map nor null/absent.
  void checkKeys(std::initializer_list<std::string_view> allowed) const {
    checkKeys(std::span<const std::string_view>(allowed.begin(), allowed.size()));
  }
  void checkKeys(std::span<const std::string_view> allowed) const;
  void checkKeys(const std::vector<std::string>& allowed) const;
  // If `key` is present, records `reason` as an error at the key (e.g. an option that does not apply).
  void rejectKey(const std::string& key, const std::string& reason) const;

  // The value at `key`; absent -> "missing required field", null -> "required field has no value".
  template <class T>
  T required(const std::string& key, Range range = Range::any()) const {
    ConfigNode c = requiredChild(key);
    c.recordValue<T>(range);
    if (c.isNull()) {
      if (c.present()) c.error("required field has no value");
      return T{};
    }
    return c.as<T>(T{}, range);
  }
  // The value at `key`; absent or null -> fallback.
  template <class T>
  T optional(const std::string& key, T fallback, Range range = Range::any()) const {
    ConfigNode c = child(key);
    c.recordValue<T>(range);
    c.recordFallback(fallback);
    if (c.isNull()) return fallback;
    return c.as<T>(std::move(fallback), range);
  }
  // The value at `key`; absent -> fallback; explicit null (`key: null` or `key:`) -> nullopt.
  template <class T>
  std::optional<T> nullable(const std::string& key, std::optional<T> fallback, Range range = Range::any()) const {
    ConfigNode c = child(key);
    c.recordValue<T>(range);
    c.recordNullable();
    if (fallback) c.recordFallback(*fallback);
    if (!c.present()) return fallback;
    if (c.isNull()) return std::nullopt;
    return c.as<T>(fallback.value_or(T{}), range);
  }
  // This node's own value (e.g. a list item); on error records it and returns fallback.
  template <class T>
  T as(T fallback = T{}, Range range = Range::any()) const {
    recordValue<T>(range);
    if constexpr (IsVector<T>::value) {
      using Item = typename T::value_type;
      if (!isSequence()) {
        error("expected a list, got " + describe());
        return fallback;
      }
      T out;
      bool ok = true;
      for (const ConfigNode& item : items()) {
        Item v{};
        if (item.decode(&v, range)) out.push_back(std::move(v));
        else ok = false;
      }
      return ok ? out : fallback;
    } else {
      T v{};
      return decode(&v, range) ? v : fallback;
    }
  }

  // A string that must be one of `choices` (with a did-you-mean for near misses).
  std::string oneOf(const std::string& key, std::initializer_list<std::string_view> choices,
                    std::string fallback) const;
  std::string requiredOneOf(const std::string& key, std::initializer_list<std::string_view> choices) const {
    return requiredOneOf(key, std::span<const std::string_view>(choices.begin(), choices.size()));
  }
  std::string requiredOneOf(const std::string& key, std::span<const std::string_view> choices) const;
  // This node's own string value, which must be one of `choices`; returns fallback on error.
  std::string asOneOf(std::initializer_list<std::string_view> choices, std::string fallback) const {
    return asOneOf(std::span<const std::string_view>(choices.begin(), choices.size()), std::move(fallback));
  }
  std::string asOneOf(std::span<const std::string_view> choices, std::string fallback) const;

 private:
  template <class T>
  struct IsVector : std::false_type {};
  template <class T, class A>
  struct IsVector<std::vector<T, A>> : std::true_type {};

  ConfigNode(YAML::Node node, std::string file, Diagnostics* diagnostics, std::string path, bool present,
             int line, int column, int key_line, int key_column, std::string schema_place);
  ConfigNode childAt(const YAML::Node& key, const YAML::Node& value, const std::string& name) const;
  std::string childPath(const std::string& key) const;
  void errorAtLocation(int line, int column, std::string field, std::string message) const;
  bool checkRange(double v, const Range& range) const;

  // Reports to the thread's SchemaRecorder, when one is recording (core/config/schema.h).
  static bool recording();
  std::string childPlace(const std::string& segment) const;
  void recordScalar(const char* type, const Range& range, bool list) const;
  void recordNullable() const;
  void recordChoices(std::span<const std::string_view> choices) const;
  void recordDefault(bool v) const;
  void recordDefault(int64_t v) const;
  void recordDefault(double v) const;
  void recordDefault(const std::string& v) const;
  template <class T>
  static constexpr const char* schemaType() {
    if constexpr (std::is_same_v<T, bool>) return "boolean";
    else if constexpr (std::is_integral_v<T>) return "integer";
    else if constexpr (std::is_floating_point_v<T>) return "number";
    else if constexpr (std::is_same_v<T, Seconds>) return "duration";
    else return "string";
  }
  template <class T>
  void recordValue(const Range& range) const {
    if (!recording()) return;
    if constexpr (IsVector<T>::value) recordScalar(schemaType<typename T::value_type>(), range, true);
    else recordScalar(schemaType<T>(), range, false);
  }
  template <class T>
  void recordFallback(const T& v) const {
    if (!recording()) return;
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, double> || std::is_same_v<T, std::string>)
      recordDefault(v);
    else if constexpr (std::is_integral_v<T>) recordDefault(static_cast<int64_t>(v));
  }

  // Scalar conversions; each records an error and returns false on failure.
  bool decode(bool* out, const Range& range) const;
  bool decode(int* out, const Range& range) const;
  bool decode(int64_t* out, const Range& range) const;
  bool decode(double* out, const Range& range) const;
  bool decode(std::string* out, const Range& range) const;
  bool decode(Seconds* out, const Range& range) const;

  YAML::Node node_;
  std::string file_;
  Diagnostics* diagnostics_;
  std::string path_;
  bool present_ = true;
  int line_ = 1, column_ = 1;          // the value (or, for an empty value, its key)
  int key_line_ = 1, key_column_ = 1;  // the key this value sits under (the item itself for list items)
  std::string schema_place_;           // SchemaRecorder's place; kept only while one is recording
};

// Parses YAML text. On a syntax error records "file:line:col: YAML syntax error: ..." and returns nullopt.
// An empty document parses to a null node.
// Larger specs are refused before parsing: the largest shipped spec is 3 KB, and a YAML node tree costs about
// 150x its text (a 3.9 MB spec of 38,000 faults took 640 MB to validate), so 1 MiB keeps validate, chaos plan and
// run under 200 MB and a couple of seconds.
inline constexpr uint64_t kMaxSpecBytes = uint64_t{1} << 20;
std::optional<YAML::Node> loadYamlString(const std::string& text, const std::string& file, Diagnostics* diagnostics);
// Reads and parses a file; an unreadable file is a diagnostic ("cannot read: No such file or directory").
std::optional<YAML::Node> loadYamlFile(const std::string& path, Diagnostics* diagnostics);

// Levenshtein distance, and the closest candidate to `word` if it is close enough to be a likely typo.
size_t editDistance(std::string_view a, std::string_view b);
std::optional<std::string> suggest(std::string_view word, const std::vector<std::string>& candidates);

// Parses a duration ("250ms", "90s", "2m", "1h30m", or a bare number of seconds) into seconds.
std::optional<double> parseDurationSeconds(std::string_view text);

// Formats a double as the shortest text that reads back as the same value ("0.05", "1e-06", "300").
std::string formatDouble(double v);

}  // namespace chaosbed::config
