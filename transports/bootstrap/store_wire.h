#pragma once
// The store's wire (store.h describes it): what its server (store_server.cc) and its client
// (store_client.cc) must agree on, and nothing else. Internal to transports/bootstrap.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "transports/bootstrap/net.h"
#include "transports/bootstrap/secret.h"

namespace chaosbed::store_wire {

using namespace std::chrono_literals;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kContains = 4, kAppend = 5, kReadList = 6, kPeek = 7 };
enum Code : uint8_t { kCodeOk = 0, kCodeTimeout = 1, kCodeInvalid = 2 };
constexpr uint32_t kMaxFrame = 64u << 20;
constexpr size_t kReadListReplyCap = 16u << 20;
constexpr uint32_t kMaxPeekKeys = 1u << 16;

// Authentication (store.h): the server's greeting, the client's answer, the server's proof.
constexpr char kMagic[] = "CBS1";
constexpr size_t kMagicBytes = 4;
constexpr size_t kNonceBytes = 32;
constexpr size_t kGreetingBytes = kMagicBytes + kNonceBytes;
constexpr size_t kAnswerBytes = kNonceBytes + Secret::kMacBytes;
constexpr char kClientLabel[] = "chaosbed store client";
constexpr char kServerLabel[] = "chaosbed store server";
// After it, every frame carries a MAC under the connection's own key over its sequence number and body.
constexpr char kSessionLabel[] = "chaosbed store session";
constexpr char kRequestLabel[] = "chaosbed store request";
constexpr char kResponseLabel[] = "chaosbed store response";

// What a frame's MAC covers: its place in its direction (so a replayed, dropped or reordered frame fails)
// and its body.
inline std::string macInput(uint64_t seq, std::string_view body) {
  std::string in;
  in.reserve(8 + body.size());
  net::appendU64(in, seq);
  in += body;
  return in;
}

// u32 length of the body, the body, its MAC (store.h).
inline std::string sealedFrame(const Secret& key, const char* label, uint64_t seq, const std::string& body) {
  std::string out;
  out.reserve(4 + body.size() + Secret::kMacBytes);
  net::appendU32(out, static_cast<uint32_t>(body.size()));
  out += body;
  const Secret::Mac mac = key.mac(label, macInput(seq, body));
  out.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  return out;
}

inline std::string asString(const Secret::Mac& mac) { return std::string(reinterpret_cast<const char*>(mac.data()), mac.size()); }

}  // namespace chaosbed::store_wire
