#pragma once
// SnapshotReceiver: the wildcard receives of one snapshot tag, robust to senders that stop mid-message.
//
// A receive matched to a sender that is then paused mid-transfer stays pending until the sender wakes; so a
// tag keeps two receives posted (the other one goes on receiving), and a receive older than
// kReceiveAgeLimit is cancelled and posted again. A cancelled receive whose transfer the transport could
// not stop keeps its buffer (retired) until the transport lets go of it (Request::bufferInUse).

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

#include "transports/transport.h"

namespace chaosbed {

class SnapshotReceiver {
 public:
  static constexpr int kSlots = 2;
  // Well above what a 0.9 MB snapshot takes over a 1 Mbit/s link (7 s).
  static constexpr std::chrono::seconds kReceiveAgeLimit{20};

  SnapshotReceiver(Transport& transport, Tag tag, size_t bytes, int slots = kSlots,
                   std::chrono::nanoseconds age_limit = kReceiveAgeLimit)
      : transport_(transport), tag_(tag), bytes_(bytes), age_limit_(age_limit), slots_(size_t(std::max(slots, 1))) {
    for (Slot& slot : slots_) post(slot);
  }
  ~SnapshotReceiver() {
    for (Slot& slot : slots_) slot.request->cancel();
  }

  // Receives cancelled while their transfer went on, whose buffers the transport still holds. The message
  // such a receive was matched to is dropped: it is older than the age limit.
  size_t retired() const { return retired_.size(); }

  // Calls on_message(bytes, request) for every receive completed since the last call, oldest post first,
  // and posts each slot again.
  template <class OnMessage>
  void poll(OnMessage&& on_message) {
    const auto now = SteadyClock::now();
    std::erase_if(retired_, [](const Slot& r) { return !r.request->bufferInUse(); });  // frees their buffers
    std::vector<Slot*> order;
    for (Slot& slot : slots_) order.push_back(&slot);
    std::sort(order.begin(), order.end(), [](Slot* a, Slot* b) { return a->serial < b->serial; });
    for (Slot* slot : order) {
      if (!slot->request->isComplete()) {
        if (now - slot->posted < age_limit_) continue;
        slot->request->cancel();
      } else if (slot->request->status().isOk()) {
        on_message(std::span<const std::byte>(slot->buffer), *slot->request);
      }
      post(*slot);
    }
  }

 private:
  struct Slot {
    std::vector<std::byte> buffer;
    RequestPtr request;
    SteadyClock::time_point posted{};
    uint64_t serial = 0;  // post order: UCX matches messages to receives in that order
  };

  void post(Slot& slot) {
    if (slot.request && slot.request->bufferInUse()) {
      retired_.push_back(std::move(slot));
      slot = Slot{};
    }
    if (slot.buffer.size() != bytes_) slot.buffer.assign(bytes_, std::byte{0});
    slot.request = transport_.irecv(kAnyPeer, tag_, slot.buffer);
    slot.posted = SteadyClock::now();
    slot.serial = next_serial_++;
  }

  Transport& transport_;
  const Tag tag_;
  const size_t bytes_;
  const std::chrono::nanoseconds age_limit_;
  std::vector<Slot> slots_;
  std::vector<Slot> retired_;
  uint64_t next_serial_ = 0;
};

}  // namespace chaosbed
