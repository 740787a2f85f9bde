// chaosbed on a real Slurm cluster: one started for the test on this machine from Debian's packages
// (deploy/slurm/local-cluster.sh: munged, slurmctld and slurmd, every file in a temporary directory). An
// experiment runs as a batch job through srun (deploy/slurm/chaosbed.sbatch), and a two-point sweep runs as
// a job array (`chaosbed sweep --executor slurm`): interrupted (the job is cancelled), run again to the end,
// and run a third time, which submits nothing. Skipped, with the reason, where Slurm cannot run here (not
// installed, not root); a cluster that is installed but fails to start is a failure.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <csignal>

#include <nlohmann/json.hpp>

#include "chaosbed/config.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using testing::readFile;

const std::string kClusterScript = std::string(CHAOSBED_SOURCE_DIR) + "/deploy/slurm/local-cluster.sh";

// One local Slurm cluster for all the tests of this file.
class Slurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::makeTempDir("slurm"));
    testing::Command start({kClusterScript, "start", *dir_ + "/cluster"});
    auto code = start.wait(deadlineIn(60s));
    // Exit 4: Slurm cannot run here (not installed, not root): skip. Any other failure is a failure.
    if (code && *code == 4) {
      *skip_ = "no local Slurm cluster: " + start.output();
      return;
    }
    if (!code || *code != 0) {
      *start_error_ = "deploy/slurm/local-cluster.sh start failed (" +
                      (code ? "exit " + std::to_string(*code) : std::string("no exit in 60 s")) + "): " + start.output();
      return;
    }
    ::setenv("SLURM_CONF", (*dir_ + "/cluster/slurm.conf").c_str(), 1);
  }
  static void TearDownTestSuite() {
    testing::Command stop({kClusterScript, "stop", *dir_ + "/cluster"});
    (void)stop.wait(deadlineIn(30s));
    ::unsetenv("SLURM_CONF");
    if (!::testing::Test::HasFailure()) fs::remove_all(*dir_);
  }
  void SetUp() override {
    if (!skip_->empty()) GTEST_SKIP() << *skip_;
    ASSERT_TRUE(start_error_->empty()) << *start_error_;
  }

  // The tiny scenario (seconds per run) with its results under `out`.
  static std::string writeSpec(const std::string& name, const std::string& extra) {
    std::string spec = readFile(std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml");
    const std::string path = *dir_ + "/" + name + ".yaml";
    std::ofstream(path) << spec << extra;
    return path;
  }

  static nlohmann::json summary(const std::string& dir) { return nlohmann::json::parse(readFile(dir + "/summary.json")); }

  static inline std::string* dir_ = nullptr;
  static inline const std::string sbatch_ = "/usr/bin/sbatch";  // Debian's slurm-client
  static inline std::string* skip_ = new std::string;
  static inline std::string* start_error_ = new std::string;
};

TEST_F(Slurm, ExperimentRunsAsABatchJobThroughSrun) {
  const std::string spec = writeSpec("run", "");
  const std::string out = *dir_ + "/run-out";
  ::setenv("CHAOSBED", testing::chaosbedBinary().c_str(), 1);
  testing::Command job({sbatch_, "--wait", "--output=" + *dir_ + "/run-job.log",
                        std::string(CHAOSBED_SOURCE_DIR) + "/deploy/slurm/chaosbed.sbatch", spec, out,
                        "--metrics_addr=127.0.0.1:0"});
  auto code = job.wait(deadlineIn(240s));
  ::unsetenv("CHAOSBED");
  ASSERT_TRUE(code.has_value()) << "the batch job did not finish in 240 s:\n" << job.output();
  ASSERT_EQ(*code, 0) << job.output() << "\njob log:\n" << readFile(*dir_ + "/run-job.log");
  const nlohmann::json s = summary(out);
  EXPECT_TRUE(s.value("complete", false)) << s.dump(2);
  for (const char* strategy : {"mirrored", "parameter_server"})
    EXPECT_TRUE(s["strategies"][strategy].value("reached_target", false)) << strategy << ": " << s.dump(2);
  // It ran inside the job, not beside it.
  ASSERT_TRUE(s["provenance"]["slurm_job"].is_string()) << s["provenance"].dump(2);
  EXPECT_TRUE(std::regex_match(s["provenance"]["slurm_job"].get<std::string>(), std::regex("[0-9]+")))
      << s["provenance"].dump(2);
}

// More than one task: one host agent per task (srun), the controller in the batch script, the experiment on
// the agents' hosts (here two tasks of the one node, as two hosts).
TEST_F(Slurm, ExperimentSpansTheAgentsThatSrunStartsOnePerTask) {
  const std::string spec = writeSpec("agents", "");
  const std::string out = *dir_ + "/agents-out";
  ::setenv("CHAOSBED", testing::chaosbedBinary().c_str(), 1);
  ::setenv("CHAOSBED_LISTEN", "127.0.0.1", 1);  // the one node's agents reach the controller on loopback
  testing::Command job({sbatch_, "--wait", "--ntasks=2", "--output=" + *dir_ + "/agents-job.log",
                        std::string(CHAOSBED_SOURCE_DIR) + "/deploy/slurm/chaosbed.sbatch", spec, out,
                        "--metrics_addr=127.0.0.1:0"});
  auto code = job.wait(deadlineIn(240s));
  ::unsetenv("CHAOSBED");
  ::unsetenv("CHAOSBED_LISTEN");
  ASSERT_TRUE(code.has_value()) << "the batch job did not finish in 240 s:\n" << job.output();
  ASSERT_EQ(*code, 0) << job.output() << "\njob log:\n" << readFile(*dir_ + "/agents-job.log");
  const nlohmann::json s = summary(out);
  EXPECT_TRUE(s.value("complete", false)) << s.dump(2);
  for (const char* strategy : {"mirrored", "parameter_server"})
    EXPECT_TRUE(s["strategies"][strategy].value("reached_target", false)) << strategy << ": " << s.dump(2);
  ASSERT_TRUE(s["hosts"].is_array()) << s.dump(2);
  ASSERT_EQ(s["hosts"].size(), 2u) << s["hosts"].dump(2);
  // Each agent is a task of one step of this job.
  const std::string job_id = s["provenance"]["slurm_job"].get<std::string>();
  std::set<std::string> tasks;
  for (const auto& h : s["hosts"]) {
    std::smatch m;
    const std::string by = h["launched_by"].get<std::string>();
    ASSERT_TRUE(std::regex_match(by, m, std::regex("slurm job ([0-9]+) step [0-9]+ task ([0-9]+)"))) << by;
    EXPECT_EQ(m[1], job_id) << by;
    EXPECT_EQ(m[2], std::to_string(h["host"].get<int>())) << "host i is the step's task i: " << by;
    tasks.insert(m[2]);
  }
  EXPECT_EQ(tasks, (std::set<std::string>{"0", "1"}));
  EXPECT_TRUE(testing::processesMentioning(out + "/").empty()) << "a process of the job is left";
}

TEST_F(Slurm, SweepRunsPointsAsJobArrayTasksSurvivesAnInterruptAndResumes) {
  const std::string spec = writeSpec("sweep", "\nsweep:\n  grid:\n    chaos.faults[0].duration_s: [1]\n  seeds: [7]\n");
  const std::string out = *dir_ + "/sweep-out";
  const std::vector<std::string> argv = {testing::chaosbedBinary(), "sweep", spec, "--out=" + out, "--executor=slurm",
                                         "--metrics_addr=127.0.0.1:0"};
  // Interrupted once the array is submitted: the job is cancelled, and Slurm runs nothing of it afterwards.
  {
    testing::Command interrupted(argv);
    auto line = interrupted.waitForLine("submitted as Slurm job array", deadlineIn(60s));
    ASSERT_TRUE(line.has_value()) << interrupted.output();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(*line, m, std::regex("job array ([0-9]+)"))) << *line;
    const std::string job = m[1];
    interrupted.signal(SIGINT);
    auto code = interrupted.wait(deadlineIn(60s));
    ASSERT_TRUE(code.has_value()) << interrupted.output();
    EXPECT_EQ(*code, 130) << interrupted.output();
    EXPECT_NE(interrupted.output().find("Slurm job " + job + " cancelled"), std::string::npos) << interrupted.output();
    // Cancelling takes a moment to reach the tasks: wait until Slurm no longer lists the job.
    std::string listed;
    for (const Deadline until = deadlineIn(60s); SteadyClock::now() < until;) {
      testing::Command squeue({"/usr/bin/squeue", "-h", "-j", job, "-o", "%i %T"});
      ASSERT_TRUE(squeue.wait(deadlineIn(30s)).has_value());
      listed = squeue.output();
      if (listed.find(job) == std::string::npos) break;
    }
    EXPECT_EQ(listed.find(job), std::string::npos) << "job " << job << " outlived the interrupt:\n" << listed;
  }

  // Run again: every point that the cancelled job did not finish is submitted anew and completes.
  testing::Command first(argv);
  auto code = first.wait(deadlineIn(400s));
  ASSERT_TRUE(code.has_value()) << "the sweep did not finish in 400 s:\n" << first.output();
  ASSERT_EQ(*code, 0) << first.output();
  EXPECT_NE(first.output().find("0 failed"), std::string::npos) << first.output();
  std::smatch submitted;
  const std::string first_out = first.output();
  ASSERT_TRUE(std::regex_search(first_out, submitted, std::regex("([0-9]+) point\\(s\\) submitted as Slurm job array ([0-9]+)")))
      << first_out;
  const int resubmitted = std::stoi(submitted[1]);
  const std::string rerun_job = submitted[2];
  // Each point ran in a task of an array job (the rerun's, or the cancelled one's if it got that far), and
  // every task of the rerun left its log.
  std::set<std::string> rerun_tasks;
  for (const auto& e : fs::directory_iterator(out + "/points")) {
    const nlohmann::json s = summary(e.path().string());
    EXPECT_TRUE(s.value("complete", false)) << e.path();
    ASSERT_TRUE(s["provenance"]["slurm_job"].is_string()) << e.path() << ": " << s["provenance"].dump(2);
    std::smatch m;
    const std::string job = s["provenance"]["slurm_job"].get<std::string>();
    ASSERT_TRUE(std::regex_match(job, m, std::regex("([0-9]+)_([01])"))) << job;
    if (m[1] == rerun_job) rerun_tasks.insert(m[2]);
  }
  EXPECT_EQ(int(rerun_tasks.size()), resubmitted) << first_out;
  for (const std::string& task : rerun_tasks)
    EXPECT_NE(readFile(out + "/slurm/task-" + task + ".log").find("sweep: point "), std::string::npos) << task;
  EXPECT_FALSE(fs::exists(out + "/slurm/job-id")) << "a finished job is still recorded as running";
  const std::string csv = readFile(out + "/sweep.csv");
  EXPECT_NE(csv.find("summary,baseline,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("summary,chaos.faults[0].duration_s=1,"), std::string::npos) << csv;

  testing::Command second(argv);
  code = second.wait(deadlineIn(60s));
  ASSERT_TRUE(code.has_value()) << second.output();
  EXPECT_EQ(*code, 0) << second.output();
  EXPECT_NE(second.output().find("nothing to submit"), std::string::npos) << second.output();
  EXPECT_NE(second.output().find("2 point(s): 0 run now, 2 already complete, 0 failed"), std::string::npos)
      << second.output();
}

}  // namespace
}  // namespace chaosbed
