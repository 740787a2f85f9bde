// identityFromEnvironment(): each source (chaosbed's own variables, TF_CONFIG, Slurm, Open MPI, Kubernetes),
// their precedence, the rank-to-role convention, and clear errors for bad values.

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>

#include "core/launcher/identity.h"

namespace chaosbed {
namespace {

// Clears every variable identityFromEnvironment() reads, and restores them afterwards.
class IdentityTest : public ::testing::Test {
 protected:
  static constexpr const char* kVars[] = {
      "CHAOSBED_ROLE",   "CHAOSBED_RANK",        "CHAOSBED_WORKERS",   "CHAOSBED_SERVERS",     "CHAOSBED_EVALUATORS",
      "CHAOSBED_INCARNATION", "CHAOSBED_WORLD_SIZE", "TF_CONFIG",      "SLURM_PROCID",         "SLURM_NTASKS",
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "JOB_COMPLETION_INDEX", "RANK", "WORLD_SIZE",
      "TORCHELASTIC_RUN_ID"};

  void SetUp() override {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : kVars) ::unsetenv(v);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  static void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

  std::map<std::string, std::string> saved_;
};

TEST_F(IdentityTest, NothingSetIsNotFound) {
  auto id = identityFromEnvironment();
  EXPECT_EQ(id.status().code(), StatusCode::kNotFound);
  EXPECT_NE(id.status().message().find("CHAOSBED_ROLE"), std::string::npos);
}

TEST_F(IdentityTest, ChaosbedVariables) {
  set("CHAOSBED_ROLE", "ps");
  set("CHAOSBED_RANK", "1");
  set("CHAOSBED_SERVERS", "2");
  set("CHAOSBED_INCARNATION", "3");
  set("SLURM_PROCID", "0");  // lower precedence: ignored
  set("SLURM_NTASKS", "4");
  auto id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->role, "ps");
  EXPECT_EQ(id->index, 1);
  EXPECT_EQ(id->num_servers, 2);
  EXPECT_EQ(id->num_workers, -1);
  EXPECT_EQ(id->incarnation, 3);
  EXPECT_EQ(id->source, "CHAOSBED_ROLE");
  EXPECT_EQ(id->nodeName(), "ps-1");
}

TEST_F(IdentityTest, ChaosbedVariablesErrors) {
  set("CHAOSBED_ROLE", "worker");
  auto half = identityFromEnvironment();
  EXPECT_EQ(half.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(half.status().message().find("CHAOSBED_RANK"), std::string::npos);
  set("CHAOSBED_RANK", "x1");
  auto bad = identityFromEnvironment();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHAOSBED_RANK='x1'"), std::string::npos) << bad.status().message();
  set("CHAOSBED_RANK", "4");
  set("CHAOSBED_WORKERS", "4");
  auto past = identityFromEnvironment();
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("not below"), std::string::npos) << past.status().message();
  set("CHAOSBED_ROLE", "chief");
  set("CHAOSBED_RANK", "0");
  auto role = identityFromEnvironment();
  EXPECT_EQ(role.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(role.status().message().find("CHAOSBED_ROLE='chief'"), std::string::npos);
}

TEST_F(IdentityTest, TfConfigWorkerAndPs) {
  const std::string cluster = R"({"cluster": {"worker": ["h1:1", "h2:1", "h3:1"], "ps": ["h4:2", "h5:2"]},)";
  set("TF_CONFIG", cluster + R"( "task": {"type": "worker", "index": 2}})");
  set("OMPI_COMM_WORLD_RANK", "0");  // lower precedence: ignored
  set("OMPI_COMM_WORLD_SIZE", "1");
  auto id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->role, "worker");
  EXPECT_EQ(id->index, 2);
  EXPECT_EQ(id->num_workers, 3);
  EXPECT_EQ(id->num_servers, 2);
  EXPECT_EQ(id->num_evaluators, 0);
  EXPECT_EQ(id->source, "TF_CONFIG");
  EXPECT_EQ(id->addresses["ps"], (std::vector<std::string>{"h4:2", "h5:2"}));

  set("TF_CONFIG", cluster + R"( "task": {"type": "ps", "index": 1}})");
  id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk());
  EXPECT_EQ(id->nodeName(), "ps-1");
}

TEST_F(IdentityTest, TfConfigChiefIsWorkerZero) {
  const std::string cluster = R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "evaluator": ["e:1"]},)";
  set("TF_CONFIG", cluster + R"( "task": {"type": "chief", "index": 0}})");
  auto chief = identityFromEnvironment();
  ASSERT_TRUE(chief.isOk()) << chief.status().toString();
  EXPECT_EQ(chief->nodeName(), "worker-0");
  EXPECT_EQ(chief->num_workers, 3);
  EXPECT_EQ(chief->addresses["worker"], (std::vector<std::string>{"c:1", "w0:1", "w1:1"}));
  set("TF_CONFIG", cluster + R"( "task": {"type": "worker", "index": 1}})");
  auto worker = identityFromEnvironment();
  ASSERT_TRUE(worker.isOk());
  EXPECT_EQ(worker->nodeName(), "worker-2");
  set("TF_CONFIG", cluster + R"( "task": {"type": "evaluator", "index": 0}})");
  auto eval = identityFromEnvironment();
  ASSERT_TRUE(eval.isOk());
  EXPECT_EQ(eval->nodeName(), "evaluator-0");
  EXPECT_EQ(eval->num_evaluators, 1);
}

TEST_F(IdentityTest, TfConfigErrorsSayWhere) {
  const std::map<std::string, std::string> cases = {
      {"not json", "not a JSON object"},
      {R"({"task": {"type": "worker", "index": 0}})", "cluster: missing"},
      {R"({"cluster": {"worker": ["a"]}})", "task: missing"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"index": 0}})", "task.type"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": -1}})", "task.index"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 1}})", "past cluster.worker"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"type": "ps", "index": 0}})", "'ps' has no list"},
      {R"({"cluster": {"gpu": ["a"]}, "task": {"type": "gpu", "index": 0}})", "cluster.gpu: unknown task type"},
      {R"({"cluster": {"worker": "a"}, "task": {"type": "worker", "index": 0}})", "cluster.worker: not a list"},
      {R"({"cluster": {"worker": [1]}, "task": {"type": "worker", "index": 0}})", "cluster.worker[0]: not a string"},
  };
  for (const auto& [json, expected] : cases) {
    set("TF_CONFIG", json);
    auto id = identityFromEnvironment();
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << json;
    EXPECT_NE(id.status().message().find("TF_CONFIG"), std::string::npos) << json;
    EXPECT_NE(id.status().message().find(expected), std::string::npos) << json << " -> " << id.status().message();
  }
}

TEST_F(IdentityTest, SlurmRanksSplitIntoPsWorkersEvaluators) {
  set("SLURM_NTASKS", "6");
  set("CHAOSBED_SERVERS", "2");
  set("CHAOSBED_EVALUATORS", "1");
  const std::vector<std::string> expected = {"ps-0", "ps-1", "worker-0", "worker-1", "worker-2", "evaluator-0"};
  for (int rank = 0; rank < 6; ++rank) {
    set("SLURM_PROCID", std::to_string(rank));
    auto id = identityFromEnvironment();
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    EXPECT_EQ(id->nodeName(), expected[rank]);
    EXPECT_EQ(id->source, "SLURM");
    EXPECT_EQ(id->num_workers, 3);
    EXPECT_EQ(id->num_servers, 2);
    EXPECT_EQ(id->num_evaluators, 1);
  }
}

TEST_F(IdentityTest, SlurmErrors) {
  set("SLURM_PROCID", "1");
  auto no_size = identityFromEnvironment();
  EXPECT_EQ(no_size.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_size.status().message().find("SLURM_NTASKS"), std::string::npos);
  set("SLURM_NTASKS", "1");
  auto past = identityFromEnvironment();
  EXPECT_NE(past.status().message().find("SLURM_PROCID=1 is not below SLURM_NTASKS=1"), std::string::npos)
      << past.status().message();
  set("SLURM_NTASKS", "2");
  set("CHAOSBED_SERVERS", "2");
  auto no_worker = identityFromEnvironment();
  EXPECT_EQ(no_worker.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_worker.status().message().find("leave no worker"), std::string::npos);
}

TEST_F(IdentityTest, OpenMpiWithoutServersIsAllWorkers) {
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("JOB_COMPLETION_INDEX", "0");  // lower precedence: ignored
  set("CHAOSBED_WORLD_SIZE", "1");
  auto id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->nodeName(), "worker-3");
  EXPECT_EQ(id->source, "OMPI");
  EXPECT_EQ(id->num_workers, 4);
  EXPECT_EQ(id->num_servers, 0);
}

TEST_F(IdentityTest, TorchrunRanksCountOnlyWhereTorchrunSetThem) {
  set("RANK", "1");
  set("WORLD_SIZE", "3");
  EXPECT_EQ(identityFromEnvironment().status().code(), StatusCode::kNotFound) << "a RANK of someone else's";
  EXPECT_EQ(launcherRankFromEnvironment().status().code(), StatusCode::kNotFound);
  set("TORCHELASTIC_RUN_ID", "none");
  auto id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->nodeName(), "worker-1");
  EXPECT_EQ(id->source, "TORCHRUN");
  auto launched = launcherRankFromEnvironment();
  ASSERT_TRUE(launched.isOk());
  EXPECT_EQ(launched->rank, 1);
  EXPECT_EQ(launched->size, 3);
  set("RANK", "3");
  auto past = launcherRankFromEnvironment();
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("RANK=3 is not below WORLD_SIZE=3"), std::string::npos) << past.status().toString();
  // Slurm goes first where both say.
  set("RANK", "0");
  set("SLURM_PROCID", "2");
  set("SLURM_NTASKS", "4");
  EXPECT_EQ(launcherRankFromEnvironment()->source, "SLURM");
  EXPECT_EQ(launcherRankFromEnvironment()->rank, 2);
}

TEST_F(IdentityTest, KubernetesIndexedJob) {
  set("JOB_COMPLETION_INDEX", "0");
  auto no_size = identityFromEnvironment();
  EXPECT_EQ(no_size.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no_size.status().message().find("CHAOSBED_WORLD_SIZE"), std::string::npos);
  set("CHAOSBED_WORLD_SIZE", "3");
  set("CHAOSBED_SERVERS", "1");
  auto id = identityFromEnvironment();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->nodeName(), "ps-0");
  EXPECT_EQ(id->source, "JOB_COMPLETION_INDEX");
  set("JOB_COMPLETION_INDEX", "2");
  EXPECT_EQ(identityFromEnvironment()->nodeName(), "worker-1");
  set("CHAOSBED_INCARNATION", "-1");
  auto bad = identityFromEnvironment();
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("CHAOSBED_INCARNATION='-1'"), std::string::npos);
}

}  // namespace
}  // namespace chaosbed
