#pragma once
// NCCL backend: collectives on GPU (device) buffers, one rank per CUDA device. Built only when CUDA and
// NCCL were found (CHAOSBED_HAVE_NCCL in "chaosbed/config.h").
//
// Contract
// - Viability. cudaDeviceCount() and isViable() never crash and never initialise CUDA in the calling
//   process: the probe runs cudaGetDeviceCount in a forked child (TensorPipe style), so a process may still
//   fork ranks after probing. Without a driver or device they return Unavailable("not viable: no CUDA
//   device (<CUDA's own error>)"). The first answer is cached for the life of the process. Call them before
//   anything else in the process touches CUDA: a child forked from a CUDA-initialised parent cannot use
//   CUDA, and the probe then reports that error.
// - Rendezvous. Rank 0 creates a ncclUniqueId and publishes it in the bootstrap Store under
//   uniqueIdKey(job, epoch); the other ranks wait for it until the deadline. A communicator rebuilt after a
//   membership change (elastic training) must use a new epoch: it then gets a fresh id, never a stale one.
// - Nothing hangs. ncclCommInitRankConfig runs non-blocking (config.blocking = 0) and is polled with
//   ncclCommGetAsyncError until the deadline; collectives are enqueued on the communicator's own CUDA stream
//   and waited by polling cudaStreamQuery + ncclCommGetAsyncError (a watchdog in the NCCL style). On a
//   deadline the operation returns Timeout and the communicator is aborted (ncclCommAbort): NCCL leaves a
//   communicator whose collective did not finish in an unknown state, so it cannot be reused.
// - Failure is sticky. After abort(why), an asynchronous NCCL error, or a timeout, the communicator is
//   aborted and every pending and later call returns the same status (with the operation's name prepended):
//   `why` as given (e.g. PeerLost(rank) from the control plane), Aborted for an NCCL remote/system error,
//   Timeout for a deadline. Recover by building a new communicator with the next epoch.
// - Errors carry NCCL's own words: ncclGetErrorString and ncclGetLastError (or cudaGetErrorName/String).
// - Threads. Every method may be called from any thread. Collectives are serialised (one runs at a time).
//   abort() does not wait for a running collective: it aborts the communicator between two watchdog polls,
//   and the waiting caller returns the abort status.
// - Buffers are device memory on the communicator's device (checked; host memory is InvalidArgument), of
//   at least `count` floats. The caller owns them. Work the caller queued on other streams must be
//   complete (or ordered with an event on stream()) before a collective; when it returns OK the result is
//   in the buffer and the stream is idle. After a failed collective the buffer contents are undefined.

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "transports/bootstrap/store.h"
#include "transports/base/status.h"
#include "transports/transport.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed::nccl {

// Number of CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies), probed in a forked child.
// Unavailable when there is no driver, no device, or the probe fails; never crashes.
Result<int> cudaDeviceCount();
// OK when at least one CUDA device is usable, else Unavailable("not viable: no CUDA device (reason)").
Status isViable();

// The Store key under which rank 0 publishes the unique id: "<job>/nccl/epoch/<epoch>/unique_id".
std::string uniqueIdKey(const std::string& job, uint64_t epoch);

struct CommunicatorOptions {
  std::string job;     // Store key prefix: the experiment/run id, so runs sharing a Store do not collide
  uint64_t epoch = 0;  // membership epoch; a rebuilt communicator must use a new one
  int rank = 0;        // 0..size-1
  int size = 1;
  int device = -1;     // CUDA device of this rank; -1 picks rank % cudaDeviceCount()
};

class NcclCommunicator {
 public:
  // Publishes (rank 0) or fetches the unique id, then initialises the communicator, all within deadline.
  // Errors: InvalidArgument (options), Unavailable (no CUDA device), Timeout (id not published, or peers
  // not joining in time; the half-built communicator is aborted), Store errors, NCCL errors.
  static Result<std::unique_ptr<NcclCommunicator>> create(Store& store, const CommunicatorOptions& options,
                                                          Deadline deadline);

  // Finalises and destroys a healthy communicator (bounded: aborts it if that takes over 10 s), or
  // releases an aborted one. Must not race with other calls on this object.
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  uint64_t epoch() const { return epoch_; }
  int device() const { return device_; }
  // The stream the collectives run on (non-blocking with respect to the legacy default stream).
  cudaStream_t stream() const { return stream_; }

  // recv[i] = sum over ranks of send[i], i < count. In place when send == recv.
  Status allreduce(const float* send, float* recv, size_t count, Deadline deadline);
  // recv[i] = root's send[i] on every rank; send is read on the root only. In place when send == recv.
  Status broadcast(const float* send, float* recv, size_t count, int root, Deadline deadline);

  // The control plane's verdict (a member was lost, the job is shutting down): aborts the communicator
  // (ncclCommAbort) so that a collective waiting here, and every later call, returns `why` (Aborted when
  // `why` is OK). Idempotent: the first verdict sticks. Any thread.
  void abort(const Status& why);
  // OK while usable, else the sticky status.
  Status status() const;
  // A verdict the watchdog polls while a collective waits: a non-OK answer aborts the communicator with it
  // (e.g. the UCX transport's loss of a member, known within milliseconds, where NCCL itself would wait for
  // the deadline). Set it before the first collective, from the thread that runs them.
  void setInterrupt(std::function<Status()> check) { interrupt_ = std::move(check); }

 private:
  NcclCommunicator(int rank, int size, uint64_t epoch, int device, cudaStream_t stream, ncclComm_t comm);

  // Enqueues one collective on stream_ under mu_, then waits for it.
  Status run(const char* op, const std::function<ncclResult_t(ncclComm_t)>& enqueue, Deadline deadline);
  Status checkBuffer(const char* op, const char* what, const void* ptr) const;
  // Polls the stream and the communicator until the enqueued collective completes, fails or times out.
  Status waitStream(const char* op, Deadline deadline);
  // Aborts the communicator with `why` unless already failed. Requires mu_.
  void abortLocked(const Status& why) CHAOSBED_REQUIRES(mu_);

  const int rank_;
  const int size_;
  const uint64_t epoch_;
  const int device_;
  const cudaStream_t stream_;

  Mutex op_mu_;           // serialises collectives
  mutable Mutex mu_;      // guards comm_ and failure_; held only for short NCCL/CUDA calls
  ncclComm_t comm_ CHAOSBED_GUARDED_BY(mu_);  // null once aborted or destroyed
  Status failure_ CHAOSBED_GUARDED_BY(mu_);  // sticky
  std::function<Status()> interrupt_;
};

}  // namespace chaosbed::nccl
