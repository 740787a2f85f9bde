#include "core/strategies/gradient_reducer.h"

#include "chaosbed/config.h"

namespace chaosbed {
namespace {

// The ring all-reduce of transports/collective.h over the node's transport.
class TransportReducer final : public GradientReducer {
 public:
  Status enter(const Communicator&, int64_t, Deadline) override { return Status::ok(); }
  Status allreduce(Communicator& comm, std::span<float> gradient, Deadline deadline) override {
    return chaosbed::allreduce(comm, gradient, deadline);
  }
};

}  // namespace

Result<std::unique_ptr<GradientReducer>> makeGradientReducer(NodeContext& ctx) {
  if (!ctx.strategy.nccl) return std::unique_ptr<GradientReducer>(std::make_unique<TransportReducer>());
#if CHAOSBED_HAVE_NCCL
  return makeNcclGradientReducer(ctx);
#else
  return Status::unavailable("mirrored: NCCL was asked for (cluster.transport: nccl), but this build has no "
                             "NCCL (CUDA and NCCL were not found when it was configured)");
#endif
}

}  // namespace chaosbed
