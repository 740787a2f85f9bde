#include "core/config/override.h"

#include <charconv>
#include <variant>
#include <vector>

namespace chaosbed::config {
namespace {

// One step of a path: a map key or a list index.
using Step = std::variant<std::string, size_t>;

Result<std::vector<Step>> splitPath(std::string_view path) {
  std::vector<Step> steps;
  const std::string where = "override path '" + std::string(path) + "'";
  size_t i = 0;
  bool expect_key = true;  // at the start and after a '.'
  while (i < path.size()) {
    if (path[i] == '[') {
      size_t close = path.find(']', i);
      if (close == std::string_view::npos) return Status::invalidArgument(where + ": '[' without ']'");
      std::string_view digits = path.substr(i + 1, close - i - 1);
      size_t index = 0;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
      if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size())
        return Status::invalidArgument(where + ": list index '" + std::string(digits) + "' is not a number");
      if (expect_key && !steps.empty()) return Status::invalidArgument(where + ": empty field name before '['");
      steps.emplace_back(index);
      i = close + 1;
      expect_key = false;
      continue;
    }
    if (path[i] == '.') {
      if (expect_key) return Status::invalidArgument(where + ": empty field name");
      expect_key = true;
      ++i;
      continue;
    }
    if (!expect_key) return Status::invalidArgument(where + ": expected '.' or '[' after ']'");
    size_t end = path.find_first_of(".[", i);
    if (end == std::string_view::npos) end = path.size();
    steps.emplace_back(std::string(path.substr(i, end - i)));
    i = end;
    expect_key = false;
  }
  if (steps.empty() || expect_key) return Status::invalidArgument(where + ": empty field name");
  return steps;
}

// A deep copy without source marks, so that validation errors fall back to the file's own locations.
YAML::Node copyWithoutMarks(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence: {
      YAML::Node out(YAML::NodeType::Sequence);
      for (const YAML::Node& item : n) out.push_back(copyWithoutMarks(item));
      return out;
    }
    case YAML::NodeType::Map: {
      YAML::Node out(YAML::NodeType::Map);
      for (auto it = n.begin(); it != n.end(); ++it)
        out.force_insert(copyWithoutMarks(it->first), copyWithoutMarks(it->second));
      return out;
    }
    case YAML::NodeType::Scalar: {
      YAML::Node out(n.Scalar());
      out.SetTag(n.Tag());  // keeps a quoted "4" a string
      return out;
    }
    default:
      return YAML::Node(YAML::NodeType::Null);
  }
}

std::string prefixOf(const std::vector<Step>& steps, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (const std::string* key = std::get_if<std::string>(&steps[i])) {
      if (!out.empty()) out += '.';
      out += *key;
    } else {
      out += '[';
      out += std::to_string(std::get<size_t>(steps[i]));
      out += ']';
    }
  }
  return out;
}

std::string quoted(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '\'';
  out += s;
  out += '\'';
  return out;
}

}  // namespace

Status applyOverride(YAML::Node root, std::string_view path, const YAML::Node& value) {
  CHAOSBED_ASSIGN_OR_RETURN(std::vector<Step> steps, splitPath(path));
  const std::string where = "override " + std::string(path);
  // First walk without changing anything, so that a bad path leaves the document as it was.
  {
    YAML::Node cur = root;
    for (size_t i = 0; i < steps.size(); ++i) {
      std::string at = "the document";
      if (i > 0) at = quoted(prefixOf(steps, i));
      if (const std::string* key = std::get_if<std::string>(&steps[i])) {
        if (!cur.IsMap() && !cur.IsNull())
          return Status::invalidArgument(where + ": " + at + " is not a map, cannot set field '" + *key + "'");
        const YAML::Node& ccur = cur;
        YAML::Node next = ccur[*key];
        if (!next.IsDefined()) break;  // the rest of the path is created
        cur.reset(next);
      } else {
        size_t index = std::get<size_t>(steps[i]);
        if (!cur.IsSequence()) return Status::invalidArgument(where + ": " + at + " is not a list");
        if (index > cur.size() || (index == cur.size() && i + 1 != steps.size()))
          return Status::invalidArgument(where + ": index " + std::to_string(index) + " is out of range; " + at +
                                         " has " + std::to_string(cur.size()) + " items");
        if (index == cur.size()) break;  // appends
        const YAML::Node& ccur = cur;
        cur.reset(ccur[index]);
      }
    }
  }
  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < steps.size(); ++i) {
    if (const std::string* key = std::get_if<std::string>(&steps[i]))
      cur.reset(cur[*key]);
    else
      cur.reset(cur[std::get<size_t>(steps[i])]);
  }
  YAML::Node copy = copyWithoutMarks(value);
  if (const std::string* key = std::get_if<std::string>(&steps.back())) {
    cur[*key] = copy;
  } else {
    size_t index = std::get<size_t>(steps.back());
    if (index == cur.size())
      cur.push_back(copy);
    else
      cur[index] = copy;
  }
  return Status::ok();
}

Status applyOverride(YAML::Node root, std::string_view path, std::string_view value_yaml) {
  YAML::Node value;
  try {
    value = YAML::Load(std::string(value_yaml));
  } catch (const YAML::Exception& e) {
    return Status::invalidArgument("override " + std::string(path) + ": value '" + std::string(value_yaml) +
                                   "' is not valid YAML: " + e.msg);
  }
  return applyOverride(std::move(root), path, value);
}

Status applyOverrideAssignment(YAML::Node root, std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos)
    return Status::invalidArgument("override '" + std::string(assignment) + "': expected PATH=VALUE");
  return applyOverride(std::move(root), assignment.substr(0, eq), assignment.substr(eq + 1));
}

}  // namespace chaosbed::config
