#pragma once
// The command line of the `chaosbed` binary: a table of commands, each with the flags it accepts, and a
// parser that checks every flag against the command before anything runs. gflags keeps the flag registry
// (DEFINE_* next to the code that reads them); this layer decides which command may use which flag, so that
// a misspelled or inapplicable flag is a usage error (exit 2) with a "did you mean", never silently ignored.

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::cli {

struct Command {
  std::string_view name;     // "run", or "bench train": the words that select it
  std::string_view usage;    // "SPEC [--out DIR]": what follows the name
  std::string_view summary;  // one line
  std::string_view flags;    // the chaosbed flags it accepts, comma-separated ("out,set,metrics_addr")
  // Runs the command: argv[0] is the last word of `name`, then the positional arguments.
  int (*run)(int argc, char** argv) = nullptr;
  bool hidden = false;  // started by chaosbed itself (nodes, the chaos agent), not by people
  std::string_view examples = {};  // command lines that work from the repository's root, one per line
};

// What a command line asks for.
struct CommandLine {
  enum class Want { kRun, kHelp, kHelpFull, kVersion };
  Want want = Want::kRun;
  const Command* command = nullptr;                          // null: no command given (or `help` alone)
  std::vector<std::string> args;                             // positional arguments after the command's words
  std::vector<std::pair<std::string, std::string>> flags;    // name and value, in order; bools as "true"/"false"
};

// Parses argv (argv[0] is the program) against `table` and gflags' registry, setting nothing. Flags may
// appear anywhere, as --name=value, --name value, -name, --noname (bools); `--` ends them. An unknown
// command, an unknown flag, a chaosbed flag that the command does not take, or a flag without its value is
// InvalidArgument with a message that says so (and the closest flag the command takes). gflags' and glog's own
// flags (--v, --logtostderr, ...) are accepted by every command; -h, --help and --helpshort ask for the
// command's help, --helpfull for every flag, --version for the version.
Result<CommandLine> parseCommandLine(std::span<const Command> table, int argc, char** argv);

// Sets the parsed flags in gflags. A value that does not parse ("--runs=abc") is InvalidArgument.
// Repeatable flags (--set) are collected: repeatedFlag("set") gives every value, in order.
Status applyFlags(const CommandLine& line);
const std::vector<std::string>& repeatedFlag(std::string_view name);

// Help texts, generated from the table and the flags' own descriptions.
std::string overviewHelp(std::span<const Command> table);
std::string commandHelp(std::span<const Command> table, const Command& command);
std::string bashCompletion(std::span<const Command> table);
std::string manPage(std::span<const Command> table);

// The chaosbed flags that `command` accepts (its `flags` list, split).
std::vector<std::string> commandFlags(const Command& command);

// The edit distance between two flag names, for "did you mean".
int editDistance(std::string_view a, std::string_view b);

// "chaosbed: unknown command 'GROUP WORD'; did you mean 'GROUP NEAR'? ..." for a word that names no command
// (group "" for the first word, else the words before it).
std::string unknownCommandMessage(std::span<const Command> table, const std::string& group, const std::string& word);

}  // namespace chaosbed::cli
