#include "transports/transport.h"

namespace chaosbed {
namespace {

void cancelPending(std::span<const RequestPtr> requests) {
  for (const auto& r : requests)
    if (r && !r->isComplete()) r->cancel();
}

}  // namespace

Status waitAll(Transport& transport, std::span<const RequestPtr> requests, Deadline deadline,
               std::span<const int> watch) {
  uint64_t seen_failures = ~uint64_t{0};  // check watched peers on the first pass
  for (;;) {
    bool all_done = true;
    for (const auto& r : requests) {
      if (!r) continue;
      if (!r->isComplete()) {
        all_done = false;
        continue;
      }
      if (Status s = r->status(); !s.isOk()) {
        cancelPending(requests);
        return s;
      }
    }
    if (all_done) return Status::ok();
    if (uint64_t failures = transport.failureCount(); failures != seen_failures) {
      seen_failures = failures;
      for (int peer : watch) {
        if (Status s = transport.peerStatus(peer); !s.isOk()) {
          cancelPending(requests);
          return s.code() == StatusCode::kPeerLost ? s : Status::peerLost(peer, s.toString());
        }
      }
    }
    if (SteadyClock::now() >= deadline) {
      cancelPending(requests);
      return Status::timeout("deadline passed with " + std::to_string(requests.size()) +
                             " operation(s) pending on " + transport.name());
    }
    transport.progress(deadline);
  }
}

Status wait(Transport& transport, const RequestPtr& request, Deadline deadline) {
  return waitAll(transport, std::span<const RequestPtr>(&request, 1), deadline);
}

Status send(Transport& transport, int peer, Tag tag, std::span<const std::byte> data, Deadline deadline) {
  return wait(transport, transport.isend(peer, tag, data), deadline);
}

Status recv(Transport& transport, int peer, Tag tag, std::span<std::byte> data, Deadline deadline) {
  return wait(transport, transport.irecv(peer, tag, data), deadline);
}

}  // namespace chaosbed
