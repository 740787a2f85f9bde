// The CLI contract: help per command, exit 2 for a flag that is unknown or does not apply, --set, and the
// bash completion, checked against the real command table (experiments/cli/commands.cc).

#include <gflags/gflags.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "chaosbed/config.h"
#include "experiments/cli/cli.h"
#include "experiments/run/provenance.h"
#include "tests/testing/command.h"

namespace chaosbed::cli {
namespace {

using namespace std::chrono_literals;

Result<CommandLine> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "chaosbed");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return parseCommandLine(commands(), int(argv.size()), argv.data());
}

struct Ran {
  int code = -1;
  std::string output;
};

Ran runBinary(std::vector<std::string> args) {
  args.insert(args.begin(), testing::chaosbedBinary());
  testing::Command c(args);
  auto code = c.wait(deadlineIn(30s));
  return {code.value_or(-1), c.output()};
}

// --version names the commit the binary was built from, as every summary's provenance does: the finding
// scripts refuse a binary that was not built from the commit they regenerate from.
TEST(CommandLine, VersionNamesTheBuildsCommitAndWhetherItsTreeWasDirty) {
  const Ran r = runBinary({"--version"});
  EXPECT_EQ(r.code, 0) << r.output;
  const run::BuildInfo b = run::buildInfo();
  EXPECT_NE(r.output.find(std::string("(commit ") + b.commit + (b.dirty ? ", dirty tree)" : ")")), std::string::npos)
      << r.output;
}

TEST(CommandLine, FlagsAnywhereInEveryFormGiveTheCommandAndItsArguments) {
  auto line = parse({"--out", "dir", "run", "spec.yaml", "--metrics_allow_remote", "--set=cluster.workers=2",
                     "--nometrics_await_scrape", "--", "--odd-name.yaml"});
  ASSERT_TRUE(line.isOk()) << line.status().toString();
  ASSERT_NE(line->command, nullptr);
  EXPECT_EQ(line->command->name, "run");
  EXPECT_EQ(line->args, (std::vector<std::string>{"spec.yaml", "--odd-name.yaml"}));
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"out", "dir"}, {"metrics_allow_remote", "true"}, {"set", "cluster.workers=2"}, {"metrics_await_scrape", "false"}};
  EXPECT_EQ(line->flags, expected);
}

TEST(CommandLine, TwoWordCommandsAreFoundByTheirWords) {
  auto line = parse({"bench", "allreduce", "--ranks=8"});
  ASSERT_TRUE(line.isOk()) << line.status().toString();
  EXPECT_EQ(line->command->name, "bench allreduce");
  EXPECT_TRUE(line->args.empty());
  auto group = parse({"chaos"});
  ASSERT_TRUE(group.isOk());
  EXPECT_EQ(group->command->name, "chaos");
}

TEST(CommandLine, AMisspelledFlagIsAUsageErrorThatSuggestsTheFlag) {
  auto line = parse({"suite", "nightly.yaml", "--junt", "x.xml"});
  ASSERT_FALSE(line.isOk());
  EXPECT_NE(line.status().message().find("unknown flag --junt"), std::string::npos) << line.status().message();
  EXPECT_NE(line.status().message().find("did you mean --junit?"), std::string::npos) << line.status().message();
}

TEST(CommandLine, AMisspelledCommandSuggestsTheCommand) {
  auto line = parse({"rn", "spec.yaml"});
  ASSERT_FALSE(line.isOk());
  EXPECT_NE(line.status().message().find("unknown command 'rn' (did you mean 'run'?)"), std::string::npos)
      << line.status().message();
  auto sub = parse({"help", "bench", "allredcue"});
  ASSERT_FALSE(sub.isOk());
  EXPECT_NE(sub.status().message().find("did you mean 'bench allreduce'?"), std::string::npos) << sub.status().message();
  // Nothing near: no guess.
  auto far = parse({"xyzzyplugh"});
  ASSERT_FALSE(far.isOk());
  EXPECT_EQ(far.status().message().find("did you mean"), std::string::npos) << far.status().message();
  EXPECT_NE(far.status().message().find("`chaosbed help` lists the commands"), std::string::npos);
}

TEST(CommandLine, AFlagOfAnotherCommandDoesNotApply) {
  auto line = parse({"run", "spec.yaml", "--seed", "3"});
  ASSERT_FALSE(line.isOk());
  EXPECT_NE(line.status().message().find("--seed does not apply"), std::string::npos) << line.status().message();
  EXPECT_NE(line.status().message().find("chaos plan"), std::string::npos) << line.status().message();
}

TEST(CommandLine, LoggingFlagsAreAcceptedByEveryCommand) {
  for (const char* command : {"run", "validate", "bench train", "chaos plan"}) {
    std::vector<std::string> args;
    std::string words = command;
    for (size_t at = 0, sp; at < words.size(); at = sp + 1) {
      sp = words.find(' ', at);
      if (sp == std::string::npos) sp = words.size();
      args.push_back(words.substr(at, sp - at));
    }
    args.push_back("--v=1");
    args.push_back("--logtostderr");
    auto line = parse(args);
    EXPECT_TRUE(line.isOk()) << command << ": " << line.status().message();
  }
}

TEST(CommandLine, HelpFormsAllAskForTheCommandsHelp) {
  for (std::vector<std::string> args : {std::vector<std::string>{"help", "sweep"}, {"sweep", "--help"}, {"sweep", "-h"},
                                        {"sweep", "--helpshort"}}) {
    auto line = parse(args);
    ASSERT_TRUE(line.isOk()) << line.status().message();
    EXPECT_EQ(line->want, CommandLine::Want::kHelp);
    ASSERT_NE(line->command, nullptr);
    EXPECT_EQ(line->command->name, "sweep");
  }
  EXPECT_FALSE(parse({"help", "bench", "trian"}).isOk());
  EXPECT_FALSE(parse({"help", "nosuchcommand"}).isOk());
}

TEST(CommandLine, AValueThatDoesNotParseIsRefusedBeforeAnythingRuns) {
  gflags::FlagSaver saver;  // applyFlags sets process-wide flags: later tests in this binary must not see them
  auto line = parse({"noise", "spec.yaml", "--runs=abc"});
  ASSERT_TRUE(line.isOk()) << line.status().message();
  Status s = applyFlags(*line);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.message().find("--runs=abc"), std::string::npos) << s.message();
  EXPECT_FALSE(parse({"run", "spec.yaml", "--out"}).isOk()) << "a flag without its value";
}

TEST(CommandLine, SetIsRepeatableAndKeepsItsOrder) {
  gflags::FlagSaver saver;  // applyFlags sets process-wide flags: later tests in this binary must not see them
  auto line = parse({"validate", "a.yaml", "--set", "cluster.workers=2", "--set=training.learning_rate=0.5"});
  ASSERT_TRUE(line.isOk()) << line.status().message();
  ASSERT_TRUE(applyFlags(*line).isOk());
  EXPECT_EQ(repeatedFlag("set"), (std::vector<std::string>{"cluster.workers=2", "training.learning_rate=0.5"}));
  // The collected values outlive FlagSaver; a command line without --set clears them for the next test.
  ASSERT_TRUE(applyFlags(*parse({"validate", "a.yaml"})).isOk());
  EXPECT_TRUE(repeatedFlag("set").empty());
}

// A flag defined next to a command's code but missing from every command's list would be accepted by every
// command: the table would have forgotten it.
TEST(CommandLine, EveryChaosbedFlagBelongsToACommand) {
  std::vector<std::string> listed;
  for (const Command& c : commands())
    for (std::string& f : commandFlags(c)) listed.push_back(std::move(f));
  std::vector<gflags::CommandLineFlagInfo> all;
  gflags::GetAllFlags(&all);
  int ours = 0;
  for (const auto& info : all) {
    if (info.filename.find("experiments/cli/") == std::string::npos) continue;
    ++ours;
    EXPECT_NE(std::find(listed.begin(), listed.end(), info.name), listed.end())
        << "--" << info.name << " (" << info.filename << ") is in no command's flag list";
  }
  EXPECT_GT(ours, 10) << "the chaosbed flags were not found in the registry";
  for (const std::string& f : listed) {
    gflags::CommandLineFlagInfo info;
    EXPECT_TRUE(gflags::GetCommandLineFlagInfo(f.c_str(), &info)) << "--" << f << " is listed but not defined";
  }
}

TEST(CommandLine, HelpExitsZeroAndShowsOnlyTheCommandsOwnFlags) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--help"}, {"run", "--help"}, {"help", "sweep"},
                                        {"run", "-h"}}) {
    Ran r = runBinary(args);
    EXPECT_EQ(r.code, 0) << args[0] << ": " << r.output;
    EXPECT_EQ(r.output.find("logtostderr"), std::string::npos) << "glog's flags belong under --helpfull";
    EXPECT_NE(r.output.find("usage: chaosbed"), std::string::npos) << r.output;
  }
  Ran run_help = runBinary({"run", "--help"});
  EXPECT_NE(run_help.output.find("--set"), std::string::npos) << run_help.output;
  EXPECT_EQ(run_help.output.find("--junit"), std::string::npos) << "a suite flag in run's help";
  Ran full = runBinary({"--helpfull"});
  EXPECT_EQ(full.code, 0);
  EXPECT_NE(full.output.find("logtostderr"), std::string::npos);
}

// Every command people run shows examples in its help, and each example is a command line the parser
// accepts for that command (its flags included).
TEST(CommandLine, EveryCommandsHelpHasExamplesThatParse) {
  for (const Command& c : commands()) {
    if (c.hidden || c.run == nullptr || commandHelp(commands(), c).find("\ncommands:\n") != std::string::npos)
      continue;  // nodes, and groups (whose help lists their commands)
    ASSERT_FALSE(c.examples.empty()) << c.name << " has no examples";
    const std::string first(c.examples.substr(0, c.examples.find('\n')));
    EXPECT_NE(commandHelp(commands(), c).find("\nexamples:\n  " + first + "\n"), std::string::npos)
        << commandHelp(commands(), c);
    std::istringstream lines{std::string(c.examples)};
    for (std::string line; std::getline(lines, line);) {
      // The command line itself, without what the shell adds around it.
      std::string cmd = line.substr(line.find("chaosbed "));
      cmd = cmd.substr(0, cmd.find_first_of(")>&|"));
      std::vector<std::string> words;
      std::istringstream in(cmd);
      for (std::string w; in >> w;) words.push_back(w.size() > 1 && w.front() == '"' ? w.substr(1, w.size() - 2) : w);
      words.erase(words.begin());  // "chaosbed"
      auto parsed = parse(words);
      ASSERT_TRUE(parsed.isOk()) << line << ": " << parsed.status().message();
      if (c.name != "help") {  // help's examples name other commands
        EXPECT_EQ(parsed->command->name, c.name) << line;
      }
    }
  }
}

TEST(CommandLine, UsageErrorsExitTwo) {
  EXPECT_EQ(runBinary({"run", "--bogus", "x.yaml"}).code, 2);
  EXPECT_EQ(runBinary({"suite", "x.yaml", "--junt", "x.xml"}).code, 2);
  EXPECT_EQ(runBinary({"run", "x.yaml", "--seed=3"}).code, 2);
  EXPECT_EQ(runBinary({"nosuchcommand"}).code, 2);
  EXPECT_EQ(runBinary({"bench"}).code, 2);
  // A spec that is not there is a usage error, not an invalid spec (3), and the message names it.
  const std::string missing = ::testing::TempDir() + "/no-such-spec.yaml";
  for (const char* command : {"validate", "run", "sweep", "tune", "noise", "suite"}) {
    Ran r = runBinary({command, missing});
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find(missing + ": No such file or directory"), std::string::npos) << command << ": " << r.output;
  }
  Ran plan = runBinary({"chaos", "plan", missing});
  EXPECT_EQ(plan.code, 2) << plan.output;
  // Not a results directory: said in plain words, without the status code's name.
  const std::string empty = testing::makeTempDir("report");
  ASSERT_FALSE(empty.empty());
  Ran report = runBinary({"report", empty});
  EXPECT_EQ(report.code, 2) << report.output;
  EXPECT_NE(report.output.find("summary.json"), std::string::npos) << report.output;
  EXPECT_EQ(report.output.find("NotFound"), std::string::npos) << report.output;
}

TEST(CommandLine, SetIsCheckedAsTheSpecIs) {
  const std::string spec = std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml";
  Ran ok = runBinary({"validate", spec, "--set", "cluster.workers=3"});
  EXPECT_EQ(ok.code, 0) << ok.output;
  Ran bad = runBinary({"validate", spec, "--set", "cluster.workers=0"});
  EXPECT_EQ(bad.code, 3) << bad.output;
  EXPECT_NE(bad.output.find("cluster.workers"), std::string::npos) << bad.output;
  Ran unknown = runBinary({"validate", spec, "--set", "cluster.wrokers=3"});
  EXPECT_EQ(unknown.code, 3) << unknown.output;
}

// The generated script is valid bash and completes commands, sub-commands and a command's flags.
TEST(CommandLine, BashCompletionCompletesCommandsAndFlags) {
  const std::string dir = testing::makeTempDir("completion");
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/chaosbed.bash") << bashCompletion(commands());
  auto complete = [&](const std::string& words) {
    const std::string script = dir + "/t.sh";
    std::ofstream(script) << "source " << dir << "/chaosbed.bash\n"
                          << "COMP_WORDS=(" << words << "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
                          << "_chaosbed; echo \"${COMPREPLY[*]}\"\n";
    testing::Command c({"/bin/bash", script});
    c.wait(deadlineIn(10s));
    return c.output();
  };
  EXPECT_NE(complete("chaosbed ru").find("run"), std::string::npos);
  const std::string bench = complete("chaosbed bench al");
  EXPECT_NE(bench.find("allreduce"), std::string::npos) << bench;
  const std::string flags = complete("chaosbed suite x.yaml --ju");
  EXPECT_NE(flags.find("--junit"), std::string::npos) << flags;
  const std::string run_flags = complete("chaosbed run x.yaml --");
  EXPECT_NE(run_flags.find("--set"), std::string::npos) << run_flags;
  EXPECT_EQ(run_flags.find("--junit"), std::string::npos) << run_flags;
}

// The man page is well-formed roff: groff renders it without a warning.
TEST(CommandLine, ManPageRendersWithoutWarnings) {
  if (access("/usr/bin/groff", X_OK) != 0) GTEST_SKIP() << "groff is not installed (apt-get install groff-base)";
  const std::string dir = testing::makeTempDir("man");
  ASSERT_FALSE(dir.empty());
  std::ofstream(dir + "/chaosbed.1") << manPage(commands());
  testing::Command groff({"/usr/bin/groff", "-man", "-Tutf8", "-ww", "-z", dir + "/chaosbed.1"});
  auto code = groff.wait(deadlineIn(10s));
  EXPECT_EQ(code.value_or(-1), 0) << groff.output();
  EXPECT_EQ(groff.output(), "") << "groff warned";
  const std::string page = manPage(commands());
  // The title line carries the date and version; the sections a man page is expected to have are there.
  EXPECT_EQ(page.rfind(".TH CHAOSBED 1 \"", 0), 0u) << page.substr(0, 80);
  EXPECT_NE(page.substr(0, page.find('\n')).find(std::string("\"chaosbed ") + CHAOSBED_VERSION + "\""), std::string::npos)
      << page.substr(0, page.find('\n'));
  for (const char* section : {".SH SYNOPSIS", ".SH EXIT STATUS", ".SH ENVIRONMENT", ".SH FILES", ".SH EXAMPLES"})
    EXPECT_NE(page.find(section), std::string::npos) << section;
  for (const Command& c : commands())
    if (!c.hidden) {
      EXPECT_NE(page.find(std::string(c.name)), std::string::npos) << c.name;
    }
}

TEST(CommandLine, EditDistanceCountsSingleEdits) {
  EXPECT_EQ(editDistance("junit", "junit"), 0);
  EXPECT_EQ(editDistance("junt", "junit"), 1);
  EXPECT_EQ(editDistance("seed", "sede"), 2);
  EXPECT_EQ(editDistance("", "out"), 3);
}

}  // namespace
}  // namespace chaosbed::cli
