// chaosbed's host agents under the process launchers users already run: Open MPI's `mpirun -np 2 chaosbed
// agent` (Debian's openmpi-bin) starts one agent per rank, each takes the host of its rank, the controller's run waits for them, and the experiment runs on
// their hosts. A worker killed by chaos is a child of an agent, not a rank, so the launcher (which ends a job
// when one rank dies) never sees it: the job and the run go on. Skipped, with the reason, where the launcher
// is not installed. (torchrun is not tested: Debian 12's, from PyTorch 1.13, fails under Python 3.11 before
// it starts any process.)

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "chaosbed/config.h"
#include "tests/testing/command.h"
#include "tests/testing/events_schema.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// The tiny scenario on two joining hosts, its pause replaced by a kill (both at once would be a full outage);
// returns the spec's path.
std::string writeAgentsSpec(const std::string& dir) {
  std::string spec = testing::readFile(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
  spec = std::regex_replace(spec, std::regex("hosts: local"), "hosts: {agents: 2, listen: 127.0.0.1}");
  spec = std::regex_replace(spec, std::regex("    - name: pause-worker-0\n      action: pause\n"),
                            "    - name: kill-worker-1\n      action: kill\n      restart_after: {fixed_s: 0.5}\n");
  spec = std::regex_replace(spec, std::regex("target: \\{role: worker, index: 0\\}"), "target: {role: worker, index: 1}");
  spec = std::regex_replace(spec, std::regex("      duration_s: 2\n"), "");
  EXPECT_NE(spec.find("kill-worker-1"), std::string::npos) << spec;
  std::ofstream(dir + "/spec.yaml") << spec;
  return dir + "/spec.yaml";
}

// Runs the experiment beside `agents` (the launcher's command, already started) and checks the outcome:
// host i's agent is the launcher's rank i, both strategies recover from the kill, the agents carried it out,
// and the launcher ends when the run does.
void runBesideLauncher(testing::Command& agents, const std::string& spec, const std::string& out,
                       const std::string& rank_prefix) {
  testing::Command run({testing::chaosbedBinary(), "run", spec, "--out=" + out, "--metrics_addr=off"});
  auto code = run.wait(deadlineIn(180s));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output() << "\nlauncher:\n" << agents.output();
  auto launcher_code = agents.wait(deadlineIn(30s));
  ASSERT_TRUE(launcher_code.has_value()) << "the launcher outlived the run:\n" << agents.output();
  EXPECT_EQ(*launcher_code, 0) << "the agents were told to quit; the launcher says:\n" << agents.output();

  const auto summary = nlohmann::json::parse(testing::readFile(out + "/summary.json"));
  ASSERT_TRUE(summary["hosts"].is_array()) << summary.dump(2);
  ASSERT_EQ(summary["hosts"].size(), 2u) << summary["hosts"].dump();
  for (int h = 0; h < 2; ++h)
    EXPECT_EQ(summary["hosts"][h]["launched_by"], rank_prefix + std::to_string(h) + " of 2")
        << "host " << h << " is not the launcher's rank " << h << ": " << summary["hosts"].dump();
  for (const char* strategy : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(strategy);
    const auto& s = summary["strategies"][strategy];
    EXPECT_TRUE(s.value("reached_target", false)) << s.dump();
    EXPECT_EQ(s["failures"].get<int>(), 1) << "the kill, and nothing else";
  }
  std::set<std::string> via;
  EXPECT_TRUE(testing::EventsMatchSchema(out + "/events.jsonl"));
  std::ifstream events(out + "/events.jsonl");
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("type", "") == "chaos.applied") via.insert(e["params"]["via"].get<std::string>());
  }
  EXPECT_EQ(via, std::set<std::string>{"host-agent"}) << "the kill was not the agents'";
  EXPECT_TRUE(testing::processesMentioning(out + "/").empty()) << "a process of the run is left";
}

TEST(Mpirun, AgentsStartedByMpirunRunAnExperimentThroughAKill) {
  const std::string mpirun = "/usr/bin/mpirun";
  if (!fs::exists(mpirun)) GTEST_SKIP() << "no " << mpirun << " (apt-get install openmpi-bin)";
  const std::string dir = testing::makeTempDir("mpirun");
  const std::string spec = writeAgentsSpec(dir);
  const std::string out = dir + "/out";
  // Ranks as root need Open MPI's consent; two ranks on a machine with fewer slots, --oversubscribe.
  testing::Command agents({mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", testing::chaosbedBinary(),
                           "agent", "--agent_config=" + out + "/agents.json"});
  runBesideLauncher(agents, spec, out, "mpirun rank ");
  if (!::testing::Test::HasFailure()) fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed
