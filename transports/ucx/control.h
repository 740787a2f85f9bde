#pragma once
// ControlMesh: the control path of the UCX transport (see transports/ucx/transport.h). It owns a TCP
// listener and one connection per peer and direction. The dialling side opens each connection with a hello
// {u32 rank, u64 incarnation, 16-byte nonce, HMAC(secret, "chaosbed mesh hello", nonce|rank|incarnation|
// the acceptor's rank|the acceptor's incarnation)}, so only a holder of the run's Secret can claim a rank.
// The hello needs nothing from the acceptor (dialling a paused process must not block), so replays are
// stopped instead by binding the proof to the one process dialled and by each acceptor refusing a nonce it
// has seen before. The accepting side learns who dialled from the hello (the dialling side knows already);
// a connection whose hello is wrong or replayed, or missing after 2 s, is closed and logged (rate-limited)
// and never reported as a loss. One watcher thread polls all of them; when an identified connection reaches
// EOF or an error, the process at the other end is gone, and on_lost(rank, incarnation) is called from the
// watcher thread (no mesh lock held). The only other frame is a goodbye, sent by a process that closes its
// transport on purpose: HMAC(secret, "chaosbed mesh goodbye", the connection's nonce|sender|receiver), so
// that only the process at the other end can call its exit orderly (a goodbye that fails the check is
// logged and ignored: the EOF that follows then reads as a crash).

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/bootstrap/secret.h"
#include "transports/base/status.h"
#include "transports/transport.h"
#include "transports/base/thread_annotations.h"

namespace chaosbed::ucx {

class ControlMesh {
 public:
  using LostFn = std::function<void(int rank, uint64_t incarnation, bool orderly)>;

  // Listens on host (port chosen by the kernel) and starts the watcher thread.
  static Result<std::unique_ptr<ControlMesh>> start(int rank, uint64_t incarnation, const std::string& host,
                                                    const Secret& secret, LostFn on_lost);
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
    int peer = -1;             // -1 until a valid hello arrived
    uint64_t incarnation = 0;
    Deadline hello_deadline = Deadline::max();  // accepted connections: closed unless identified by then
    std::string hello;         // bytes of an incomplete hello
    std::string nonce;         // the hello's: binds a goodbye to this connection
    std::string bye;           // bytes of an incomplete goodbye
    bool goodbye = false;      // the peer announced an orderly exit, with a valid proof
  };

  ControlMesh(int rank, uint64_t incarnation, net::FileDescriptor listener, net::HostPort address,
              net::FileDescriptor wake, const Secret& secret, LostFn on_lost);
  void loop();
  void wake();
  void noteRejected(const char* what);  // rate-limited log of an unauthenticated connection or frame
  // Collects a goodbye's proof from bytes after the hello; marks the connection's exit orderly once it checks.
  void readGoodbye(Conn& c, std::string_view bytes);

  const int rank_;
  const uint64_t incarnation_;
  const Secret secret_;
  std::set<std::string> seen_nonces_;             // watcher thread only: hellos accepted so far
  int64_t rejected_ = 0;                          // watcher thread only
  SteadyClock::time_point last_rejection_log_{};  // watcher thread only
  net::FileDescriptor listener_;
  const net::HostPort address_;
  net::FileDescriptor wake_;
  const LostFn on_lost_;
  mutable Mutex mu_;
  std::vector<std::unique_ptr<Conn>> conns_ CHAOSBED_GUARDED_BY(mu_);
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace chaosbed::ucx
