// Mirrored with backup workers: a step applies the first N-b gradients; late ones are forwarded the result.

#include "core/strategies/mirrored_worker.h"

namespace chaosbed::mirrored_detail {

// Completes what has arrived among the requests that outlive their step, merging late members' headers.
// With block_on_all, waits for all of them (bounded by the deadline). A failed request is a peer failure.
Status MirroredWorker::checkPending(bool block_on_all, Deadline deadline) {
  for (;;) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!it->request->isComplete()) {
        ++it;
        continue;
      }
      if (Status s = it->request->status(); !s.isOk()) {
        const int peer = it->peer;
        pending_.erase(it);
        return s.code() == StatusCode::kPeerLost ? s : Status::peerLost(peer, s.toString());
      }
      if (it->ready) {
        late_flags_ |= it->ready->flags;
        late_generation_ = std::max(late_generation_, it->ready->generation);
        if (it->ready->flags & kFlagNotice) late_noticed_.push_back(it->ready->rank);
      }
      it = pending_.erase(it);
    }
    if (!block_on_all || pending_.empty()) return Status::ok();
    if (SteadyClock::now() >= deadline) return Status::timeout("mirrored: backup worker messages still in flight");
    ctx_.transport.progress(deadline);
  }
}

void MirroredWorker::cancelPending() {
  for (Pending& p : pending_) {
    if (p.request->isComplete()) continue;
    p.request->cancel();
    cancelled_sends_.push_back(std::move(p.buffer));  // receives included: cheap, and a few per failure
  }
  pending_.clear();
  late_flags_ = 0;
  late_generation_ = 0;
  late_noticed_.clear();
}

Status MirroredWorker::backupStep(StepOutcome& out) {
  const int n = comm_.size();
  const int backups = std::min(ctx_.strategy.backup_workers, n - 1);
  const int needed = n - backups;  // gradients applied per step, the coordinator's included
  const int coordinator = comm_.members.front();
  const int64_t g = membership_.generation;
  const int64_t stepno = progress_.step;
  const auto started = SteadyClock::now();
  const Tag ready_tag = strategyTag(StrategyMessage::kMirroredReady, g, stepno);
  const Tag decision_tag = strategyTag(StrategyMessage::kMirroredDecision, g, stepno);
  const Tag gradient_tag = strategyTag(StrategyMessage::kMirroredGradient, g, stepno);
  auto decision = std::make_shared<Decision>();
  RequestPtr decision_request;
  bool skip = false;  // behind, and already left out of this step: apply the forwarded gradient only
  if (me_ != coordinator) {
    decision_request = ctx_.transport.irecv(coordinator, decision_tag, podWritableBytes(*decision));
    skip = decision_request->isComplete() && decision_request->status().isOk() &&
           !((decision->included >> comm_.myIndex()) & 1);
  }
  if (skip) {
    CHAOSBED_RETURN_IF_ERROR(nextSlice(comm_.myIndex(), n));  // keeps the data position; the slice is dropped with the step
  } else {
    CHAOSBED_RETURN_IF_ERROR(computeGradient(comm_.myIndex(), n));
  }
  auto header = std::make_shared<StepHeader>(
      StepHeader{realtimeNs(), ctx_.control.latestGeneration(), stepno, myFlags(), me_});
  out.failed_at = SteadyClock::now();

  if (me_ == coordinator) {
    // Collect readies until `needed` members (this one included) are in; the late ones stay pending and are
    // merged (their stop / notice / generation) when they arrive.
    std::vector<std::shared_ptr<StepHeader>> readies(static_cast<size_t>(n));
    std::vector<RequestPtr> requests(static_cast<size_t>(n));
    for (int i = 1; i < n; ++i) {
      readies[size_t(i)] = std::make_shared<StepHeader>();
      requests[size_t(i)] = ctx_.transport.irecv(comm_.rankAt(i), ready_tag, podWritableBytes(*readies[size_t(i)]));
    }
    decision->included = 1;  // position 0: the coordinator
    int in = 1;
    const Deadline deadline = collectiveDeadline();
    for (;;) {
      for (int i = 1; i < n && in < needed; ++i) {
        const auto& r = requests[size_t(i)];
        if (!r->isComplete() || ((decision->included >> i) & 1)) continue;
        if (Status s = r->status(); !s.isOk()) return s.withContext("mirrored: ready of step " + std::to_string(stepno));
        decision->included |= uint64_t{1} << i;
        ++in;
      }
      if (in >= needed) break;
      for (int i = 1; i < n; ++i)
        if (Status s = ctx_.transport.peerStatus(comm_.rankAt(i)); !s.isOk())
          return (s.code() == StatusCode::kPeerLost ? s : Status::peerLost(comm_.rankAt(i), s.toString()))
              .withContext("mirrored: waiting for readies of step " + std::to_string(stepno));
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: waiting for " + std::to_string(needed) + " readies of step " +
                               std::to_string(stepno));
      ctx_.transport.progress(deadline);
    }
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(out.failed_at));
    CHAOSBED_RETURN_IF_ERROR(checkPending(false, deadline));
    decision->generation = std::max(header->generation, late_generation_);
    decision->flags = header->flags | late_flags_;
    std::vector<int> noticed = late_noticed_;
    late_flags_ = 0;
    late_noticed_.clear();
    if (header->flags & kFlagNotice) noticed.push_back(me_);
    for (int i = 1; i < n; ++i) {
      if ((decision->included >> i) & 1) {
        const StepHeader& h = *readies[size_t(i)];
        decision->flags |= h.flags;
        decision->generation = std::max(decision->generation, h.generation);
        if (h.flags & kFlagNotice) noticed.push_back(h.rank);
      } else {
        pending_.push_back(Pending{std::move(requests[size_t(i)]), readies[size_t(i)], readies[size_t(i)].get(),
                                   comm_.rankAt(i), false});
      }
    }
    for (int r : noticed)
      if (int i = comm_.indexOf(r); i >= 0) decision->noticed |= uint64_t{1} << i;
    for (int i = 1; i < n; ++i)
      pending_.push_back(Pending{ctx_.transport.isend(comm_.rankAt(i), decision_tag, podBytes(*decision)), decision,
                                 nullptr, comm_.rankAt(i), false});
  } else {
    pending_.push_back(Pending{ctx_.transport.isend(coordinator, ready_tag, podBytes(*header)), header, nullptr,
                               coordinator, false});
    Status s = wait(ctx_.transport, decision_request, collectiveDeadline());
    if (!s.isOk()) return s.withContext("mirrored: decision of step " + std::to_string(stepno));
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(out.failed_at));
  }
  out.generation = decision->generation;
  out.stop = (decision->flags & kFlagStop) != 0;
  for (int i = 0; i < n; ++i)
    if ((decision->noticed >> i) & 1) out.noticed.push_back(comm_.rankAt(i));

  const bool included = (decision->included >> comm_.myIndex()) & 1;
  out.failed_at = SteadyClock::now();
  if (included) {
    std::vector<int> members;
    for (int i = 0; i < n; ++i)
      if ((decision->included >> i) & 1) members.push_back(comm_.rankAt(i));
    // A sub-communicator per step: the generation's epoch, operation numbers from a range of their own (the
    // generation's communicator uses small ones), so its tags never meet another step's.
    Communicator sub{&ctx_.transport, members, comm_.epoch, kBackupOpBase | (static_cast<uint64_t>(stepno) % kBackupOpBase)};
    {
      Accounting::Timer t(ctx_.accounting, TimeCategory::kTransfer);
      Status s = allreduce(sub, model_->gradients(), collectiveDeadline());
      if (!s.isOk()) return s.withContext("mirrored: backup all-reduce of step " + std::to_string(stepno));
    }
    if (me_ == coordinator) CHAOSBED_RETURN_IF_ERROR(forwardGradient(*decision, gradient_tag));
  } else {
    Accounting::Timer t(ctx_.accounting, TimeCategory::kTransfer);
    Status s = recv(ctx_.transport, coordinator, gradient_tag, asWritableBytes(model_->gradients()),
                    collectiveDeadline());
    if (!s.isOk()) return s.withContext("mirrored: reduced gradient of step " + std::to_string(stepno));
  }
  CHAOSBED_RETURN_IF_ERROR(checkPending(false, collectiveDeadline()));
  CHAOSBED_RETURN_IF_ERROR(applyGradient(1.0f / static_cast<float>(needed)));
  // Only the samples whose gradient entered the model count.
  completeStep(static_cast<int64_t>(bpw_) * needed, included ? static_cast<int64_t>(bpw_) : 0, started);
  return Status::ok();
}

// The coordinator sends the reduced gradient to the members left out of this step. A bounded number of
// gradients is in flight to one member: a member further behind holds the group back (idle, peer).
Status MirroredWorker::forwardGradient(const Decision& decision, Tag tag) {
  std::shared_ptr<std::vector<float>> copy;
  const int max_lag = std::max<int>(
      kMinForwardLag, static_cast<int>(kForwardBudgetBytes / (model_->numParameters() * sizeof(float))));
  for (int i = 1; i < comm_.size(); ++i) {
    if ((decision.included >> i) & 1) continue;
    const int peer = comm_.rankAt(i);
    const Deadline deadline = collectiveDeadline();
    const auto waited = SteadyClock::now();
    for (;;) {
      CHAOSBED_RETURN_IF_ERROR(checkPending(false, deadline));
      int in_flight = 0;
      for (const Pending& p : pending_) in_flight += (p.forward && p.peer == peer) ? 1 : 0;
      if (in_flight < max_lag) break;
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: rank " + std::to_string(peer) + " is " + std::to_string(in_flight) +
                               " steps behind");
      ctx_.transport.progress(deadline);
    }
    ctx_.accounting.add(TimeCategory::kIdlePeer, secondsSince(waited));
    if (!copy) {
      auto grads = model_->gradients();
      copy = std::make_shared<std::vector<float>>(grads.begin(), grads.end());
    }
    pending_.push_back(Pending{ctx_.transport.isend(peer, tag, asBytes(std::span<const float>(*copy))), copy, nullptr,
                               peer, true});
  }
  return Status::ok();
}

}  // namespace chaosbed::mirrored_detail
