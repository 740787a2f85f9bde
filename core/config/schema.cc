#include "core/config/schema.h"

#include <algorithm>
#include <cmath>

namespace chaosbed::config {
namespace {

thread_local SchemaRecorder* active_recorder = nullptr;

void addUnique(std::vector<std::string>* to, const std::string& value) {
  if (std::find(to->begin(), to->end(), value) == to->end()) to->push_back(value);
}

// A bound as JSON: an integer when it is one (1 rather than 1.0), so that the schema reads as it was written.
nlohmann::json bound(double v) {
  if (std::floor(v) == v && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
  return v;
}

}  // namespace

SchemaRecorder::Scope::Scope(SchemaRecorder* recorder) : previous_(active_recorder) { active_recorder = recorder; }
SchemaRecorder::Scope::~Scope() { active_recorder = previous_; }
SchemaRecorder* SchemaRecorder::active() { return active_recorder; }

void SchemaRecorder::closedMap(const std::string& place, const std::vector<std::string>& keys) {
  Shape& s = shapes_[place];
  s.types.insert("object");
  s.closed = true;
  ++s.visits;
  for (const std::string& k : keys) addUnique(&s.keys, k);
}

void SchemaRecorder::freeMap(const std::string& place) { shapes_[place].types.insert("object"); }

void SchemaRecorder::list(const std::string& place) { shapes_[place].types.insert("array"); }

void SchemaRecorder::required(const std::string& map_place, const std::string& key, bool absent) {
  Shape& s = shapes_[map_place];
  s.types.insert("object");
  ++s.required_calls[key];
  if (absent) s.required_when_absent.insert(key);
}

void SchemaRecorder::scalar(const std::string& place, const char* type, double min, double max, bool min_open,
                            bool max_open) {
  Shape& s = shapes_[place];
  const std::string t = type;
  if (t == "duration") {  // config::Seconds: a number of seconds or a string such as "90s"
    s.types.insert("number");
    s.types.insert("string");
  } else {
    s.types.insert(t);
  }
  if (t != "integer" && t != "number" && t != "duration") return;
  if (!s.ranged) {
    s.ranged = true;
    s.min = min, s.max = max, s.min_open = min_open, s.max_open = max_open;
    return;
  }
  // Two ranges at one place: the smallest range holding both.
  if (min < s.min) s.min = min, s.min_open = min_open;
  else if (min == s.min) s.min_open = s.min_open && min_open;
  if (max > s.max) s.max = max, s.max_open = max_open;
  else if (max == s.max) s.max_open = s.max_open && max_open;
}

void SchemaRecorder::nullable(const std::string& place) { shapes_[place].types.insert("null"); }

void SchemaRecorder::rejected(const std::string& map_place, const std::string& key) {
  shapes_[childOf(map_place, key)].rejected = true;
}

void SchemaRecorder::choices(const std::string& place, const std::vector<std::string>& choices) {
  Shape& s = shapes_[place];
  s.types.insert("string");
  for (const std::string& c : choices) addUnique(&s.choices, c);
}

void SchemaRecorder::defaultValue(const std::string& place, nlohmann::json value) {
  Shape& s = shapes_[place];
  if (s.default_conflict) return;
  if (s.default_value && *s.default_value != value) {
    s.default_value.reset();
    s.default_conflict = true;
    return;
  }
  s.default_value = std::move(value);
}

nlohmann::json SchemaRecorder::schemaOf(const std::string& place) const {
  auto it = shapes_.find(place);
  if (it == shapes_.end()) return nlohmann::json::object();  // anything
  const Shape& s = it->second;
  if (s.types.empty() && s.rejected) return false;  // allowed only to be refused with a reason
  nlohmann::json out = nlohmann::json::object();

  std::set<std::string> types = s.types;
  if (types.count("number")) types.erase("integer");  // every integer is a number
  // Choices constrain the strings only; a place that also takes a map (restart_after: never | {fixed_s: 10})
  // is an anyOf of the enumerated string and the rest.
  const bool mixed_choices = !s.choices.empty() && std::any_of(types.begin(), types.end(), [](const std::string& t) {
    return t != "string" && t != "null";
  });
  if (mixed_choices) types.erase("string");
  if (types.size() == 1) out["type"] = *types.begin();
  else if (!types.empty()) out["type"] = std::vector<std::string>(types.begin(), types.end());

  if (s.ranged && (types.count("number") || types.count("integer"))) {
    if (std::isfinite(s.min)) out[s.min_open ? "exclusiveMinimum" : "minimum"] = bound(s.min);
    if (std::isfinite(s.max)) out[s.max_open ? "exclusiveMaximum" : "maximum"] = bound(s.max);
  }
  if (!s.choices.empty() && !mixed_choices) {
    nlohmann::json choices = s.choices;
    if (types.count("null")) choices.push_back(nullptr);
    out["enum"] = choices;
  }
  if (s.default_value) out["default"] = *s.default_value;

  if (types.count("object")) {
    nlohmann::json properties = nlohmann::json::object();
    std::vector<std::string> required;
    for (const std::string& key : s.keys) properties[key] = schemaOf(childOf(place, key));
    for (const auto& [key, calls] : s.required_calls) {
      if (!properties.contains(key)) properties[key] = schemaOf(childOf(place, key));
      if (s.required_when_absent.count(key) && (s.visits == 0 || calls >= s.visits)) required.push_back(key);
    }
    if (!properties.empty()) out["properties"] = properties;
    if (!required.empty()) out["required"] = required;
    if (s.closed) out["additionalProperties"] = false;
    else if (shapes_.count(childOf(place, "*"))) out["additionalProperties"] = schemaOf(childOf(place, "*"));
  }
  if (types.count("array") && shapes_.count(childOf(place, "[]"))) out["items"] = schemaOf(childOf(place, "[]"));

  if (mixed_choices) {
    nlohmann::json choice = {{"type", "string"}, {"enum", s.choices}};
    return {{"anyOf", nlohmann::json::array({choice, out})}};
  }
  return out;
}

nlohmann::json SchemaRecorder::toJsonSchema(const std::string& title) const {
  nlohmann::json root = schemaOf("");
  nlohmann::json out = {{"$schema", "http://json-schema.org/draft-07/schema#"}, {"title", title}};
  out.update(root);
  return out;
}

std::string SchemaRecorder::readable(const std::string& place) {
  std::string out;
  size_t start = 1;  // places start with the separator (the root is "")
  while (start <= place.size() && !place.empty()) {
    size_t end = place.find(kSeparator, start);
    if (end == std::string::npos) end = place.size();
    const std::string segment = place.substr(start, end - start);
    if (segment == "[]") out += "[]";
    else out += (out.empty() ? "" : ".") + segment;
    start = end + 1;
  }
  return out;
}

std::vector<std::string> SchemaRecorder::untypedKeys() const {
  std::vector<std::string> out;
  for (const auto& [place, shape] : shapes_) {
    if (!shape.closed) continue;
    for (const std::string& key : shape.keys) {
      auto child = shapes_.find(childOf(place, key));
      if (child == shapes_.end() || (child->second.types.empty() && !child->second.rejected))
        out.push_back(readable(childOf(place, key)));
    }
  }
  return out;
}

}  // namespace chaosbed::config
