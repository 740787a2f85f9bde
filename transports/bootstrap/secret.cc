#include "transports/bootstrap/secret.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace chaosbed {
namespace {

bool fillRandom(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    ssize_t got = ::getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= size_t(got);
  }
  return true;
}

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string toHex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

Result<Secret> Secret::generate() {
  Secret s;
  if (!fillRandom(s.key_.data(), s.key_.size()))
    return Status::fromErrno("secret: getrandom");
  return s;
}

std::string Secret::nonce(size_t bytes) {
  std::string n(bytes, '\0');
  if (!fillRandom(n.data(), n.size())) PLOG(FATAL) << "getrandom";
  return n;
}

Status Secret::writeFile(const std::string& path) const {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return Status::fromErrno("secret file " + path);
  std::string text = toHex(std::string_view(reinterpret_cast<const char*>(key_.data()), key_.size())) + "\n";
  const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, text.data(), text.size()) == ssize_t(text.size()) &&
                  ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    return Status::fromErrno("secret file " + path, err);
  }
  return Status::ok();
}

Result<Secret> Secret::readFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::notFound("secret file " + path + ": " + std::strerror(errno));
  struct stat st {};
  char buf[2 * kBytes + 2];
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const ssize_t n = stat_ok ? ::read(fd, buf, sizeof buf) : -1;
  ::close(fd);
  if (!stat_ok || !S_ISREG(st.st_mode)) return Status::invalidArgument("secret file " + path + ": not a regular file");
  if ((st.st_mode & 077) != 0 || st.st_uid != ::geteuid())
    return Status::invalidArgument("secret file " + path + ": readable by others or owned by another user (want 0600)");
  if (n < ssize_t(2 * kBytes)) return Status::invalidArgument("secret file " + path + ": too short");
  Secret s;
  for (size_t i = 0; i < kBytes; ++i) {
    const int hi = hexValue(buf[2 * i]), lo = hexValue(buf[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::invalidArgument("secret file " + path + ": not hexadecimal");
    s.key_[i] = uint8_t(hi << 4 | lo);
  }
  return s;
}

Secret::Mac Secret::mac(std::string_view label, std::string_view message) const {
  std::string data;
  data.reserve(label.size() + 1 + message.size());
  data += label;
  data += '\0';  // the label never runs into the message
  data += message;
  Mac out{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), int(key_.size()), reinterpret_cast<const unsigned char*>(data.data()), data.size(),
       out.data(), &len);
  return out;
}

bool Secret::verify(std::string_view label, std::string_view message, std::string_view proof) const {
  if (proof.size() != kMacBytes) return false;
  const Mac expected = mac(label, message);
  return CRYPTO_memcmp(expected.data(), proof.data(), kMacBytes) == 0;
}

Secret Secret::derive(std::string_view label, std::string_view message) const {
  Secret derived;
  derived.key_ = mac(label, message);
  return derived;
}

}  // namespace chaosbed
