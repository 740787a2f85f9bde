#include "transports/nccl/communicator.h"

#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>

namespace chaosbed::nccl {
namespace {

// How long the destructor lets a healthy communicator finalise before it aborts it instead.
constexpr std::chrono::seconds kFinalizeTimeout{10};

std::string describe(int rank, int size, uint64_t epoch, int device) {
  return "rank " + std::to_string(rank) + " of " + std::to_string(size) + ", epoch " + std::to_string(epoch) +
         ", device " + std::to_string(device);
}

// An NCCL result as a Status with NCCL's own words: the code's string and, when it says more, the last error.
Status ncclStatus(const std::string& what, ncclResult_t result, ncclComm_t comm) {
  std::string msg = what + ": " + ncclGetErrorString(result);
  if (const char* last = ncclGetLastError(comm); last != nullptr && last[0] != '\0') msg += ": " + std::string(last);
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return Status::invalidArgument(std::move(msg));
    case ncclRemoteError:  // a peer failed or went away
    case ncclSystemError:  // a socket or other system call failed: typically a peer's connection dropped
      return Status::aborted(std::move(msg));
    default:
      return Status::internal(std::move(msg));
  }
}

Status cudaStatus(const std::string& what, cudaError_t error) {
  return Status::internal(what + ": " + cudaGetErrorName(error) + ": " + cudaGetErrorString(error));
}

// Sets the calling thread's current CUDA device for a scope and restores the previous one.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : device_(device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device_) set_ = cudaSetDevice(device_);
  }
  ~ScopedDevice() {
    if (saved_ >= 0 && saved_ != device_) (void)cudaSetDevice(saved_);
  }
  cudaError_t error() const { return set_; }

 private:
  int device_;
  int saved_ = -1;
  cudaError_t set_ = cudaSuccess;
};

// Polling pause of the watchdog loops: yield for the first polls (a small collective finishes in
// microseconds), then sleep, growing to 1 ms, never past the deadline.
class Backoff {
 public:
  void pause(Deadline deadline) {
    if (++polls_ <= 64) {
      std::this_thread::yield();
      return;
    }
    sleep_ = std::min(sleep_ * 2, std::chrono::microseconds(1000));
    const auto left = deadline - SteadyClock::now();
    if (left > SteadyClock::duration::zero())
      std::this_thread::sleep_for(std::min<SteadyClock::duration>(sleep_, left));
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds sleep_{5};
};

// Waits until a non-blocking NCCL call on comm (init, finalize) has finished. Returns its outcome, or
// Timeout when the deadline passes first (the caller then aborts comm).
Status waitComm(ncclComm_t comm, const std::string& what, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess)
      return ncclStatus(what + ": ncclCommGetAsyncError", r, comm);
    if (state == ncclSuccess) return Status::ok();
    if (state != ncclInProgress) return ncclStatus(what, state, comm);
    if (SteadyClock::now() >= deadline) return Status::timeout(what + ": not finished by the deadline");
    backoff.pause(deadline);
  }
}

Status checkOptions(const CommunicatorOptions& o) {
  if (o.job.empty()) return Status::invalidArgument("nccl: options.job: empty (it prefixes the Store keys)");
  if (o.size < 1) return Status::invalidArgument("nccl: options.size: " + std::to_string(o.size) + " (must be >= 1)");
  if (o.rank < 0 || o.rank >= o.size)
    return Status::invalidArgument("nccl: options.rank: " + std::to_string(o.rank) + " not in [0, " +
                                   std::to_string(o.size) + ")");
  if (o.device < -1)
    return Status::invalidArgument("nccl: options.device: " + std::to_string(o.device) + " (must be >= 0, or -1)");
  return Status::ok();
}

// Rank 0 creates the id and publishes it; the others wait for it.
Result<ncclUniqueId> exchangeUniqueId(Store& store, const std::string& key, int rank, Deadline deadline) {
  ncclUniqueId id;
  if (rank == 0) {
    if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return ncclStatus("nccl: ncclGetUniqueId", r, nullptr);
    CHAOSBED_RETURN_IF_ERROR(store.set(key, std::string(id.internal, sizeof(id.internal)))
                                 .withContext("nccl: publishing the unique id under '" + key + "'"));
    return id;
  }
  Result<std::string> value = store.get(key, deadline);
  if (!value) return value.status().withContext("nccl: waiting for rank 0's unique id under '" + key + "'");
  if (value->size() != sizeof(id.internal))
    return Status::dataLoss("nccl: store key '" + key + "' holds " + std::to_string(value->size()) +
                            " bytes, expected a " + std::to_string(sizeof(id.internal)) + "-byte ncclUniqueId");
  std::memcpy(id.internal, value->data(), sizeof(id.internal));
  return id;
}

}  // namespace

std::string uniqueIdKey(const std::string& job, uint64_t epoch) {
  return job + "/nccl/epoch/" + std::to_string(epoch) + "/unique_id";
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Store& store, const CommunicatorOptions& options,
                                                                   Deadline deadline) {
  CHAOSBED_RETURN_IF_ERROR(checkOptions(options));
  CHAOSBED_ASSIGN_OR_RETURN(const int devices, cudaDeviceCount());
  const int device = options.device >= 0 ? options.device : options.rank % devices;
  if (device >= devices)
    return Status::invalidArgument("nccl: options.device: " + std::to_string(device) + " but only " +
                                   std::to_string(devices) + " CUDA device(s) are visible");
  const std::string who = describe(options.rank, options.size, options.epoch, device);

  CHAOSBED_ASSIGN_OR_RETURN(ncclUniqueId id,
                            exchangeUniqueId(store, uniqueIdKey(options.job, options.epoch), options.rank, deadline));

  ScopedDevice scoped(device);
  if (scoped.error() != cudaSuccess) return cudaStatus("nccl init (" + who + "): cudaSetDevice", scoped.error());
  cudaStream_t stream = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
    return cudaStatus("nccl init (" + who + "): cudaStreamCreateWithFlags", e);

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init returns at once; we poll it against the deadline below
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config);
  Status status;
  if (r != ncclSuccess && r != ncclInProgress) {
    status = ncclStatus("nccl init (" + who + "): ncclCommInitRankConfig", r, comm);
  } else {
    status = waitComm(comm, "nccl init (" + who + ")", deadline);
    if (status.code() == StatusCode::kTimeout)
      status = Status::timeout("nccl init (" + who + "): the other ranks did not join by the deadline; aborted");
  }
  if (!status.isOk()) {
    LOG(WARNING) << status.toString();
    if (comm != nullptr) (void)ncclCommAbort(comm);
    (void)cudaStreamDestroy(stream);
    return status;
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(options.rank, options.size, options.epoch, device, stream, comm));
}

NcclCommunicator::NcclCommunicator(int rank, int size, uint64_t epoch, int device, cudaStream_t stream,
                                   ncclComm_t comm)
    : rank_(rank), size_(size), epoch_(epoch), device_(device), stream_(stream), comm_(comm) {}

NcclCommunicator::~NcclCommunicator() {
  MutexLock lock(mu_);
  ScopedDevice scoped(device_);
  if (comm_ != nullptr) {
    const std::string what = "nccl finalize (" + describe(rank_, size_, epoch_, device_) + ")";
    Status s;
    if (ncclResult_t r = ncclCommFinalize(comm_); r != ncclSuccess && r != ncclInProgress)
      s = ncclStatus(what, r, comm_);
    else
      s = waitComm(comm_, what, deadlineIn(kFinalizeTimeout));
    if (s.isOk()) {
      (void)ncclCommDestroy(comm_);
    } else {
      LOG(WARNING) << s.toString() << "; aborting the communicator instead";
      (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  (void)cudaStreamDestroy(stream_);
}

Status NcclCommunicator::status() const {
  MutexLock lock(mu_);
  return failure_;
}

void NcclCommunicator::abort(const Status& why) {
  MutexLock lock(mu_);
  abortLocked(why);
}

void NcclCommunicator::abortLocked(const Status& why) {
  if (!failure_.isOk()) return;
  failure_ = why.isOk() ? Status::aborted("communicator aborted") : why;
  LOG(WARNING) << "nccl (" << describe(rank_, size_, epoch_, device_)
               << "): aborting the communicator: " << failure_.toString();
  if (comm_ == nullptr) return;
  ScopedDevice scoped(device_);
  if (ncclResult_t r = ncclCommAbort(comm_); r != ncclSuccess)
    LOG(WARNING) << "nccl: ncclCommAbort: " << ncclGetErrorString(r);
  comm_ = nullptr;
}

Status NcclCommunicator::checkBuffer(const char* op, const char* what, const void* ptr) const {
  char where[32];
  std::snprintf(where, sizeof(where), "%p", ptr);
  const std::string prefix = std::string(op) + ": " + what + " buffer " + where + ": ";
  if (ptr == nullptr) return Status::invalidArgument(prefix + "null");
  cudaPointerAttributes attr{};
  if (cudaError_t e = cudaPointerGetAttributes(&attr, ptr); e != cudaSuccess)
    return Status::invalidArgument(prefix + "not CUDA memory (" + cudaGetErrorName(e) + ")");
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    return Status::invalidArgument(prefix + "host memory; NCCL needs device memory on device " +
                                   std::to_string(device_));
  if (attr.device != device_)
    return Status::invalidArgument(prefix + "on device " + std::to_string(attr.device) +
                                   ", the communicator is on device " + std::to_string(device_));
  return Status::ok();
}

Status NcclCommunicator::waitStream(const char* op, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    if (interrupt_)
      if (Status verdict = interrupt_(); !verdict.isOk()) abort(verdict);
    {
      MutexLock lock(mu_);
      if (!failure_.isOk()) return failure_.withContext(op);
      // The collective is enqueued once the communicator is no longer in progress; then the stream runs it.
      ncclResult_t state = ncclInProgress;
      if (ncclResult_t r = ncclCommGetAsyncError(comm_, &state); r != ncclSuccess)
        state = r;
      if (state != ncclSuccess && state != ncclInProgress) {
        abortLocked(ncclStatus("asynchronous error", state, comm_));
        return failure_.withContext(op);
      }
      if (state == ncclSuccess) {
        const cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::ok();
        if (e != cudaErrorNotReady) {
          abortLocked(cudaStatus("cudaStreamQuery", e));
          return failure_.withContext(op);
        }
      }
      if (SteadyClock::now() >= deadline) {
        abortLocked(Status::timeout("a collective did not complete by its deadline (a peer is slow, paused or "
                                    "gone); the communicator was aborted"));
        return failure_.withContext(op);
      }
    }
    backoff.pause(deadline);
  }
}

Status NcclCommunicator::run(const char* op, const std::function<ncclResult_t(ncclComm_t)>& enqueue,
                             Deadline deadline) {
  {
    MutexLock lock(mu_);
    if (!failure_.isOk()) return failure_.withContext(op);
    ScopedDevice scoped(device_);
    // Arguments were checked before; an error here leaves the communicator in an error state, so abort it.
    if (ncclResult_t r = enqueue(comm_); r != ncclSuccess && r != ncclInProgress) {
      abortLocked(ncclStatus("enqueue", r, comm_));
      return failure_.withContext(op);
    }
  }
  return waitStream(op, deadline);
}

Status NcclCommunicator::allreduce(const float* send, float* recv, size_t count, Deadline deadline) {
  constexpr const char* kOp = "nccl allreduce";
  MutexLock op_lock(op_mu_);
  if (Status s = status(); !s.isOk()) return s.withContext(kOp);
  if (count == 0) return Status::ok();
  CHAOSBED_RETURN_IF_ERROR(checkBuffer(kOp, "send", send));
  CHAOSBED_RETURN_IF_ERROR(checkBuffer(kOp, "recv", recv));
  return run(kOp, [&](ncclComm_t comm) { return ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream_); },
             deadline);
}

Status NcclCommunicator::broadcast(const float* send, float* recv, size_t count, int root, Deadline deadline) {
  constexpr const char* kOp = "nccl broadcast";
  MutexLock op_lock(op_mu_);
  if (Status s = status(); !s.isOk()) return s.withContext(kOp);
  if (root < 0 || root >= size_)
    return Status::invalidArgument(std::string(kOp) + ": root " + std::to_string(root) + " not in [0, " +
                                   std::to_string(size_) + ")");
  if (count == 0) return Status::ok();
  if (rank_ == root) CHAOSBED_RETURN_IF_ERROR(checkBuffer(kOp, "send", send));
  CHAOSBED_RETURN_IF_ERROR(checkBuffer(kOp, "recv", recv));
  return run(kOp, [&](ncclComm_t comm) { return ncclBroadcast(send, recv, count, ncclFloat, root, comm, stream_); },
             deadline);
}

}  // namespace chaosbed::nccl
