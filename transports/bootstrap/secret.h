#pragma once
// Secret: the run's shared secret (256 random bits), the root of trust of the control plane. The controller
// makes one per run and hands it to its nodes in a file of mode 0600 that only the run's owner can read (never
// in argv, the environment or a world-readable file). Every control connection (the store, the UCX control
// mesh) proves that it holds the secret with an HMAC-SHA256 over fresh nonces of both ends
// (challenge-response, so a recorded exchange cannot be replayed); the secret itself never crosses a socket.
//
// Thread safety: a Secret is an immutable value; every method may be called from any thread.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "transports/base/status.h"

namespace chaosbed {

// Lowercase hex of raw bytes (the secret file's encoding; also digests and random names).
std::string toHex(std::string_view bytes);

class Secret {
 public:
  static constexpr size_t kBytes = 32;
  static constexpr size_t kMacBytes = 32;  // HMAC-SHA256
  using Mac = std::array<uint8_t, kMacBytes>;

  // 256 bits from the kernel's CSPRNG (getrandom).
  static Result<Secret> generate();
  // Reads a file written by writeFile: refuses a symlink, anything but a regular file, a file that group or
  // others may read, or one owned by another user.
  static Result<Secret> readFile(const std::string& path);
  // Creates `path` with mode 0600 (O_EXCL, O_NOFOLLOW: never through a planted file or symlink).
  Status writeFile(const std::string& path) const;

  // HMAC-SHA256 keyed with the secret over `label` (the protocol and direction, so that one proof is never
  // valid for another purpose) followed by `message`.
  Mac mac(std::string_view label, std::string_view message) const;
  // Constant-time comparison of a received proof with the expected one.
  bool verify(std::string_view label, std::string_view message, std::string_view proof) const;
  // A key of its own for one purpose (a connection's frames): mac(label, message) as a Secret, so that it
  // proves nothing that the run's secret proves and dies with its connection.
  Secret derive(std::string_view label, std::string_view message) const;

  // Fresh random bytes for a nonce (getrandom; never fails on Linux >= 3.17 once the pool is initialised).
  static std::string nonce(size_t bytes = 32);

 private:
  std::array<uint8_t, kBytes> key_{};
};

}  // namespace chaosbed
