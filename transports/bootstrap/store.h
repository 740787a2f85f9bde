#pragma once
// Store: a small key-value rendezvous service (in the spirit of torch's TCPStore and PMI). The controller
// hosts a StoreServer on loopback (or a host address for multi-host runs); nodes connect with a Store
// client to publish and look up their transport addresses, NCCL unique ids, membership epochs and events.
//
// Contract: keys and values are arbitrary bytes. set() overwrites. get() blocks until the key exists or the
// deadline passes (Timeout). add() is an atomic counter (creating the key at 0) whose value is stored as
// decimal text, so get() of a counter reads e.g. "3"; add() on a key holding anything else is
// InvalidArgument. append() adds one entry to a list (a namespace of its own, apart from the keys) in one
// request: a writer killed at any instruction leaves the whole entry or nothing, and a list never has holes;
// readList() returns the entries that exist from an index on and never blocks. interruptGets() ends the gets
// of one client (a session()) blocked at that moment with Cancelled (long polls that their owner shuts
// down). All calls are thread-safe and carry deadlines (set/add/contains/append/readList use the client's
// operation timeout); a lost server connection turns into Unavailable, never a hang.
//
// Authentication: every connection proves that it holds the run's Secret before its first request. On
// accept the server sends "CBS1" and a 32-byte nonce Ns; the client answers its nonce Nc and
// HMAC(secret, "chaosbed store client", Ns|Nc); the server answers HMAC(secret, "chaosbed store server",
// Ns|Nc), so each side knows the other holds the secret and no recorded exchange can be replayed. A client
// that does not prove it within 2 s, or proves it wrong, is closed and logged (rate-limited).
//
// Every frame after that carries a MAC too, so a relay that passed the handshake through can neither inject,
// alter, replay, drop nor reorder one: both ends derive the connection's key K = HMAC(secret, "chaosbed store
// session", Ns|Nc), and a frame is u32 length, body, HMAC(K, "chaosbed store request" or "... response",
// u64 sequence number | body), the sequence number counting that direction's frames from 0 (never sent).
// The server closes a connection whose request fails its MAC (logged, rate-limited); the client drops one
// whose reply fails and reports DataLoss as a lost server.
//
// Frame bodies (TCP, little-endian): request = u8 op, u32 key length, key, operand
// (set: the value; get: u64 timeout in ms; add: i64 delta; contains: nothing; append: the value; readList:
// u64 first index, u32 most entries; peek: an empty key, then u32 count and count x (u32 length, key)).
// Response = u8 code (0 OK, 1 Timeout, 2 InvalidArgument), payload (get: value; add: i64;
// contains: u8; append: u64 index; readList: u32 count, then count x (u32 length, bytes); peek: u32 count,
// then per key u8 present and, when 1, u32 length and the value; errors: a message).
//
// The server is bounded against clients that misbehave: frames above 64 MiB close the connection; a frame
// must arrive whole within 10 s of its first byte; it stops reading from a client while that client's get
// blocks or while more than 64 KiB of its answers are unread (pipelining cannot grow its memory); at most
// 3/4 of the open-file limit in connections, and no fewer than 1024 (more are accepted and closed at once);
// when the process runs out of descriptors it still accepts and closes, with a rate-limited log, instead of
// spinning. A client uses one connection per concurrent call (a small pool), so a get blocked in one thread
// never delays a set from another. It never reconnects after the server died (a refused connection, or a
// reset or closed one that had authenticated); a handshake the server cut (a client that was paused or a
// server that was busy past the 2 s) is Unavailable for that call only, and the next call tries again.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <vector>

#include "transports/bootstrap/net.h"
#include "transports/bootstrap/secret.h"
#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  virtual Result<std::string> get(const std::string& key, Deadline deadline) = 0;
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // Whether key exists now (never blocks on the key; still bounded by the connection's own timeout).
  virtual Result<bool> contains(const std::string& key) = 0;
  // Appends value to the list `key`; returns its index (0, 1, ...).
  virtual Result<int64_t> append(const std::string& key, const std::string& value) = 0;
  // The values of `keys` that exist now (nullopt where a key does not), in one request: a controller reads
  // every node's report in one round trip instead of one per node. Never blocks on a key. At most 65536
  // keys; the reply is bounded only by the frame limit (64 MiB), so ask for what fits.
  virtual Result<std::vector<std::optional<std::string>>> peek(const std::vector<std::string>& keys) = 0;
  // Entries [from, from + max_entries) of the list `key` that exist now: fewer, or none, when the list is
  // shorter (an absent list is empty). A reply stops early past 16 MiB; read again from where it ended.
  virtual Result<std::vector<std::string>> readList(const std::string& key, int64_t from, int max_entries) = 0;
  // Ends every get of this client blocked now, in any thread, with Cancelled; later calls are unaffected. A
  // get that is about to start may miss it: an owner that stops its pollers calls it until they are gone.
  virtual void interruptGets() = 0;
  // Another client of the same store, with its own connections: its interruptGets() ends only its own gets.
  virtual std::unique_ptr<Store> session() = 0;
};

// Serves a Store over TCP on a background thread until destroyed.
class StoreServer {
 public:
  virtual ~StoreServer() = default;
  // "host:port" that clients pass to connectStore (the port is chosen by the kernel when 0 was asked).
  virtual std::string address() const = 0;
};

// Listens on host:port ("127.0.0.1:0" picks a free loopback port); admits only clients that hold `secret`.
// `more_listeners` (listening sockets, e.g. bound in another network namespace) serve the same store.
Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& listen_address, const Secret& secret,
                                                      std::vector<net::FileDescriptor> more_listeners = {});
// Connects to a StoreServer; retries until the deadline (the server may start after the node).
// `op_timeout` bounds set/add/contains (get uses its own deadline).
inline constexpr std::chrono::milliseconds kDefaultStoreOpTimeout{30000};
Result<std::unique_ptr<Store>> connectStore(const std::string& address, const Secret& secret, Deadline deadline,
                                            std::chrono::milliseconds op_timeout = kDefaultStoreOpTimeout);

}  // namespace chaosbed
