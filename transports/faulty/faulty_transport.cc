#include "transports/faulty/faulty_transport.h"

#include <algorithm>

#include "transports/collective.h"

namespace chaosbed {
namespace {

// An operation that a rule decided: complete from the start.
class DecidedRequest final : public Request {
 public:
  DecidedRequest(int peer, Status status) : peer_(peer), status_(std::move(status)) {}
  bool isComplete() const override { return true; }
  Status status() const override { return status_; }
  int peer() const override { return peer_; }
  int source() const override { return -1; }
  size_t receivedBytes() const override { return 0; }
  void cancel() override {}

 private:
  int peer_;
  Status status_;
};

}  // namespace

FaultyTransport::FaultyTransport(std::unique_ptr<Transport> inner) : TransportWrapper(std::move(inner)) {}

Result<int> FaultyTransport::addRule(FaultRule rule) {
  if (rule.action == FaultAction::kDrop && rule.op != FaultOp::kSend)
    return Status::invalidArgument("faulty: a drop rule applies to sends only");
  if (rule.action == FaultAction::kFail && rule.status.isOk())
    return Status::invalidArgument("faulty: a fail rule needs a non-OK status");
  if (rule.peer != kAnyPeer && (rule.peer < 0 || rule.peer >= size()))
    return Status::invalidArgument("faulty: rule peer " + std::to_string(rule.peer) + " is outside [0, " +
                                   std::to_string(size()) + ")");
  if (rule.times == 0) return Status::invalidArgument("faulty: a rule must fire at least once (times = 0)");
  MutexLock lock(mu_);
  const int id = next_id_++;
  rules_.push_back(Entry{id, std::move(rule)});
  return id;
}

void FaultyTransport::removeRule(int id) {
  MutexLock lock(mu_);
  std::erase_if(rules_, [id](const Entry& e) { return e.id == id; });
}

void FaultyTransport::clear() {
  MutexLock lock(mu_);
  rules_.clear();
}

uint64_t FaultyTransport::fired() const {
  MutexLock lock(mu_);
  return fired_;
}

Result<int> FaultyTransport::failNthSend(int peer, uint64_t n, Status status) {
  if (n == 0) return Status::invalidArgument("faulty: failNthSend counts from 1");
  return addRule(FaultRule{.op = FaultOp::kSend, .peer = peer, .skip = n - 1, .times = 1, .status = std::move(status)});
}

Result<int> FaultyTransport::dropSendsTo(int peer) {
  return addRule(FaultRule{.op = FaultOp::kSend, .peer = peer, .times = FaultRule::kForever,
                           .action = FaultAction::kDrop, .status = Status::ok()});
}

Result<int> FaultyTransport::failNextCollectiveStep(Status status) {
  return addRule(FaultRule{.op = FaultOp::kAny, .collective_only = true, .times = 1, .status = std::move(status)});
}

void FaultyTransport::breakPeer(int peer, const std::string& message) {
  {
    MutexLock lock(mu_);
    ++fired_;
  }
  inner().failPeer(peer, Status::peerLost(peer, message));
}

std::optional<FaultRule> FaultyTransport::match(bool is_send, int peer, Tag tag) {
  for (auto it = rules_.begin(); it != rules_.end(); ++it) {
    const FaultRule& r = it->rule;
    if (r.op != FaultOp::kAny && (r.op == FaultOp::kSend) != is_send) continue;
    if (r.peer != kAnyPeer && r.peer != peer) continue;
    if (r.collective_only && !isCollectiveTag(tag)) continue;
    if (it->seen++ < r.skip) continue;
    ++fired_;
    FaultRule fire = r;
    if (++it->fired >= r.times) rules_.erase(it);
    return fire;
  }
  return std::nullopt;
}

RequestPtr FaultyTransport::isend(int peer, Tag tag, std::span<const std::byte> data) {
  std::optional<FaultRule> rule;
  {
    MutexLock lock(mu_);
    rule = match(/*is_send=*/true, peer, tag);
  }
  if (!rule) return inner().isend(peer, tag, data);
  if (rule->action == FaultAction::kDrop) return std::make_unique<DecidedRequest>(peer, Status::ok());
  return std::make_unique<DecidedRequest>(peer, rule->status);
}

RequestPtr FaultyTransport::irecv(int peer, Tag tag, std::span<std::byte> data) {
  std::optional<FaultRule> rule;
  {
    MutexLock lock(mu_);
    rule = match(/*is_send=*/false, peer, tag);
  }
  if (!rule) return inner().irecv(peer, tag, data);
  return std::make_unique<DecidedRequest>(peer, rule->status);
}

}  // namespace chaosbed
