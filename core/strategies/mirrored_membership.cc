// Mirrored: waiting for memberships, entering a generation (rendezvous, state sync, rollback), recovery.

#include "core/strategies/mirrored_worker.h"

namespace chaosbed::mirrored_detail {

Result<Membership> MirroredWorker::awaitMembership(int64_t after, bool& stopped) {
  for (;;) {
    if (ctx_.control.stopRequested() || timeUp()) {
      stopped = true;
      return Status::cancelled("stopped while waiting for a membership");
    }
    auto m = ctx_.control.waitMembershipAfter(after, deadlineIn(kMembershipPoll));
    if (m.isOk()) return m;
    if (m.status().code() != StatusCode::kTimeout)
      return m.status().withContext("mirrored: waiting for membership after generation " + std::to_string(after));
  }
}

// A node enters the newest generation that names it with its own incarnation (generation 0, all first
// incarnations, until the controller published one). A replacement never enters a generation meant for its
// predecessor, and it does enter one published after the one that joined it (a slow start may first see a
// later generation, which lists it among the workers but no longer among the joined).
Status MirroredWorker::joinFirst(bool& stopped) {
  const auto join_started = SteadyClock::now();
  const int incarnation = ctx_.control.incarnation();
  const bool replacement = incarnation > 0;
  // A join cut short (the run stopped while it waited, or an error) is booked too: a replacement that started
  // as the run ended left its whole wait unattributed (2.3% of its wall, a resilience test's residual bound).
  Accounting::Frame joining(ctx_.accounting, replacement ? TimeCategory::kIdleRecovery : TimeCategory::kIdlePeer);
  const auto names_me = [&](const Membership& g) { return g.incarnationOf(me_) == incarnation; };
  auto published = ctx_.control.store().contains(ctx_.control.key("membership/0"));
  if (!published.isOk()) return published.status().withContext("mirrored: reading the membership");
  Membership m;
  if (*published || replacement) {
    CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(-1, stopped));
  } else {
    m.generation = 0;
    for (int r = 0; r < ctx_.workers; ++r) m.workers.push_back(r);
  }
  has_state_ = !replacement;  // a replacement gets its state from a checkpoint or a broadcast
  bool member_lost = false;
  for (;;) {
    while (!names_me(m)) {
      CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(m.generation, stopped));
    }
    Status s = enterGeneration(m);
    if (s.isOk()) break;
    if (!isPeerFailure(s)) return s;
    LOG(WARNING) << "mirrored rank " << me_ << ": joining generation " << m.generation << " failed: " << s.toString();
    reportFailure(s, m.generation, "joining generation " + std::to_string(m.generation) + " failed");
    member_lost = true;
    CHAOSBED_ASSIGN_OR_RETURN(m, awaitMembership(m.generation, stopped));
  }
  // Waiting for the others at the start is idle (peer); a replacement's rendezvous is recovery, and so is a
  // first join that a member lost during the start held up (its wait for the new generation): that member
  // recovers too, at its first step.
  const bool recovering = replacement || member_lost;
  ctx_.accounting.add(recovering ? TimeCategory::kIdleRecovery : TimeCategory::kIdlePeer, secondsSince(join_started));
  if (recovering) recovery_started_ = join_started;
  return Status::ok();
}

Status MirroredWorker::enterGeneration(const Membership& m) {
  if (!contains(m.workers, me_))
    return Status::notFound("mirrored: rank " + std::to_string(me_) + " is not a member of generation " +
                            std::to_string(m.generation) + " (workers " + ranksToString(m.workers) + ")");
  cancelPending();
  const std::vector<int> old_members = in_generation_ ? comm_.members : std::vector<int>{};
  for (int p : m.workers) {
    if (p == me_) continue;
    const bool fresh = contains(m.joined, p) || (in_generation_ && !contains(old_members, p));
    if (fresh || !ctx_.transport.peerStatus(p).isOk()) {
      Status s = reconnectMember(p, m.generation);
      if (!s.isOk()) return s.withContext("mirrored: reconnecting to rank " + std::to_string(p));
    }
  }
  CHAOSBED_RETURN_IF_ERROR(rendezvous(m));
  CHAOSBED_ASSIGN_OR_RETURN(comm_, makeCommunicator(&ctx_.transport, m.workers, static_cast<uint32_t>(m.generation)));
  CHAOSBED_RETURN_IF_ERROR(reducer_->enter(comm_, m.generation, collectiveDeadline()));
  membership_ = m;
  in_generation_ = true;

  bool rolled_back = false;
  int64_t pre_rollback_step = -1;
  if (m.rollback) {
    pre_rollback_step = has_state_ ? progress_.step : -1;
    CHAOSBED_RETURN_IF_ERROR(restoreCheckpoint());
    rolled_back = true;
  }
  return syncState(rolled_back, pre_rollback_step, m);
}

// A member lost since the generation was published may have no successor yet, or none ever (elastic then drops
// it in a newer generation): wait for one in short slices, and leave as soon as the generation is superseded
// or the run stops, instead of holding this member for collective_timeout_s.
Status MirroredWorker::reconnectMember(int peer, int64_t generation) {
  const Deadline deadline = collectiveDeadline();
  for (;;) {
    Status s = ctx_.transport.reconnect(peer, std::min(deadline, deadlineIn(kMembershipPoll)));
    if (s.isOk() || !isPeerFailure(s) || SteadyClock::now() >= deadline) return s;
    if (ctx_.control.latestGeneration() > generation || ctx_.control.stopRequested())
      return Status::aborted("mirrored: generation " + std::to_string(generation) + " was superseded or stopped before rank " +
                                 std::to_string(peer) + " was reachable",
                             peer);
  }
}

// No member may send in a generation before every member has reconnected to the new incarnations in it (a
// message to a peer that still holds the old incarnation's endpoint as failed would fail, stickily, on the
// sender). So each member, once reconnected, marks "<run>/mirrored/entered/<generation>/<rank>" in the
// store and waits for the marks of all members. Timeout (a member never came) or Aborted (a newer
// generation superseded this one while waiting) send the caller on to the next generation.
Status MirroredWorker::rendezvous(const Membership& m) {
  Store& store = ctx_.control.store();
  const std::string base = ctx_.control.key("mirrored/entered/" + std::to_string(m.generation) + "/");
  CHAOSBED_RETURN_IF_ERROR(store.set(base + std::to_string(me_), std::to_string(ctx_.control.incarnation()))
                               .withContext("mirrored: entering generation " + std::to_string(m.generation)));
  const Deadline deadline = collectiveDeadline();
  for (int p : m.workers) {
    for (;;) {
      auto v = store.get(base + std::to_string(p), std::min(deadline, deadlineIn(kMembershipPoll)));
      if (v.isOk()) break;
      if (v.status().code() != StatusCode::kTimeout) return v.status().withContext("mirrored: rendezvous");
      if (ctx_.control.latestGeneration() > m.generation || ctx_.control.stopRequested())
        return Status::aborted("mirrored: generation " + std::to_string(m.generation) +
                               " was superseded or stopped before rank " + std::to_string(p) + " entered it", p);
      if (SteadyClock::now() >= deadline)
        return Status::timeout("mirrored: rank " + std::to_string(p) + " did not enter generation " +
                               std::to_string(m.generation) + " within collective_timeout_s");
    }
  }
  return Status::ok();
}

// All members agree on the state to continue from: the newest step any member holds (after a failure some
// members may have finished a step that others did not); members behind it, and joiners, receive it.
Status MirroredWorker::syncState(bool rolled_back, int64_t pre_rollback_step, const Membership& m) {
  const int n = comm_.size();
  std::vector<SyncInfo> all(static_cast<size_t>(n));
  int source = -1;
  int64_t newest = -1;
  int64_t predecessor_step = -1;
  for (int pass = 0;; ++pass) {
    SyncInfo mine{progress_.step, pre_rollback_step, has_state_ ? 1 : 0, me_};
    CHAOSBED_RETURN_IF_ERROR(
        allgather(comm_, podBytes(mine), std::as_writable_bytes(std::span<SyncInfo>(all)), collectiveDeadline())
            .withContext("mirrored: state sync of generation " + std::to_string(m.generation)));
    source = -1;
    newest = -1;
    for (const SyncInfo& s : all) {
      if (s.has_state && s.step > newest) {
        newest = s.step;
        source = s.rank;  // members are in rank order: the lowest rank with the newest step
      }
      if (s.rank != me_) predecessor_step = std::max(predecessor_step, s.pre_rollback_step);
    }
    if (source >= 0 || m.generation == 0 || pass > 0) break;
    // Every member is new after the first generation: the one before was lost whole. Never start over from
    // the seed in silence: every member restores the newest checkpoint (a notice's included), as restart
    // would, and the state is synchronised again; with none, the run starts from scratch and says so.
    CHAOSBED_RETURN_IF_ERROR(restoreCheckpoint());
    if (me_ == comm_.members.front())
      ctx_.control.record(events::TotalLoss{
          .restored = progress_.step > 0, .step = progress_.step, .samples = progress_.samples, .generation = m.generation});
  }
  bool uniform = true;
  for (const SyncInfo& s : all) uniform = uniform && s.has_state && s.step == newest;
  if (source < 0) {  // nobody holds a state (every member is new): all start from the seed
    resetToInitialState();
  } else if (!uniform) {
    const Deadline deadline = collectiveDeadline();
    auto params = model_->parameters();
    auto velocity = sgd_->velocity();
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, std::as_writable_bytes(params), source, deadline)
                                 .withContext("mirrored: broadcasting parameters"));
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, std::as_writable_bytes(velocity), source, deadline)
                                 .withContext("mirrored: broadcasting optimizer state"));
    CHAOSBED_RETURN_IF_ERROR(broadcast(comm_, podWritableBytes(progress_), source, deadline)
                                 .withContext("mirrored: broadcasting progress"));
    has_state_ = true;
  }
  if (rolled_back) {
    // This node's samples since the step everyone resumes from are lost to the rollback.
    const int64_t lost = pre_rollback_step >= 0 ? my_samples_ - mySamplesAtStep(progress_.step) : 0;
    // A replacement also accounts its predecessor's share (one slice per step since the checkpoint): the
    // predecessor reported those samples before it died and nobody else subtracts them.
    const int64_t predecessor_lost =
        (ctx_.control.incarnation() > 0 && pre_rollback_step < 0 && predecessor_step > progress_.step)
            ? (predecessor_step - progress_.step) * static_cast<int64_t>(bpw_)
            : 0;
    if (lost + predecessor_lost > 0) ctx_.accounting.rollback(lost + predecessor_lost);
    ctx_.control.record(events::MirroredRollback{.step = progress_.step,
                                                      .from_step = pre_rollback_step >= 0
                                                                       ? std::optional<int64_t>(pre_rollback_step)
                                                                       : std::nullopt,
                                                      .samples_lost = lost + predecessor_lost,
                                                      .generation = m.generation});
  }
  resetSampleHistory();
  return Status::ok();
}

// "failure_detected": the controller's Supervision answers a failure that no process exit explains with a
// new generation (experiments/run: onCollectiveFailure, onTick).
void MirroredWorker::reportFailure(const Status& why, int64_t generation, const std::string& reason) {
  ctx_.control.record(events::MirroredFailureDetected{.lost_rank = why.peer(),
                                                           .step = progress_.step,
                                                           .generation = generation,
                                                           .reason = reason,
                                                           .error = why.toString()});
}

Status MirroredWorker::recover(const Status& why, SteadyClock::time_point failed_at, bool& stopped,
                               const std::string& reason, bool planned) {
  LOG(WARNING) << "mirrored rank " << me_ << ": " << reason << " at step " << progress_.step << " in generation "
               << membership_.generation << ": " << why.toString();
  if (!planned) reportFailure(why, membership_.generation, reason);
  if (!recovery_started_) recovery_started_ = failed_at;
  cancelPending();
  int64_t after = membership_.generation;
  Status result;
  for (;;) {
    auto m = awaitMembership(after, stopped);
    if (!m.isOk()) {
      result = stopped ? Status::ok() : m.status();
      break;
    }
    Status s = enterGeneration(*m);
    if (s.isOk() || !isPeerFailure(s)) {
      result = s;
      break;
    }
    LOG(WARNING) << "mirrored rank " << me_ << ": entering generation " << m->generation << " failed: " << s.toString();
    // Tell the controller: when no exit explains it (a member frozen past the timeout), only a newer
    // generation that the controller publishes gets the members out.
    reportFailure(s, m->generation, "entering generation " + std::to_string(m->generation) + " failed");
    after = m->generation;
  }
  // Everything from the start of the failed collective until training resumes waited on recovery.
  ctx_.accounting.add(TimeCategory::kIdleRecovery, secondsSince(failed_at));
  return result;
}

// Every member saw (through the step headers) the same newer generation: enter it at this step boundary.
Status MirroredWorker::switchGeneration(int64_t generation, bool& stopped) {
  const auto started = SteadyClock::now();
  auto m = ctx_.control.membership(generation, collectiveDeadline());
  Status s = m.isOk() ? enterGeneration(*m) : m.status();
  if (s.isOk()) {
    ctx_.accounting.add(TimeCategory::kIdleRecovery, secondsSince(started));
    ctx_.control.record(events::MembershipChanged{.generation = generation,
                                                       .workers = m->workers,
                                                       .joined = m->joined,
                                                       .step = progress_.step,
                                                       .seconds = secondsSince(started)});
    return s;
  }
  if (!isPeerFailure(s)) return s;
  return recover(s, started, stopped, "entering generation " + std::to_string(generation) + " failed");
}

}  // namespace chaosbed::mirrored_detail
