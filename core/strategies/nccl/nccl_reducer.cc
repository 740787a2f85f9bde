// mirrored's gradient all-reduce over NCCL: the gradient goes to the GPU, is summed there by NCCL across the
// members (one GPU per member), and comes back. One NCCL communicator per generation (its epoch), built from
// a unique id published in the run's bootstrap Store. Loss of a member is known from the node's UCX
// transport (control mesh, milliseconds) and aborts the NCCL communicator at once, instead of waiting for
// NCCL's own deadline.

#include <cuda_runtime_api.h>
#include <glog/logging.h>

#include "core/strategies/gradient_reducer.h"
#include "transports/nccl/communicator.h"

namespace chaosbed {
namespace {

class NcclReducer final : public GradientReducer {
 public:
  explicit NcclReducer(NodeContext& ctx) : ctx_(ctx) {}
  ~NcclReducer() override {
    drop();
    if (device_ != nullptr) (void)cudaFree(device_);
  }

  Status enter(const Communicator& comm, int64_t generation, Deadline deadline) override {
    drop();
    members_ = comm.members;
    nccl::CommunicatorOptions o;
    o.job = ctx_.control.prefix() + "/mirrored";
    o.epoch = static_cast<uint64_t>(generation);
    o.rank = comm.myIndex();
    o.size = comm.size();
    auto created = nccl::NcclCommunicator::create(ctx_.control.store(), o, deadline);
    if (!created.isOk()) return created.status().withContext("mirrored: NCCL communicator of generation " + std::to_string(generation));
    comm_ = std::move(created).value();
    comm_->setInterrupt([this] {
      for (int p : members_)
        if (Status s = ctx_.transport.peerStatus(p); !s.isOk())
          return s.code() == StatusCode::kPeerLost ? s : Status::peerLost(p, s.toString());
      return Status::ok();
    });
    return Status::ok();
  }

  Status allreduce(Communicator&, std::span<float> gradient, Deadline deadline) override {
    if (!comm_) return Status::internal("mirrored: NCCL all-reduce outside a generation");
    const size_t bytes = gradient.size_bytes();
    if (bytes > capacity_) {
      if (device_ != nullptr) (void)cudaFree(device_);
      device_ = nullptr;
      capacity_ = 0;
      void* p = nullptr;
      if (cudaError_t e = cudaMalloc(&p, bytes); e != cudaSuccess) return cudaFailure("cudaMalloc", e);
      device_ = static_cast<float*>(p);
      capacity_ = bytes;
    }
    if (cudaError_t e = cudaMemcpy(device_, gradient.data(), bytes, cudaMemcpyHostToDevice); e != cudaSuccess)
      return cudaFailure("cudaMemcpy to the GPU", e);
    CHAOSBED_RETURN_IF_ERROR(comm_->allreduce(device_, device_, gradient.size(), deadline));
    if (cudaError_t e = cudaMemcpy(gradient.data(), device_, bytes, cudaMemcpyDeviceToHost); e != cudaSuccess)
      return cudaFailure("cudaMemcpy from the GPU", e);
    return Status::ok();
  }

 private:
  static Status cudaFailure(const char* what, cudaError_t e) {
    return Status::internal(std::string("mirrored: ") + what + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
  }
  // A communicator of a past generation may have a dead member: abort rather than finalize (which would
  // wait for that member).
  void drop() {
    if (!comm_) return;
    comm_->abort(Status::aborted("mirrored: generation over"));
    comm_.reset();
  }

  NodeContext& ctx_;
  std::vector<int> members_;
  std::unique_ptr<nccl::NcclCommunicator> comm_;
  float* device_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace

Result<std::unique_ptr<GradientReducer>> makeNcclGradientReducer(NodeContext& ctx) {
  if (Status viable = nccl::isViable(); !viable.isOk())
    return viable.withContext("mirrored: cluster.transport nccl");
  return std::unique_ptr<GradientReducer>(std::make_unique<NcclReducer>(ctx));
}

}  // namespace chaosbed
