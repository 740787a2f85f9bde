#pragma once
// UcxTransport: chaosbed::Transport over UCX tagged messages (UCP, TAG feature, one worker per transport).
//
// Wire-up. Each rank publishes under "<prefix>/ucx/<rank>" in the bootstrap Store a record with its
// incarnation, its UCP worker address and the host:port of its control listener, then looks up every peer's
// record (or those UcxOptions::peers names) and creates one UCP endpoint per peer (itself included). A replacement process under the same rank
// publishes a record with a larger incarnation (by default drawn from the store counter
// "<prefix>/ucx/<rank>/incarnation"), which is how survivors tell it apart from its dead predecessor.
//
// Tags. The 64-bit UCP tag is the 48-bit user tag with the sender's rank in the top 16 bits; a receive from
// kAnyPeer masks the rank bits out and reads the sender back from the received tag. Buffers are handed to
// UCX as they are (contiguous, no staging copy): large messages use UCX's rendezvous zero-copy protocols.
//
// Failure detection. The data endpoints use UCP_ERR_HANDLING_MODE_NONE: peer error mode disables UCX's fast
// shared-memory paths (16 MiB bandwidth 5.8 -> 2.2 GB/s here, docs/design.md), which benchmarks use
// (UcxOptions::shared_memory). Peer loss is detected instead on a
// CONTROL path: a TCP connection between every pair of ranks (each rank dials every peer's listener and
// accepts theirs, each side saying hello {rank, incarnation}), watched by one thread with poll(). The kernel
// closes a killed process's sockets at once, so EOF/error on the socket of a peer's current incarnation
// means that process is gone: the watcher first drains messages that already arrived (progresses the
// worker until idle), then calls failPeer(rank, PeerLost): the peer's data endpoint is closed, its posted
// receives are cancelled, and every pending and later operation with it completes with the sticky status.
// Detection takes milliseconds after a SIGKILL. Endpoints to live peers are closed with a flush, never
// forced: UCX defines UCP_EP_CLOSE_FLAG_FORCE only in peer error mode (1.13 refuses it otherwise and leaves
// the endpoint open), so a live peer (failed by a cancelled send or a control-plane verdict) still receives
// what its endpoint carried. A gone peer's endpoint is not closed but released with the worker: its flush
// could never complete, and UCX 1.13 can abort on it (peer_failures.cc). (Peer error mode itself is no way
// out in 1.13: it tracks requests that ucp_worker_destroy then asserts on.)
// TCP rather than a second UCP worker in peer error mode: it needs no extra progress, works the same over
// every UCX transport, and it catches an orderly exit and a crash alike (both close the socket; an orderly
// exit first sends a goodbye that proves the run's secret, control.h, so that it is logged as routine). A paused
// (SIGSTOPped) peer keeps its sockets open: only the caller's deadline catches it (waitAll -> Timeout).
//
// Threads. UCS_THREAD_MODE_SERIALIZED: any caller thread may enter, and one mutex (worker_mu_) serialises
// every UCP call on the worker and guards the pending-operation tables. UCX completion callbacks run inside
// ucp_worker_progress under that mutex and only record the outcome; no user code runs under it.
// progress(until) spins on ucp_worker_progress for UcxOptions::spin (low latency), then sleeps on epoll over
// the worker's event fd (ucp_worker_arm) and an eventfd that failPeer signals, so a waiting rank does not
// burn a core while it waits. The control watcher is the only thread the transport starts.
//
// Requests must not outlive their transport; destroying a pending request cancels it (a pending send then
// abandons the peer's endpoint, as Request::cancel documents). When UCX cannot recall an operation that a
// failure or cancel() ends (a rendezvous receive already matched), the request completes with the sticky
// status at once and UCX's request is released when UCX finishes it.
// Reconnect never reuses a dead incarnation: a record whose process was found dead (its control connection
// closed, or its endpoint or control listener unreachable, e.g. a refused connect) is skipped, and
// reconnect() waits for a later incarnation's record.
// Known limit: messages the dead incarnation sent that are still unmatched stay in UCX's unexpected queue
// and can match a receive posted after reconnect().

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transports/bootstrap/secret.h"
#include "transports/bootstrap/store.h"
#include "transports/transport.h"

namespace chaosbed {

// The Linux loopback interface, as UCX names network devices.
inline constexpr const char* kLoopbackNetDevices = "lo";

struct UcxOptions {
  int rank = 0;
  int size = 1;
  // Namespace of this job's keys in the store, so that several jobs can share one store.
  std::string prefix = "chaosbed";
  // Bounds the whole of createUcxTransport (publishing, looking up every peer, control connections).
  std::chrono::milliseconds connect_timeout{30000};
  // Ranks to connect at creation (this rank always); empty: every rank. The others read as PeerLost until
  // reconnect() reaches them: a parameter-server worker talks to the servers only, and connecting to the
  // other workers would only meet their dead incarnations' stale records under churn.
  std::vector<int> peers;
  // The run's secret: the control mesh accepts only hellos that prove it (transports/ucx/control.h).
  // Required.
  std::optional<Secret> secret;
  // Identifies this process among the processes that have held `rank`; must grow with each replacement.
  // Negative: draw the next value from the store counter "<prefix>/ucx/<rank>/incarnation".
  int64_t incarnation = -1;
  // Address the control listener binds and publishes (the host's address for multi-host runs).
  std::string control_host = "127.0.0.1";
  // The network devices UCX may use, in UCX_NET_DEVICES syntax ("lo", "eth0,mlx5_0:1", "all"). The
  // default, kLoopbackNetDevices, keeps UCX's own sockets (the tcp transport listens on every device it
  // may use, with a backlog of 4096) on 127.0.0.1; shared-memory transports are not network devices and
  // are unaffected. Non-empty, it overrides a UCX_NET_DEVICES in the environment (see netDevicesFor);
  // empty leaves UCX's configuration as it is (the environment, else UCX's default: every device).
  std::string net_devices = kLoopbackNetDevices;
  // Messages up to this size go eagerly (UCX's RNDV_THRESH; empty: UCX's own choice; a UCX_RNDV_THRESH in the
  // environment wins). UCX's default sends a 16-64 KiB message by rendezvous, whose handshake needs both
  // processes on a core: with 4 ranks on 2 cores that made a 64 KiB all-reduce 2-4x slower (measured with
  // `chaosbed bench allreduce`, with and without cross-memory attach).
  std::string rndv_thresh = "128k";
  // The TCP transport's receive segment (UCX_TCP_RX_SEG_SIZE; empty: UCX's 64 KiB; the environment wins).
  // Without TCP's PUT zero-copy (off, see init()), a rendezvous moves its data as active messages of at most
  // one receive segment, and with one TCP event per poll each segment costs a progress call, a wake-up and a
  // copy through a bounce buffer: a 0.9 MB parameter-server push took 15 of them. 512 KiB made `chaosbed
  // bench ps` 23-28% faster at 1-8 workers (docs/design.md 2.5); 1 MiB measured no better.
  std::string tcp_rx_segment = "512k";
  // How long progress() polls before it sleeps on the worker's event fd.
  std::chrono::microseconds spin{200};
  // UCX's shared-memory transports are safe only while no peer dies, so they are off by default and data
  // goes through the network transports (TCP over loopback on one host, as between hosts). A sender
  // writes into the receiver's FIFO (posix/sysv mm) in two steps, reserve a slot then fill it: a process
  // SIGKILLed between the two leaves a slot that never fills, and the receiver then reads nothing more
  // through shared memory, from anyone, for the rest of its life (seen as a survivor whose state sync hung
  // after two workers were killed at start-up). Cross-memory attach (process_vm_readv) aborts the whole
  // process when its partner has died (UCX 1.13 without peer error mode). At the gradient sizes training
  // moves, TCP over loopback costs nothing against mm without CMA (docs/design.md §2.5); benchmarks, where
  // no peer dies, may turn shared memory on. Off takes posix, sysv, xpmem, knem and cma out of UCX_TLS.
  bool shared_memory = false;
};

// The UCX_TLS value that honours `tls` (the user's UCX_TLS, empty when unset) without shared-memory
// transports; empty when `tls` names nothing else.
std::string tlsWithoutSharedMemory(const std::string& tls);

// Whether a UCX_TLS value (empty: unset, UCX's default "all") lets UCX use its tcp transport.
bool tlsIncludesTcp(const std::string& tls);

// The UCX_NET_DEVICES value the transport configures for `option` (UcxOptions::net_devices) when the
// environment holds `user` (nullptr: unset), or "" to leave UCX's configuration alone. The option wins: the
// environment of a node is whatever shell started `chaosbed run` (an HPC module exporting
// UCX_NET_DEVICES=mlx5_0:1, say), and the promise that a one-host run listens on loopback only must not
// depend on it. `*overridden` is set when the user's value differs and is ignored, so the caller can say so.
std::string netDevicesFor(const std::string& option, const char* user, bool* overridden);

// Creates the UCP context and worker, publishes this rank and connects to every peer (all ranks must call
// it; it waits for their records until connect_timeout). `store` must outlive the transport: reconnect()
// reads replacements' records from it. InvalidArgument for a bad rank/size/prefix,
// Unavailable when UCX cannot start, Timeout when a peer never published.
Result<std::unique_ptr<Transport>> createUcxTransport(Store& store, const UcxOptions& options);

}  // namespace chaosbed
