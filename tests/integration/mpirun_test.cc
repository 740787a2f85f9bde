// chaosbed under Open MPI's launcher (Debian's openmpi-bin): `mpirun -np 2 chaosbed agent` starts one host
// agent per rank, the controller's run waits for them to join, and the experiment runs on their hosts. A
// worker killed by chaos is a child of an agent, not a rank, so Open MPI (which ends a job when one rank dies)
// never sees it: the job and the run go on. Skipped, with the reason, where mpirun is not installed.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "chaosbed/config.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(Mpirun, AgentsStartedByMpirunRunAnExperimentThroughAKill) {
  const std::string mpirun = "/usr/bin/mpirun";
  if (!fs::exists(mpirun)) GTEST_SKIP() << "no " << mpirun << " (apt-get install openmpi-bin)";
  const std::string dir = testing::makeTempDir("mpirun");
  // The tiny scenario on two joining hosts, its pause replaced by a kill (both at once would be a full outage).
  std::string spec = testing::readFile(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
  spec = std::regex_replace(spec, std::regex("hosts: local"), "hosts: {agents: 2, listen: 127.0.0.1}");
  spec = std::regex_replace(spec, std::regex("    - name: pause-worker-0\n      action: pause\n"),
                            "    - name: kill-worker-1\n      action: kill\n      restart_after: {fixed_s: 0.5}\n");
  spec = std::regex_replace(spec, std::regex("target: \\{role: worker, index: 0\\}"), "target: {role: worker, index: 1}");
  spec = std::regex_replace(spec, std::regex("      duration_s: 2\n"), "");
  ASSERT_NE(spec.find("kill-worker-1"), std::string::npos) << spec;
  std::ofstream(dir + "/spec.yaml") << spec;
  const std::string out = dir + "/out";
  // Ranks as root need Open MPI's consent; two ranks on a two-core machine need --oversubscribe only where
  // it has fewer slots.
  testing::Command agents({mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", testing::chaosbedBinary(),
                           "agent", "--agent_config=" + out + "/agents.json"});
  testing::Command run({testing::chaosbedBinary(), "run", dir + "/spec.yaml", "--out=" + out, "--metrics_addr=off"});
  auto code = run.wait(deadlineIn(180s));
  ASSERT_TRUE(code.has_value()) << run.output();
  ASSERT_EQ(*code, 0) << run.output() << "\nmpirun:\n" << agents.output();
  auto mpi_code = agents.wait(deadlineIn(30s));
  ASSERT_TRUE(mpi_code.has_value()) << "mpirun outlived the run:\n" << agents.output();
  EXPECT_EQ(*mpi_code, 0) << "the agents were told to quit; mpirun says:\n" << agents.output();

  const auto summary = nlohmann::json::parse(testing::readFile(out + "/summary.json"));
  ASSERT_TRUE(summary["hosts"].is_array()) << summary.dump(2);
  std::set<std::string> launched;
  for (const auto& h : summary["hosts"]) launched.insert(h["launched_by"].get<std::string>());
  EXPECT_EQ(launched, (std::set<std::string>{"mpirun rank 0 of 2", "mpirun rank 1 of 2"})) << summary["hosts"].dump();
  for (const char* strategy : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(strategy);
    const auto& s = summary["strategies"][strategy];
    EXPECT_TRUE(s.value("reached_target", false)) << s.dump();
    EXPECT_EQ(s["failures"].get<int>(), 1) << "the kill, and nothing else";
  }
  // The kill and the pause were carried out by the agents.
  std::set<std::string> via;
  std::ifstream events(out + "/events.jsonl");
  for (std::string line; std::getline(events, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e.value("type", "") == "chaos.applied") via.insert(e["params"]["via"].get<std::string>());
  }
  EXPECT_EQ(via, std::set<std::string>{"host-agent"});
  EXPECT_TRUE(testing::processesMentioning(out + "/").empty()) << "a process of the run is left";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed
