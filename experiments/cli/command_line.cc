#include "experiments/cli/command_line.h"

#include <gflags/gflags.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "experiments/run/provenance.h"

namespace chaosbed::cli {
namespace {

std::vector<std::string> splitLines(std::string_view text) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::vector<std::string> splitList(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Every flag that some command of the table takes: a chaosbed flag. Any other registered flag is gflags' or
// glog's own and is accepted everywhere.
std::set<std::string> chaosbedFlags(std::span<const Command> table) {
  std::set<std::string> all;
  for (const Command& c : table)
    for (std::string& f : splitList(c.flags)) all.insert(std::move(f));
  return all;
}

// gflags' own flags that act only through ParseCommandLineFlags, which chaosbed does not call.
bool isUnsupportedMetaFlag(const std::string& name) {
  static const std::set<std::string> kMeta = {"helpon", "helpmatch", "helppackage", "helpxml", "flagfile",
                                              "fromenv", "tryfromenv", "undefok"};
  return kMeta.count(name) > 0;
}

bool isRepeatable(const std::string& name) { return name == "set"; }

std::map<std::string, std::vector<std::string>>& repeatedValues() {
  static std::map<std::string, std::vector<std::string>> values;
  return values;
}

// The longest command whose words start `words`.
const Command* findCommand(std::span<const Command> table, const std::vector<std::string>& words, size_t* used) {
  const Command* best = nullptr;
  size_t best_words = 0;
  for (const Command& c : table) {
    std::istringstream name{std::string(c.name)};
    std::string w;
    size_t n = 0;
    bool match = true;
    while (name >> w) {
      if (n >= words.size() || words[n] != w) {
        match = false;
        break;
      }
      ++n;
    }
    if (match && n > best_words) {
      best = &c;
      best_words = n;
    }
  }
  *used = best_words;
  return best;
}

std::string closest(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  int best_d = 1 << 30;
  for (const std::string& c : candidates) {
    const int d = editDistance(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A suggestion is worth making when it is nearer than a rewrite: at most a third of the name changed.
  return best_d <= std::max<int>(2, int(name.size()) / 3) ? best : "";
}

std::string commandTitle(const Command* c) { return c ? "chaosbed " + std::string(c->name) : "chaosbed"; }

struct RawFlag {
  std::string name;   // as written, without dashes and without a "no" prefix for a bool
  std::string value;  // "true"/"false" for a bool
  bool known = false;
  bool missing_value = false;
};

}  // namespace

std::string unknownCommandMessage(std::span<const Command> table, const std::string& group, const std::string& word) {
  const std::string prefix = group.empty() ? "" : group + " ";
  std::vector<std::string> words;  // the word after the group of each command in it
  for (const Command& c : table) {
    if (c.name.size() <= prefix.size() || !c.name.starts_with(prefix)) continue;
    const std::string rest(c.name.substr(prefix.size()));
    words.push_back(rest.substr(0, rest.find(' ')));
  }
  const std::string near = closest(word, words);
  return "chaosbed: unknown command '" + prefix + word + "'" +
         (near.empty() ? "" : " (did you mean '" + prefix + near + "'?)") + "; `chaosbed help" +
         (group.empty() ? "` lists the commands" : " " + group + "` lists them");
}

int editDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = int(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diag = row[0];
    row[0] = int(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> commandFlags(const Command& command) { return splitList(command.flags); }

Result<CommandLine> parseCommandLine(std::span<const Command> table, int argc, char** argv) {
  CommandLine line;
  std::vector<std::string> positional;
  std::vector<RawFlag> raw;
  bool flags_ended = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_ended || arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_ended = true;
      continue;
    }
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    RawFlag f;
    const size_t eq = body.find('=');
    const bool has_value = eq != std::string::npos;
    f.name = body.substr(0, eq);
    if (f.name == "h" || f.name == "help" || f.name == "helpshort") {
      line.want = CommandLine::Want::kHelp;
      continue;
    }
    if (f.name == "helpfull") {
      line.want = CommandLine::Want::kHelpFull;
      continue;
    }
    if (f.name == "version") {
      line.want = CommandLine::Want::kVersion;
      continue;
    }
    gflags::CommandLineFlagInfo info;
    if (gflags::GetCommandLineFlagInfo(f.name.c_str(), &info) && !isUnsupportedMetaFlag(f.name)) {
      f.known = true;
      if (info.type == "bool") {
        f.value = has_value ? body.substr(eq + 1) : "true";
      } else if (has_value) {
        f.value = body.substr(eq + 1);
      } else if (i + 1 < argc) {
        f.value = argv[++i];
      } else {
        f.missing_value = true;
      }
    } else if (!has_value && f.name.rfind("no", 0) == 0 &&
               gflags::GetCommandLineFlagInfo(f.name.substr(2).c_str(), &info) && info.type == "bool") {
      f.known = true;
      f.name = f.name.substr(2);
      f.value = "false";
    } else if (has_value) {
      f.value = body.substr(eq + 1);
    }
    raw.push_back(std::move(f));
  }

  size_t used = 0;
  if (!positional.empty() && positional[0] == "help") {
    // `chaosbed help [COMMAND...]`: the same as `chaosbed COMMAND --help`.
    positional.erase(positional.begin());
    line.want = CommandLine::Want::kHelp;
  }
  line.command = findCommand(table, positional, &used);
  if (!positional.empty() && line.command == nullptr)
    return Status::invalidArgument(unknownCommandMessage(table, "", positional[0]));
  line.args.assign(positional.begin() + std::ptrdiff_t(used), positional.end());
  if (line.want == CommandLine::Want::kHelp && line.command && !line.args.empty()) {
    // `chaosbed help bench trian`: a sub-command that does not exist is an error, not the group's help.
    const std::string prefix = std::string(line.command->name) + " ";
    if (std::any_of(table.begin(), table.end(), [&](const Command& c) { return c.name.starts_with(prefix); }))
      return Status::invalidArgument(unknownCommandMessage(table, std::string(line.command->name), line.args[0]));
  }

  const std::set<std::string> ours = chaosbedFlags(table);
  const std::vector<std::string> accepted = line.command ? commandFlags(*line.command) : std::vector<std::string>{};
  const std::string title = commandTitle(line.command);
  for (const RawFlag& f : raw) {
    const bool applies = std::find(accepted.begin(), accepted.end(), f.name) != accepted.end();
    if (!f.known) {
      std::string msg = title + ": unknown flag --" + f.name;
      std::string near = closest(f.name, accepted);
      if (near.empty()) near = closest(f.name, std::vector<std::string>(ours.begin(), ours.end()));
      if (!near.empty()) msg += "; did you mean --" + near + "?";
      return Status::invalidArgument(msg + " (`" + title + " --help` lists its flags)");
    }
    if (ours.count(f.name) && !applies) {
      std::vector<std::string> users;
      for (const Command& c : table) {
        const std::vector<std::string> fl = commandFlags(c);
        if (!c.hidden && std::find(fl.begin(), fl.end(), f.name) != fl.end()) users.emplace_back(c.name);
      }
      std::string msg = title + ": --" + f.name + " does not apply here";
      if (!users.empty()) {
        msg += " (it is a flag of ";
        for (size_t k = 0; k < users.size(); ++k) msg += (k ? ", " : "") + users[k];
        msg += ")";
      }
      return Status::invalidArgument(msg + "; `" + title + " --help` lists its flags");
    }
    if (f.missing_value) return Status::invalidArgument(title + ": --" + f.name + " needs a value");
    line.flags.emplace_back(f.name, f.value);
  }
  return line;
}

Status applyFlags(const CommandLine& line) {
  repeatedValues().clear();
  for (const auto& [name, value] : line.flags) {
    if (isRepeatable(name)) repeatedValues()[name].push_back(value);
    if (gflags::SetCommandLineOption(name.c_str(), value.c_str()).empty()) {
      gflags::CommandLineFlagInfo info;
      gflags::GetCommandLineFlagInfo(name.c_str(), &info);
      return Status::invalidArgument(commandTitle(line.command) + ": --" + name + "=" + value + ": not a valid " +
                                     info.type + " value");
    }
  }
  return Status::ok();
}

const std::vector<std::string>& repeatedFlag(std::string_view name) { return repeatedValues()[std::string(name)]; }

namespace {

std::string flagLine(const std::string& name) {
  gflags::CommandLineFlagInfo info;
  if (!gflags::GetCommandLineFlagInfo(name.c_str(), &info)) return "  --" + name + "\n";
  std::string head = "  --" + name;
  if (info.type != "bool") head += "=" + std::string(info.type == "string" ? "TEXT" : "N");
  std::string def = info.type == "string" ? (info.default_value.empty() ? "" : "\"" + info.default_value + "\"")
                                          : info.default_value;
  if (info.type == "bool" && info.default_value == "false") def.clear();
  std::string out = head + "\n      " + info.description;
  if (!def.empty()) out += " [default " + def + "]";
  return out + "\n";
}

std::vector<const Command*> subCommands(std::span<const Command> table, const Command& group) {
  std::vector<const Command*> subs;
  const std::string prefix = std::string(group.name) + " ";
  for (const Command& c : table)
    if (!c.hidden && c.name.size() > prefix.size() && c.name.substr(0, prefix.size()) == prefix) subs.push_back(&c);
  return subs;
}

}  // namespace

std::string overviewHelp(std::span<const Command> table) {
  std::string out = "usage: chaosbed COMMAND [ARGS] [--flags]\n\ncommands:\n";
  char buf[512];
  for (const Command& c : table) {
    if (c.hidden) continue;
    std::snprintf(buf, sizeof buf, "  %-16s %s\n", std::string(c.name).c_str(), std::string(c.summary).c_str());
    out += buf;
  }
  out +=
      "\n`chaosbed help COMMAND` (or `chaosbed COMMAND --help`) shows a command's arguments and flags;\n"
      "`chaosbed --helpfull` lists every flag, logging's included. Exit codes: 0 pass, 1 an assertion failed,\n"
      "2 usage, 3 invalid spec, 4 infrastructure, 130/143 interrupted.\n";
  return out;
}

std::string commandHelp(std::span<const Command> table, const Command& command) {
  std::string out = "usage: chaosbed " + std::string(command.name);
  if (!command.usage.empty()) out += " " + std::string(command.usage);
  out += "\n\n" + std::string(command.summary) + "\n";
  const std::vector<const Command*> subs = subCommands(table, command);
  if (!subs.empty()) {
    out += "\ncommands:\n";
    char buf[512];
    for (const Command* c : subs) {
      std::snprintf(buf, sizeof buf, "  %-16s %s\n", std::string(c->name).c_str(), std::string(c->summary).c_str());
      out += buf;
    }
  }
  const std::vector<std::string> flags = commandFlags(command);
  if (!flags.empty()) {
    out += "\nflags:\n";
    for (const std::string& f : flags) out += flagLine(f);
  }
  if (!command.examples.empty()) {
    out += "\nexamples:\n";
    for (const std::string& line : splitLines(command.examples)) out += "  " + line + "\n";
  }
  return out;
}

std::string bashCompletion(std::span<const Command> table) {
  // The completion keys on the words typed so far: "bench train" before "bench".
  std::ostringstream o;
  o << "# bash completion for chaosbed (generated by `chaosbed completion bash`)\n"
       "_chaosbed() {\n"
       "  local cur=${COMP_WORDS[COMP_CWORD]} words=\"\" i w\n"
       "  for ((i = 1; i < COMP_CWORD; i++)); do w=${COMP_WORDS[i]}; [[ $w == -* ]] || words+=\"${words:+ }$w\"; done\n"
       "  case \"$words\" in\n";
  std::string top;
  for (const Command& c : table) {
    if (c.hidden) continue;
    if (c.name.find(' ') == std::string_view::npos) top.append(c.name).append(" ");
  }
  // Longest names first, so that "bench train ..." matches before "bench ...".
  std::vector<const Command*> ordered;
  for (const Command& c : table)
    if (!c.hidden) ordered.push_back(&c);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const Command* a, const Command* b) { return a->name.size() > b->name.size(); });
  for (const Command* c : ordered) {
    std::string flags;
    for (const std::string& f : commandFlags(*c)) flags.append("--").append(f).append(" ");
    std::string subs;
    for (const Command* s : subCommands(table, *c)) subs.append(s->name.substr(c->name.size() + 1)).append(" ");
    o << "    \"" << c->name << "\"|\"" << c->name << " \"*)\n"
      << "      if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"" << flags << "--help\" -- \"$cur\"))\n";
    if (!subs.empty())
      o << "      elif [[ $words == \"" << c->name << "\" ]]; then COMPREPLY=($(compgen -W \"" << subs << "\" -- \"$cur\"))\n";
    o << "      else COMPREPLY=($(compgen -f -- \"$cur\")); fi ;;\n";
  }
  o << "    *) COMPREPLY=($(compgen -W \"" << top << "\" -- \"$cur\")) ;;\n"
       "  esac\n"
       "}\n"
       "complete -o filenames -F _chaosbed chaosbed\n";
  return o.str();
}

std::string manPage(std::span<const Command> table) {
  auto roff = [](std::string s) {
    std::string out;
    for (char ch : s) {
      if (ch == '\\') out += "\\e";
      else if (ch == '-') out += "\\-";
      else out += ch;
    }
    // A line that starts with a dot or a quote would be a roff request.
    if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out = "\\&" + out;
    return out;
  };
  const run::BuildInfo build = run::buildInfo();
  std::ostringstream o;
  o << ".TH CHAOSBED 1 \"" << build.date << "\" \"chaosbed " << build.version << "\" \"User Commands\"\n";
  o << ".SH NAME\nchaosbed \\- fault\\-injection testbed for distributed training\n"
       ".SH SYNOPSIS\n.B chaosbed\n.I COMMAND\n[ARGS] [\\-\\-flags]\n.SH DESCRIPTION\n"
       "chaosbed trains a model with several distribution strategies, each node its own process, while a chaos "
       "controller kills, preempts, pauses and throttles nodes and links on a seeded schedule, and reports "
       "time\\-to\\-accuracy, idle time, goodput and recovery time.\n.SH COMMANDS\n";
  for (const Command& c : table) {
    if (c.hidden) continue;
    o << ".TP\n.B chaosbed " << roff(std::string(c.name)) << (c.usage.empty() ? "" : " ") << roff(std::string(c.usage))
      << "\n" << roff(std::string(c.summary)) << "\n";
    for (const std::string& f : commandFlags(c)) {
      gflags::CommandLineFlagInfo info;
      if (!gflags::GetCommandLineFlagInfo(f.c_str(), &info)) continue;
      o << ".RS\n.TP\n.B \\-\\-" << roff(f) << "\n" << roff(info.description) << "\n.RE\n";
    }
  }
  o << ".SH EXIT STATUS\n0 pass, 1 an assertion failed, 2 usage error (a flag, a command, or a file that is not "
       "there), 3 invalid spec, 4 infrastructure error, 130 or 143 interrupted.\n"
       ".SH ENVIRONMENT\n"
       ".TP\n.B UCX_TLS\nthe UCX transports the nodes may use; shared\\-memory ones are taken out where nodes "
       "talk over the (emulated) network, and a list of only those is refused.\n"
       ".TP\n.B UCX_NET_DEVICES\nthe network devices for UCX; a spec's own device choice takes precedence, with a "
       "warning.\n"
       ".TP\n.B UCX_RNDV_THRESH\nwhen set, replaces the rendezvous threshold chaosbed would choose.\n"
       ".TP\n.B XDG_RUNTIME_DIR\nwhere a run that is not root keeps its chaos state and announces its metrics "
       "endpoint (chaosbed/ and chaosbed\\-targets/ under it).\n"
       ".SH FILES\n"
       ".TP\n.I results/<experiment>/<run>/\na run's results directory (under the spec's output.dir): summary.json, "
       "timeseries.csv, events.jsonl, report.html and each node's log.\n"
       ".TP\n.I /run/chaosbed/\nthe chaos controller's state as root: what is applied, for a heal after a crash "
       "(\\fBchaosbed chaos heal\\fR).\n"
       ".TP\n.I /run/chaosbed\\-targets/\nPrometheus file_sd announcements of running experiments, as root.\n"
       ".TP\n.I /sys/fs/cgroup/chaosbed/\nthe nodes' cgroups (CPU quotas, freezing), removed when a run ends.\n"
       ".SH EXAMPLES\n"
       "Run the default scenario and read its verdict:\n.PP\n.RS\n"
       "chaosbed run experiments/scenarios/default.yaml\n.RE\n.PP\n"
       "Check a spec without running it, with one field changed:\n.PP\n.RS\n"
       "chaosbed validate my.yaml \\-\\-set cluster.workers=8\n.RE\n.PP\n"
       "A sweep with seeds added until each ratio is within 10% or decided:\n.PP\n.RS\n"
       "chaosbed sweep experiments/scenarios/sweep\\-preemption.yaml \\-\\-seeds auto \\-\\-out /tmp/sweep\n.RE\n.PP\n"
       "The nightly suite with a JUnit file:\n.PP\n.RS\n"
       "chaosbed suite experiments/suites/nightly.yaml \\-\\-junit nightly.xml\n.RE\n"
       ".SH SEE ALSO\nThe repository's README.md and docs/design.md.\n";
  return o.str();
}

}  // namespace chaosbed::cli
