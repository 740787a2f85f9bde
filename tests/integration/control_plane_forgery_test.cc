// A stranger on the machine cannot steer a run (issue #11). While a real `chaosbed run` of the tiny scenario
// trains, this test plays a local process that knows every port but not the run's secret: it finds each
// chaosbed listener that speaks our protocols (the store greets with "CBS1" and a nonce; the control meshes
// are silent until spoken to) and tries (a) to append a forged "eval" event claiming accuracy 1.0, (b) to set the
// stop flag, both with a made-up proof, and (c) to claim rank 1 on every control mesh and hang up (which
// used to make the peer declare rank 1 dead). The run must end as training makes it end, and the attempts
// must be logged as rejected. (The test itself reads the run's secret to find the meshes' ports in the
// store, as a port scan would; the forgeries never use it.) With the secret it then appends malformed
// events, as a buggy or subverted node could: the controller must refuse them all (control_plane.malformed_events)
// and record none.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>
#include <map>
#include <regex>
#include <set>

#include "tests/integration/observability_test_util.h"
#include "tests/testing/sockets.h"
#include "transports/bootstrap/net.h"
#include "transports/bootstrap/store.h"

namespace chaosbed {
namespace {

using namespace observability_test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Ports of the TCP sockets the run's processes listen on (tests/testing/sockets.h).
std::set<int> listeningTcpPorts(pid_t root) {
  std::set<int> ports;
  for (const testing::IpSocket& s : testing::ipSocketsOf(testing::processTree(root)))
    if (s.listening && s.proto.rfind("tcp", 0) == 0) ports.insert(s.port);
  return ports;
}

// Connects to every port at once and collects what each server says first, for up to 300 ms in all (ports
// that say nothing, UCX's own listeners, do not slow the probe down).
std::map<int, std::pair<net::FileDescriptor, std::string>> greetings(const std::set<int>& ports) {
  std::map<int, std::pair<net::FileDescriptor, std::string>> out;
  for (int port : ports) {
    auto fd = net::connectTcp({"127.0.0.1", uint16_t(port)}, deadlineIn(1s), false);
    if (fd.isOk()) out[port] = {std::move(fd).value(), ""};
  }
  const Deadline deadline = deadlineIn(300ms);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (auto& [port, c] : out)
      if (c.second.size() < 36) {
        fds.push_back({c.first.get(), POLLIN, 0});
        which.push_back(port);
      }
    if (fds.empty() || ::poll(fds.data(), fds.size(), net::pollTimeoutMs(deadline)) <= 0) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      auto& [fd, got] = out[which[i]];
      char buf[36];
      ssize_t n = ::recv(fd.get(), buf, 36 - got.size(), 0);
      if (n > 0) got.append(buf, size_t(n));
      else got.append(100, '?');  // closed: not one of ours
    }
  }
  return out;
}

// Whether the peer closed the connection (EOF or reset) within the deadline.
bool closedByPeer(int fd, Deadline deadline) {
  char buf[256];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, net::pollTimeoutMs(deadline)) <= 0) return false;
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;  // anything it said before closing is not an answer to a request
  }
}

std::string request(uint8_t op, const std::string& key, const std::string& operand) {
  std::string body(1, char(op));
  net::appendU32(body, uint32_t(key.size()));
  body += key + operand;
  std::string out;
  net::appendU32(out, uint32_t(body.size()));
  return out + body;
}

TEST(ControlPlaneForgery, StrangersWithoutTheSecretCannotForgeEventsStopsOrHellos) {
  const fs::path scenario = repoRoot() / "experiments" / "scenarios" / "tiny-synthetic.yaml";
  if (!fs::exists(CHAOSBED_BINARY)) GTEST_SKIP() << "no chaosbed binary at " << CHAOSBED_BINARY;
  TempDir dir("forgery");
  const fs::path out = dir.path() / "results";
  Child run({"stdbuf", "-oL", "-eL", CHAOSBED_BINARY, "run", scenario.string(), "--out", out.string(), "--metrics_addr",
             "off"});
  // Mirrored trains first, with worker 0 paused for its first 2 s: the forgeries land while it waits. Its
  // first progress line ("[mirrored]   0.5 s  acc ...") says training has started.
  ASSERT_TRUE(run.waitForLine("[mirrored] ", deadlineIn(60s))) << run.output();
  const auto config = nlohmann::json::parse(readFile(out / "mirrored" / "node-config.json"));
  const std::string prefix = config.at("prefix");
  const std::string store_address = config.at("store");

  int stores = 0, meshes = 0, store_rejections = 0, mesh_rejections = 0;
  for (auto& [port, probe] : greetings(listeningTcpPorts(run.pid()))) {
    const net::FileDescriptor& fd = probe.first;
    const std::string& hello = probe.second;
    if (hello.size() != 36 || hello.rfind("CBS1", 0) != 0) continue;
    ++stores;
    EXPECT_EQ(store_address, "127.0.0.1:" + std::to_string(port));
    // A made-up proof, then the forged requests pipelined behind it.
    std::string forged(64, 'F');
    forged += request(5, prefix + "/events", R"({"type":"eval","accuracy":1.0,"snapshot_t":0.42,"node":"evaluator-0","step":1})");
    forged += request(1, prefix + "/stop", "forged");
    ASSERT_EQ(::send(fd.get(), forged.data(), forged.size(), MSG_NOSIGNAL), ssize_t(forged.size()));
    store_rejections += closedByPeer(fd.get(), deadlineIn(5s));
  }
  // The meshes' ports, from the nodes' records (u64 incarnation, u32 port, ...).
  auto secret = Secret::readFile((out / ".secret").string());
  ASSERT_TRUE(secret.isOk()) << secret.status().toString();
  auto store = connectStore(store_address, *secret, deadlineIn(10s));
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  // What a node holding the secret could write and the controller must still refuse: malformed events (an
  // accuracy above 1, an unknown type, a field eval does not have). None may be acted on or recorded.
  const std::string from = R"("node":"evaluator-0","incarnation":0,"t":0.4)";
  const std::vector<std::string> malformed = {
      "{" + from + R"(,"type":"eval","accuracy":7.0,"snapshot_t":0.42,"step":1,"loss":0.1})",
      "{" + from + R"(,"type":"no.such.event"})",
      "{" + from + R"(,"type":"eval","accuracy":1.0,"snapshot_t":0.43,"step":1,"loss":0.1,"forged":true})"};
  for (const std::string& line : malformed) {
    auto appended = (*store)->append(prefix + "/events", line);
    ASSERT_TRUE(appended.isOk()) << appended.status().toString();
  }
  for (int rank = 0; rank < 3; ++rank) {
    auto record = (*store)->get(prefix + "/ucx/" + std::to_string(rank), deadlineIn(10s));
    ASSERT_TRUE(record.isOk() && record->size() >= 16) << record.status().toString();
    auto fd = net::connectTcp({"127.0.0.1", uint16_t(net::loadU32(record->data() + 8))}, deadlineIn(5s), false);
    if (!fd.isOk()) continue;
    ++meshes;
    std::string forged;
    net::appendU32(forged, 1);  // "I am rank 1"
    net::appendU64(forged, 1);  // its first incarnation
    forged += std::string(16 + 32, 'F');  // nonce and a made-up proof
    ASSERT_EQ(::send(fd->get(), forged.data(), forged.size(), MSG_NOSIGNAL), ssize_t(forged.size()));
    // A paused node (worker 0 is) judges the hello when it resumes.
    mesh_rejections += closedByPeer(fd->get(), deadlineIn(10s));
  }
  EXPECT_EQ(stores, 1) << "the run's store was not found among its listeners";
  EXPECT_EQ(meshes, 3) << "every node runs a control mesh listener";
  EXPECT_EQ(store_rejections, stores) << "the store must close a client with a wrong proof";
  EXPECT_EQ(mesh_rejections, meshes) << "a mesh must close a connection with a wrong hello";

  auto rc = run.waitExit(deadlineIn(120s));
  ASSERT_TRUE(rc.has_value()) << run.output();
  EXPECT_EQ(*rc, 0) << run.output();
  EXPECT_NE(run.output().find("store server: authentication"), std::string::npos) << "the store's rejection is not logged";

  // Training, not the forgery, ended mirrored: its worker 0 was paused for the first 2 s, so no snapshot
  // before t = 2 s can have reached the target; no node was declared lost.
  const auto summary = nlohmann::json::parse(readFile(out / "summary.json"));
  const auto& m = summary.at("strategies").at("mirrored");
  EXPECT_EQ(m.at("stop_reason"), "target") << m.dump();
  ASSERT_TRUE(m.at("tta_seconds").is_number()) << m.dump();
  EXPECT_GE(m.at("tta_seconds").get<double>(), 2.0) << "a forged eval was believed: " << m.dump();
  EXPECT_EQ(m.at("failures"), 0) << m.dump();
  EXPECT_EQ(m.at("control_plane").at("malformed_events"), int64_t(malformed.size())) << m.at("control_plane").dump();
  const std::string events = readFile(out / "events.jsonl");
  EXPECT_EQ(events.find("no.such.event"), std::string::npos) << "a malformed event was recorded";
  EXPECT_EQ(events.find("\"forged\""), std::string::npos) << "a malformed event was recorded";
  EXPECT_EQ(summary.at("strategies").at("parameter_server").at("failures"), 0);
  std::string node_logs;
  for (const auto& f : fs::recursive_directory_iterator(out / "mirrored" / "logs")) node_logs += readFile(f.path());
  EXPECT_NE(node_logs.find("rejected a control connection whose hello did not prove"), std::string::npos)
      << "the meshes' rejections are not logged";
  std::printf("[forgery] %d store and %d mesh listeners probed, every forgery rejected; mirrored TTA %.2f s\n", stores,
              meshes, m.at("tta_seconds").get<double>());
}

}  // namespace
}  // namespace chaosbed
