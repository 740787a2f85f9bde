#include "transports/shaper/link_shaper.h"

#include <algorithm>
#include <deque>
#include <mutex>

namespace chaosbed {

struct LinkShaper::State {
  struct Held {
    int peer = -1;
    Tag tag = 0;
    std::span<const std::byte> data;
    SteadyClock::time_point posted;
    bool done = false;  // completed without reaching the inner transport (cancelled, failed)
    Status status;
    RequestPtr inner;   // once released
  };
  using HeldPtr = std::shared_ptr<Held>;

  struct Link {
    LinkParams params;
    double tokens = 0;                  // bytes in the bucket
    SteadyClock::time_point refilled;   // when `tokens` was last brought up to date
    std::deque<HeldPtr> queue;          // posting order; cancelled entries are skipped at the head
  };

  std::mutex mu;
  std::vector<Link> links;
  std::chrono::milliseconds partition_hold = kDefaultPartitionHold;
  size_t held = 0;  // sends in queues that are neither released nor done

  // Brings the bucket up to `now`. An idle link's bucket holds at most `burst` bytes; while a send waits at
  // the head (its latency served) the bucket fills without limit, so the send leaves after its serialisation
  // time and a late wake-up of progress() costs no bandwidth (the surplus goes to the sends behind it).
  static void refill(Link& link, SteadyClock::time_point now) {
    const LinkParams& p = link.params;
    if (p.bandwidth_bytes_per_s <= 0 || now <= link.refilled) {
      link.refilled = std::max(link.refilled, now);
      return;
    }
    auto accrue = [&](SteadyClock::time_point until, bool capped) {
      if (until <= link.refilled) return;
      link.tokens += p.bandwidth_bytes_per_s * std::chrono::duration<double>(until - link.refilled).count();
      if (capped) link.tokens = std::min(link.tokens, static_cast<double>(p.burst_bytes));
      link.refilled = until;
    };
    if (!link.queue.empty() && !p.partitioned) {
      accrue(std::min(link.queue.front()->posted + p.latency, now), /*capped=*/true);
      accrue(now, /*capped=*/false);
    } else {
      accrue(now, /*capped=*/true);
    }
  }

  void dropDoneHeads(Link& link) {
    while (!link.queue.empty() && link.queue.front()->done) link.queue.pop_front();
  }

  void failQueue(Link& link, const Status& why) {
    for (auto& h : link.queue) {
      if (h->done) continue;
      h->done = true;
      h->status = why;
      --held;
    }
    link.queue.clear();
  }
};

namespace {

using Held = LinkShaper::State::Held;

class ShapedSend final : public Request {
 public:
  ShapedSend(std::shared_ptr<LinkShaper::State> state, std::shared_ptr<Held> held)
      : state_(std::move(state)), held_(std::move(held)) {}
  ~ShapedSend() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    cancelHeldLocked();
  }

  bool isComplete() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return held_->inner ? held_->inner->isComplete() : held_->done;
  }
  Status status() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return held_->inner ? held_->inner->status() : held_->status;
  }
  int peer() const override { return held_->peer; }
  int source() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return held_->inner ? held_->inner->source() : -1;
  }
  size_t receivedBytes() const override { return 0; }
  bool bufferInUse() const override {
    std::lock_guard<std::mutex> lock(state_->mu);
    return held_->inner ? held_->inner->bufferInUse() : !held_->done;
  }
  void cancel() override {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (held_->inner) {
      held_->inner->cancel();
      return;
    }
    cancelHeldLocked();
  }

 private:
  void cancelHeldLocked() {
    if (held_->inner || held_->done) return;
    held_->done = true;  // the queue drops it when it reaches the head
    held_->status = Status::cancelled("shaper: send cancelled before it left the queue");
    --state_->held;
  }

  std::shared_ptr<LinkShaper::State> state_;
  std::shared_ptr<Held> held_;
};

}  // namespace

LinkShaper::LinkShaper(std::unique_ptr<Transport> inner)
    : TransportWrapper(std::move(inner)), state_(std::make_shared<State>()) {
  state_->links.resize(static_cast<size_t>(size()));
  const auto now = SteadyClock::now();
  for (auto& l : state_->links) {
    l.refilled = now;
    l.tokens = static_cast<double>(l.params.burst_bytes);
  }
}

LinkShaper::~LinkShaper() {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (auto& l : state_->links) state_->failQueue(l, Status::cancelled("shaper: transport destroyed"));
}

Status LinkShaper::setLink(int peer, const LinkParams& params) {
  if (peer < 0 || peer >= size())
    return Status::invalidArgument("shaper: peer " + std::to_string(peer) + " is outside [0, " +
                                   std::to_string(size()) + ")");
  if (params.bandwidth_bytes_per_s < 0)
    return Status::invalidArgument("shaper: link to rank " + std::to_string(peer) + ": bandwidth " +
                                   std::to_string(params.bandwidth_bytes_per_s) + " B/s is negative");
  if (params.latency.count() < 0)
    return Status::invalidArgument("shaper: link to rank " + std::to_string(peer) + ": latency is negative");
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Link& link = state_->links[static_cast<size_t>(peer)];
  const auto now = SteadyClock::now();
  State::refill(link, now);  // account the time so far at the old rate
  const bool cap_starts = link.params.bandwidth_bytes_per_s <= 0 && params.bandwidth_bytes_per_s > 0;
  link.params = params;
  if (cap_starts) link.tokens = static_cast<double>(params.burst_bytes);
  link.refilled = now;
  return Status::ok();
}

Status LinkShaper::setLatency(int peer, std::chrono::microseconds latency) {
  LinkParams p = link(peer);
  p.latency = latency;
  return setLink(peer, p);
}

Status LinkShaper::setBandwidth(int peer, double bytes_per_s, std::optional<uint64_t> burst_bytes) {
  LinkParams p = link(peer);
  p.bandwidth_bytes_per_s = bytes_per_s;
  if (burst_bytes) p.burst_bytes = *burst_bytes;
  return setLink(peer, p);
}

Status LinkShaper::setPartitioned(int peer, bool partitioned) {
  LinkParams p = link(peer);
  p.partitioned = partitioned;
  return setLink(peer, p);
}

void LinkShaper::setPartitionHold(std::chrono::milliseconds hold) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->partition_hold = hold;
}

void LinkShaper::clear() {
  for (int p = 0; p < size(); ++p) (void)setLink(p, LinkParams{});  // default parameters are always valid
}

LinkParams LinkShaper::link(int peer) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  if (peer < 0 || peer >= static_cast<int>(state_->links.size())) return {};
  return state_->links[static_cast<size_t>(peer)].params;
}

size_t LinkShaper::heldCount() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->held;
}

RequestPtr LinkShaper::isend(int peer, Tag tag, std::span<const std::byte> data) {
  if (peer < 0 || peer >= size()) return inner().isend(peer, tag, data);  // the inner transport says why
  std::shared_ptr<Held> held;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    State::Link& link = state_->links[static_cast<size_t>(peer)];
    state_->dropDoneHeads(link);
    if (!link.params.shaped() && link.queue.empty()) return inner().isend(peer, tag, data);
    held = std::make_shared<Held>();
    held->peer = peer;
    held->tag = tag;
    held->data = data;
    held->posted = SteadyClock::now();
    link.queue.push_back(held);
    ++state_->held;
  }
  pump();  // a zero-latency link with tokens to spare sends at once
  return std::make_unique<ShapedSend>(state_, std::move(held));
}


LinkShaper::Pumped LinkShaper::pump() {
  std::vector<std::pair<int, Status>> to_fail;
  Pumped result;
  auto due = [&](SteadyClock::time_point t) { result.next_due = result.next_due ? std::min(*result.next_due, t) : t; };
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->held == 0) return result;
    const auto now = SteadyClock::now();
    for (size_t p = 0; p < state_->links.size(); ++p) {
      State::Link& link = state_->links[p];
      state_->dropDoneHeads(link);
      if (link.queue.empty()) continue;
      const int peer = static_cast<int>(p);
      if (Status s = inner().peerStatus(peer); !s.isOk()) {
        state_->failQueue(link, s);
        continue;
      }
      const LinkParams& params = link.params;
      if (params.partitioned) {
        const auto expires = link.queue.front()->posted + state_->partition_hold;
        if (now >= expires) {
          to_fail.emplace_back(peer, Status::timeout("shaper: link to rank " + std::to_string(peer) +
                                                     " partitioned for longer than " +
                                                     std::to_string(state_->partition_hold.count()) + " ms"));
        } else {
          due(expires);
        }
        continue;
      }
      State::refill(link, now);
      while (!link.queue.empty()) {
        State::HeldPtr head = link.queue.front();
        if (head->done) {
          link.queue.pop_front();
          continue;
        }
        const auto ready = head->posted + params.latency;
        if (now < ready) {
          due(ready);
          break;
        }
        const double size = static_cast<double>(head->data.size());
        if (params.bandwidth_bytes_per_s > 0) {
          if (link.tokens < size) {
            due(now + std::chrono::duration_cast<SteadyClock::duration>(
                          std::chrono::duration<double>((size - link.tokens) / params.bandwidth_bytes_per_s)));
            break;
          }
          link.tokens -= size;
        }
        head->inner = inner().isend(peer, head->tag, head->data);
        link.queue.pop_front();
        --state_->held;
        result.released = true;
      }
    }
  }
  for (auto& [peer, why] : to_fail) {
    inner().failPeer(peer, why);
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->failQueue(state_->links[static_cast<size_t>(peer)], why);
  }
  if (!to_fail.empty()) result.released = true;  // failed held sends are completions too
  return result;
}

void LinkShaper::progress(Deadline until) {
  const Pumped pumped = pump();
  if (pumped.released) {
    // What was just released may have completed inside inner isend: poll, and let the caller look.
    inner().progress(SteadyClock::now());
    return;
  }
  Deadline wake = until;
  if (pumped.next_due) wake = std::min(wake, *pumped.next_due);
  if (heldCount() > 0) wake = std::min(wake, SteadyClock::now() + kMaxHoldPoll);
  inner().progress(wake);
  pump();
}

void LinkShaper::failPeer(int peer, const Status& why) {
  inner().failPeer(peer, why);
  if (peer < 0 || peer >= size() || why.isOk()) return;
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->failQueue(state_->links[static_cast<size_t>(peer)], why);
}

}  // namespace chaosbed
