#include "core/runtime/control.h"

#include <chrono>
#include <ctime>

namespace chaosbed {

using namespace std::chrono_literals;

int64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

nlohmann::json Membership::toJson() const {
  return {{"generation", generation}, {"workers", workers}, {"rollback", rollback}, {"joined", joined}};
}

Membership Membership::fromJson(const nlohmann::json& j) {
  Membership m;
  m.generation = j.at("generation").get<int64_t>();
  m.workers = j.at("workers").get<std::vector<int>>();
  m.rollback = j.value("rollback", false);
  m.joined = j.value("joined", std::vector<int>{});
  return m;
}

ControlChannel::ControlChannel(Store& store, std::string prefix, std::string node, int incarnation)
    : store_(store), prefix_(std::move(prefix)), node_(std::move(node)), incarnation_(incarnation) {}

ControlChannel::~ControlChannel() { stopBackground(); }

Status ControlChannel::announceReady() {
  return store_.set(key("ready/" + node_ + "#" + std::to_string(incarnation_)), "1");
}

Result<int64_t> ControlChannel::waitStart(Deadline deadline) {
  auto v = store_.get(key("start"), deadline);
  if (!v.isOk()) return v.status().withContext("waiting for the controller to start training");
  start_ns_ = std::stoll(*v);
  return start_ns_;
}

double ControlChannel::elapsed() const { return double(realtimeNs() - start_ns_) * 1e-9; }

Status ControlChannel::reportStats(const NodeStats& stats) {
  return store_.set(key("stats/" + node_ + "#" + std::to_string(incarnation_)), stats.toJson().dump());
}

Status ControlChannel::event(const std::string& type, nlohmann::json fields) {
  if (!fields.is_object()) fields = nlohmann::json::object();
  fields["type"] = type;
  fields["node"] = node_;
  fields["incarnation"] = incarnation_;
  fields["t"] = start_ns_ ? elapsed() : 0.0;
  // One atomic append: a node killed at any instant leaves the whole event or nothing, never a hole.
  auto n = store_.append(key("events"), fields.dump());
  return n.isOk() ? Status::ok() : n.status();
}

Status ControlChannel::noticeReceived() {
  return store_.set(key("notice/" + node_ + "#" + std::to_string(incarnation_)), std::to_string(realtimeNs()));
}

Result<Membership> ControlChannel::membership(int64_t generation, Deadline deadline) {
  auto v = store_.get(key("membership/" + std::to_string(generation)), deadline);
  if (!v.isOk()) return v.status();
  try {
    return Membership::fromJson(nlohmann::json::parse(*v));
  } catch (const std::exception& e) {
    return Status::dataLoss(std::string("membership/") + std::to_string(generation) + ": " + e.what());
  }
}

Result<Membership> ControlChannel::waitMembershipAfter(int64_t after, Deadline deadline) {
  CHAOSBED_ASSIGN_OR_RETURN(Membership m, membership(after + 1, deadline));
  // Skip ahead to the newest generation: intermediate ones are already superseded.
  for (;;) {
    auto has = store_.contains(key("membership/" + std::to_string(m.generation + 1)));
    if (!has.isOk() || !*has) return m;
    CHAOSBED_ASSIGN_OR_RETURN(m, membership(m.generation + 1, deadline));
  }
}

void ControlChannel::startBackground(std::function<NodeStats()> stats, std::chrono::milliseconds period) {
  closing_ = false;
  stats_fn_ = stats;
  threads_.emplace_back([this] {
    while (!closing_) {
      if (store_.get(key("stop"), deadlineIn(200ms)).isOk()) {
        stop_.store(true, std::memory_order_release);
        return;
      }
    }
  });
  threads_.emplace_back([this] {
    while (!closing_) {
      int64_t next = latest_generation_.load() + 1;
      if (store_.get(key("membership/" + std::to_string(next)), deadlineIn(200ms)).isOk())
        latest_generation_.store(next, std::memory_order_release);
    }
  });
  threads_.emplace_back([this, stats = std::move(stats), period] {
    auto next = SteadyClock::now();
    while (!closing_) {
      next += period;
      (void)reportStats(stats());
      while (!closing_ && SteadyClock::now() < next) std::this_thread::sleep_for(std::min<SteadyClock::duration>(50ms, next - SteadyClock::now()));
    }
  });
}

void ControlChannel::stopBackground() {
  closing_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
  if (stats_fn_) (void)reportStats(stats_fn_());
  stats_fn_ = nullptr;
}

}  // namespace chaosbed
