#include "core/config/json_fields.h"

#include <cmath>
#include <cstdio>
#include <limits>

namespace chaosbed::config {
namespace {

std::string formatDouble(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string describe(const nlohmann::json& v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number_float()) return formatDouble(v.get<double>());
  return v.type_name();
}

}  // namespace

Result<nlohmann::json> parseJson(std::string_view text, std::string_view what, size_t max_bytes) {
  if (text.size() > max_bytes)
    return Status::invalidArgument(std::string(what) + ": " + std::to_string(text.size()) + " bytes, more than " +
                                   std::to_string(max_bytes));
  // The parser validates UTF-8, so dump() of what it returns never throws.
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::invalidArgument(std::string(what) + ": not JSON: " + excerpt(text));
  return j;
}

std::string excerpt(std::string_view text, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

JsonFields::JsonFields(const nlohmann::json& object, std::string what)
    : JsonFields(&object, std::move(what), "", std::make_shared<std::optional<std::string>>()) {
  if (!object.is_object()) {
    fail("", std::string("expected an object, got ") + describe(object));
    object_ = nullptr;
  }
}

JsonFields::JsonFields(const nlohmann::json* object, std::string what, std::string path,
                       std::shared_ptr<std::optional<std::string>> first_error)
    : object_(object), what_(std::move(what)), path_(std::move(path)), first_error_(std::move(first_error)) {}

void JsonFields::error(std::string_view field, std::string_view message) {
  if (field.empty()) {
    fail(path_.empty() ? path_ : path_.substr(0, path_.size() - 1), message);  // "parent." names "parent"
  } else {
    fail(path_ + std::string(field), message);
  }
}

void JsonFields::fail(std::string_view field, std::string_view message) {
  if (first_error_->has_value()) return;
  std::string e = what_;
  if (!field.empty()) e += ": " + std::string(field);
  e += ": " + std::string(message);
  *first_error_ = std::move(e);
}

Status JsonFields::status() const {
  return first_error_->has_value() ? Status::invalidArgument(**first_error_) : Status::ok();
}

std::string JsonFields::field(const char* key) const { return path_ + key; }

bool JsonFields::has(const char* key) const { return object_ && object_->contains(key); }

const nlohmann::json* JsonFields::find(const char* key, bool has_otherwise) {
  if (!object_) return nullptr;
  auto it = object_->find(key);
  if (it == object_->end()) {
    if (!has_otherwise) fail(field(key), "missing");
    return nullptr;
  }
  return &*it;
}

std::optional<int64_t> JsonFields::asInteger(const nlohmann::json& v, const std::string& f, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) {
    fail(f, "expected an integer, got " + describe(v));
    return std::nullopt;
  }
  // nlohmann keeps non-negative integers as unsigned: read them as such, or 2^63 would wrap to a negative.
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo))) {
      fail(f, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(u));
      return std::nullopt;
    }
    return static_cast<int64_t>(u);
  }
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) {
    fail(f, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(i));
    return std::nullopt;
  }
  return i;
}

std::optional<double> JsonFields::asNumber(const nlohmann::json& v, const std::string& f, double lo, double hi) {
  if (!v.is_number()) {
    fail(f, "expected a number, got " + describe(v));
    return std::nullopt;
  }
  const double d = v.get<double>();
  // A literal beyond double's range (1e999) parses as infinity.
  if (!std::isfinite(d)) {
    fail(f, "must be finite");
    return std::nullopt;
  }
  if (d < lo || d > hi) {
    fail(f, "must be in [" + formatDouble(lo) + ", " + formatDouble(hi) + "], got " + formatDouble(d));
    return std::nullopt;
  }
  return d;
}

int64_t JsonFields::integer(const char* key, int64_t lo, int64_t hi, std::optional<int64_t> otherwise) {
  const nlohmann::json* v = find(key, otherwise.has_value());
  if (!v) return otherwise.value_or(0);
  return asInteger(*v, field(key), lo, hi).value_or(otherwise.value_or(0));
}

double JsonFields::number(const char* key, double lo, double hi, std::optional<double> otherwise) {
  const nlohmann::json* v = find(key, otherwise.has_value());
  if (!v) return otherwise.value_or(0.0);
  return asNumber(*v, field(key), lo, hi).value_or(otherwise.value_or(0.0));
}

bool JsonFields::boolean(const char* key, std::optional<bool> otherwise) {
  const nlohmann::json* v = find(key, otherwise.has_value());
  if (!v) return otherwise.value_or(false);
  if (!v->is_boolean()) {
    fail(field(key), "expected a boolean, got " + describe(*v));
    return otherwise.value_or(false);
  }
  return v->get<bool>();
}

std::string JsonFields::string(const char* key, size_t max_size, std::optional<std::string> otherwise) {
  const nlohmann::json* v = find(key, otherwise.has_value());
  if (!v) return otherwise.value_or("");
  if (!v->is_string()) {
    fail(field(key), "expected a string, got " + describe(*v));
    return otherwise.value_or("");
  }
  const auto& s = v->get_ref<const std::string&>();
  if (s.size() > max_size) {
    fail(field(key), "longer than " + std::to_string(max_size) + " bytes");
    return otherwise.value_or("");
  }
  return s;
}

const nlohmann::json* JsonFields::array(const char* key, size_t max_items, bool has_otherwise) {
  const nlohmann::json* v = find(key, has_otherwise);
  if (!v) return nullptr;
  if (!v->is_array()) {
    fail(field(key), "expected an array, got " + describe(*v));
    return nullptr;
  }
  if (v->size() > max_items) {
    fail(field(key), "more than " + std::to_string(max_items) + " items");
    return nullptr;
  }
  return v;
}

std::vector<int64_t> JsonFields::integers(const char* key, int64_t lo, int64_t hi, size_t max_items,
                                          std::optional<std::vector<int64_t>> otherwise) {
  const nlohmann::json* a = array(key, max_items, otherwise.has_value());
  if (!a) return otherwise.value_or(std::vector<int64_t>{});
  std::vector<int64_t> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    auto x = asInteger((*a)[i], field(key) + "[" + std::to_string(i) + "]", lo, hi);
    if (!x) return otherwise.value_or(std::vector<int64_t>{});
    out.push_back(*x);
  }
  return out;
}

std::vector<double> JsonFields::numbers(const char* key, double lo, double hi, size_t max_items,
                                        std::optional<std::vector<double>> otherwise) {
  const nlohmann::json* a = array(key, max_items, otherwise.has_value());
  if (!a) return otherwise.value_or(std::vector<double>{});
  std::vector<double> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    auto x = asNumber((*a)[i], field(key) + "[" + std::to_string(i) + "]", lo, hi);
    if (!x) return otherwise.value_or(std::vector<double>{});
    out.push_back(*x);
  }
  return out;
}

std::vector<std::string> JsonFields::strings(const char* key, size_t max_size, size_t max_items,
                                             std::optional<std::vector<std::string>> otherwise) {
  const nlohmann::json* a = array(key, max_items, otherwise.has_value());
  if (!a) return otherwise.value_or(std::vector<std::string>{});
  std::vector<std::string> out;
  out.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    const nlohmann::json& item = (*a)[i];
    const std::string f = field(key) + "[" + std::to_string(i) + "]";
    if (!item.is_string()) {
      fail(f, "expected a string, got " + describe(item));
      return otherwise.value_or(std::vector<std::string>{});
    }
    const auto& s = item.get_ref<const std::string&>();
    if (s.size() > max_size) {
      fail(f, "longer than " + std::to_string(max_size) + " bytes");
      return otherwise.value_or(std::vector<std::string>{});
    }
    out.push_back(s);
  }
  return out;
}

JsonFields JsonFields::object(const char* key, bool optional) {
  const nlohmann::json* v = find(key, optional);
  const std::string path = field(key) + ".";
  if (v && !v->is_object()) {
    fail(field(key), std::string("expected an object, got ") + describe(*v));
    v = nullptr;
  }
  return JsonFields(v, what_, path, first_error_);
}

}  // namespace chaosbed::config
