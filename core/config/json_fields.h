#pragma once
// Checked reads of JSON that another process wrote (the bootstrap store's values: memberships, stats
// reports, link commands). Such JSON is untrusted input: any field may be missing, null, of the wrong type,
// out of range, non-finite or huge.
//
// Contract: nothing here throws. parseJson() turns a syntax error or an oversized text into InvalidArgument.
// A JsonFields keeps the first problem it met ("<what>: <field path>: <problem>") and returns a fallback
// (the `otherwise` value, or a value-initialised T) from every later getter, so a decoder reads all fields
// and checks status() once at the end. A missing field reads as `otherwise` when one is given and is an
// error otherwise; an explicit null is a type error either way (`"latency_ms": null` is never 0).
// Integers must be JSON integers (no 3.0), numbers must be finite, and both are checked against [lo, hi].
//
// Usage:
//   CHAOSBED_ASSIGN_OR_RETURN(nlohmann::json j, parseJson(text, "link command"));
//   JsonFields f(j, "link command");
//   double latency = f.number("latency_ms", 0, 3.6e6, 0.0);
//   std::vector<std::string> peers = f.strings("peers", 64, 1024);
//   CHAOSBED_RETURN_IF_ERROR(f.status());
//
// Threads: a JsonFields belongs to one thread; it refers to the json it reads, which must outlive it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "transports/base/status.h"

namespace chaosbed::config {

inline constexpr size_t kMaxJsonBytes = size_t{1} << 20;

// Parses text (at most max_bytes) without throwing; `what` names it in errors ("membership/3: ...").
Result<nlohmann::json> parseJson(std::string_view text, std::string_view what, size_t max_bytes = kMaxJsonBytes);

// A short, printable excerpt of untrusted text for a log line: at most max_chars, control bytes and
// non-ASCII bytes escaped as \xNN.
std::string excerpt(std::string_view text, size_t max_chars = 120);

class JsonFields {
 public:
  // Reads the members of `object`; an error unless it is a JSON object.
  JsonFields(const nlohmann::json& object, std::string what);

  bool has(const char* key) const;
  int64_t integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> otherwise = std::nullopt);
  double number(const char* key, double lo, double hi, std::optional<double> otherwise = std::nullopt);
  bool boolean(const char* key, std::optional<bool> otherwise = std::nullopt);
  std::string string(const char* key, size_t max_size, std::optional<std::string> otherwise = std::nullopt);
  // Arrays: every item is checked like the scalar getter; at most max_items items.
  std::vector<int64_t> integers(const char* key, int64_t lo, int64_t hi, size_t max_items,
                                std::optional<std::vector<int64_t>> otherwise = std::nullopt);
  std::vector<double> numbers(const char* key, double lo, double hi, size_t max_items,
                              std::optional<std::vector<double>> otherwise = std::nullopt);
  std::vector<std::string> strings(const char* key, size_t max_size, size_t max_items,
                                   std::optional<std::vector<std::string>> otherwise = std::nullopt);
  // A nested object; its problems are this reader's (field paths "parent.child"). When the key is absent
  // and `optional`, the nested reader reads an empty object (every getter returns its `otherwise`).
  JsonFields object(const char* key, bool optional = false);

  // Records a problem found by the caller (a cross-field check): "<what>: <path><field>: <message>".
  void error(std::string_view field, std::string_view message);
  bool ok() const { return !first_error_->has_value(); }
  // OK, or InvalidArgument with the first problem.
  Status status() const;

 private:
  JsonFields(const nlohmann::json* object, std::string what, std::string path,
             std::shared_ptr<std::optional<std::string>> first_error);
  // The member, or nullptr when absent (an error when there is no `otherwise`).
  const nlohmann::json* find(const char* key, bool has_otherwise);
  // Records a problem at a full field path (error() prefixes this reader's path).
  void fail(std::string_view field, std::string_view message);
  std::string field(const char* key) const;

  std::optional<int64_t> asInteger(const nlohmann::json& v, const std::string& field, int64_t lo, int64_t hi);
  std::optional<double> asNumber(const nlohmann::json& v, const std::string& field, double lo, double hi);
  const nlohmann::json* array(const char* key, size_t max_items, bool has_otherwise);

  const nlohmann::json* object_;  // nullptr: not an object (error recorded) or an absent optional object
  std::string what_;
  std::string path_;  // "" or "parent." for nested readers
  std::shared_ptr<std::optional<std::string>> first_error_;
};

}  // namespace chaosbed::config
