#pragma once
// Records the shape of the documents a ConfigNode parser accepts, so that a JSON Schema comes from the same
// rules as `validate` (experiments/spec/schema.h), not from a second description that drifts from them.
//
// While a SchemaRecorder::Scope is alive on a thread, every ConfigNode on that thread reports what the parser
// asks of it: checkKeys() a closed map and its keys, requiredChild() a required key, the typed getters a
// value's type, range and default, oneOf() its choices, items() a list, entries() a map of free-form keys.
// The typed getters report even when the key is absent, so one visit of a map types all its keys. A parser
// visits only the branches a document leads it into, so the generator parses probe documents that lead into
// every branch; untypedKeys() names keys that a map allows but that no probe typed (a key the parser only
// ever refuses, with rejectKey(), is typed as "never valid").
//
// Required: a key is required when the parser asked for it in every visit of its map, and at least once when
// it was absent (a key that is read only `if (has(key))` is optional). Ranges and choices recorded at one
// place more than once are joined (the widest range, every choice), and a default seen with two values is
// dropped: the schema is a relaxation of validate, and rules between fields (a key that applies to one fault
// kind only, "exactly one of") stay with validate.
//
// Threads: a recorder belongs to the thread whose Scope installed it.

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace chaosbed::config {

class SchemaRecorder {
 public:
  // A place in the document: segments joined by kSeparator; "[]" stands for every list item and "*" for
  // every value of a free-form map. The root is "".
  static constexpr char kSeparator = '\x1f';
  static std::string childOf(const std::string& place, const std::string& segment) {
    return place + kSeparator + segment;
  }

  // Installs a recorder for the calling thread until the Scope ends.
  class Scope {
   public:
    explicit Scope(SchemaRecorder* recorder);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SchemaRecorder* previous_;
  };
  static SchemaRecorder* active();

  // What a parser asked of the value at `place`; JSON Schema type names ("integer", "object", ...).
  void closedMap(const std::string& place, const std::vector<std::string>& keys);
  void freeMap(const std::string& place);
  void list(const std::string& place);
  void required(const std::string& map_place, const std::string& key, bool absent);
  void scalar(const std::string& place, const char* type, double min, double max, bool min_open, bool max_open);
  void nullable(const std::string& place);
  // rejectKey(): the key does not apply in this visit. A key only ever rejected is never valid there.
  void rejected(const std::string& map_place, const std::string& key);
  void choices(const std::string& place, const std::vector<std::string>& choices);
  void defaultValue(const std::string& place, nlohmann::json value);

  // The schema of the root place (draft 2020-12 keywords; `title` goes on the root).
  nlohmann::json toJsonSchema(const std::string& title) const;
  // Keys of a closed map that no getter typed, as readable dotted paths ("chaos.faults[].restart_after").
  std::vector<std::string> untypedKeys() const;

 private:
  struct Shape {
    std::set<std::string> types;
    bool ranged = false;
    double min = 0, max = 0;
    bool min_open = false, max_open = false;
    std::vector<std::string> choices;
    std::optional<nlohmann::json> default_value;
    bool default_conflict = false;
    bool closed = false;
    bool rejected = false;          // rejectKey() named it; with no type recorded, no value is valid
    std::vector<std::string> keys;  // allowed keys, in the order the parser lists them
    int visits = 0;                 // checkKeys() calls
    std::map<std::string, int> required_calls;
    std::set<std::string> required_when_absent;
  };
  nlohmann::json schemaOf(const std::string& place) const;
  static std::string readable(const std::string& place);

  std::map<std::string, Shape> shapes_;
};

}  // namespace chaosbed::config
