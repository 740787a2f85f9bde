#pragma once
// How mirrored sums a step's gradient over the members of its generation: the node's transport (UCX ring
// all-reduce, the default) or NCCL on the node's GPU (cluster.transport: nccl). Everything else mirrored
// exchanges (step headers, state broadcasts, backup workers' forwarding) stays on the node's transport.

#include <cstdint>
#include <memory>
#include <span>

#include "chaosbed/config.h"
#include "core/strategies/strategy.h"
#include "transports/collective.h"

namespace chaosbed {

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  // On entering a generation, after its rendezvous: `comm` holds its members over the node's transport.
  virtual Status enter(const Communicator& comm, int64_t generation, Deadline deadline) = 0;
  // gradient[i] = sum over the members of their gradient[i]. `comm` is the one passed to enter(), whose
  // sequence of collectives the UCX reducer shares with mirrored's own. A lost member fails the call with
  // PeerLost; the next generation's enter() starts afresh.
  virtual Status allreduce(Communicator& comm, std::span<float> gradient, Deadline deadline) = 0;
};

// The reducer StrategyOptions::nccl asks for. Unavailable when NCCL is asked for but this build has no
// NCCL or this machine no CUDA device.
Result<std::unique_ptr<GradientReducer>> makeGradientReducer(NodeContext& ctx);

#if CHAOSBED_HAVE_NCCL
// NCCL on the GPU (core/strategies/nccl/nccl_reducer.cc).
Result<std::unique_ptr<GradientReducer>> makeNcclGradientReducer(NodeContext& ctx);
#endif

}  // namespace chaosbed
