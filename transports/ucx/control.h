#pragma once
// ControlMesh: the control path of the UCX transport (see transports/ucx/transport.h). It owns a TCP
// listener and one connection per peer and direction; each connection starts with a hello
// {u32 rank, u64 incarnation} from the dialling side (the accepting side learns who it is from that; the
// dialling side knows already). One watcher thread polls all of them; when an identified connection reaches
// EOF or an error, the process at the other end is gone, and on_lost(rank, incarnation) is called from the
// watcher thread (no mesh lock held). Nothing else is ever sent on these connections.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/status.h"
#include "transports/transport.h"

namespace chaosbed::ucx {

class ControlMesh {
 public:
  using LostFn = std::function<void(int rank, uint64_t incarnation, bool orderly)>;

  // Listens on host (port chosen by the kernel) and starts the watcher thread.
  static Result<std::unique_ptr<ControlMesh>> start(int rank, uint64_t incarnation, const std::string& host,
                                                    LostFn on_lost);
  ~ControlMesh();  // stops the watcher, then closes every connection (peers see EOF)

  const net::HostPort& address() const { return address_; }
  // Dials the listener of (peer, incarnation) at `at`, says hello, and watches the connection. PeerLost when
  // the process is gone (refused, reset), Timeout when the deadline passed first.
  Status dial(int peer, uint64_t peer_incarnation, const net::HostPort& at, Deadline deadline);
  // Whether some connection identified as (peer, incarnation) is still open.
  bool alive(int peer, uint64_t incarnation) const;
  // Stops the watcher thread (on_lost is not called afterwards); connections stay open until destruction.
  void stop();
  // Tells every connected peer that this process is closing on purpose (before destruction).
  void sayGoodbye();

 private:
  struct Conn {
    net::FileDescriptor fd;
    int peer = -1;             // -1 until the hello arrived
    uint64_t incarnation = 0;
    std::string hello;         // bytes of an incomplete hello
    bool goodbye = false;      // the peer announced an orderly exit
  };

  ControlMesh(int rank, uint64_t incarnation, net::FileDescriptor listener, net::HostPort address,
              net::FileDescriptor wake, LostFn on_lost);
  void loop();
  void wake();

  const int rank_;
  const uint64_t incarnation_;
  net::FileDescriptor listener_;
  const net::HostPort address_;
  net::FileDescriptor wake_;
  const LostFn on_lost_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> conns_;  // GUARDED_BY(mu_)
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace chaosbed::ucx
