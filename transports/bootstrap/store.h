#pragma once
// Store: a small key-value rendezvous service (in the spirit of torch's TCPStore and PMI). The controller
// hosts a StoreServer on loopback (or a host address for multi-host runs); nodes connect with a Store
// client to publish and look up their transport addresses, NCCL unique ids and membership epochs.
//
// Contract: keys and values are arbitrary bytes. set() overwrites. get() blocks until the key exists or the
// deadline passes (Timeout). add() is an atomic counter (creating the key at 0) whose value is stored as
// decimal text, so get() of a counter reads e.g. "3"; add() on a key holding anything else is
// InvalidArgument. All calls are thread-safe and carry deadlines (set/add/contains use the client's
// operation timeout); a lost server connection turns into Unavailable, never a hang.
//
// Wire protocol (TCP, little-endian): request = u32 length, u8 op, u32 key length, key, operand (set: the
// value; get: u64 timeout in ms; add: i64 delta; contains: nothing). Response = u32 length, u8 code
// (0 OK, 1 Timeout, 2 InvalidArgument), payload (get: value; add: i64; contains: u8; errors: a message).
// The server answers a blocking get when the key appears or its timeout passes; frames above 64 MiB are
// refused and close the connection. A client uses one connection per concurrent call (a small pool), so
// a get blocked in one thread never delays a set from another; it never reconnects after the server died.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "transports/status.h"
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
};

// Serves a Store over TCP on a background thread until destroyed.
class StoreServer {
 public:
  virtual ~StoreServer() = default;
  // "host:port" that clients pass to connectStore (the port is chosen by the kernel when 0 was asked).
  virtual std::string address() const = 0;
};

// Listens on host:port ("127.0.0.1:0" picks a free loopback port).
Result<std::unique_ptr<StoreServer>> startStoreServer(const std::string& listen_address);
// Connects to a StoreServer; retries until the deadline (the server may start after the node).
// `op_timeout` bounds set/add/contains (get uses its own deadline).
inline constexpr std::chrono::milliseconds kDefaultStoreOpTimeout{30000};
Result<std::unique_ptr<Store>> connectStore(const std::string& address, Deadline deadline,
                                            std::chrono::milliseconds op_timeout = kDefaultStoreOpTimeout);

}  // namespace chaosbed
