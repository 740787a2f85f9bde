#include "transports/ucx/control.h"

#include <glog/logging.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace chaosbed::ucx {
namespace {

constexpr size_t kNonceBytes = 16;
constexpr size_t kIdentityBytes = 12;
constexpr size_t kHelloSize = kIdentityBytes + kNonceBytes + Secret::kMacBytes;
constexpr char kHelloLabel[] = "chaosbed mesh hello";
constexpr char kGoodbyeLabel[] = "chaosbed mesh goodbye";
constexpr auto kHelloTimeout = std::chrono::seconds(2);

std::string identity(int rank, uint64_t incarnation) {
  std::string out;
  net::appendU32(out, static_cast<uint32_t>(rank));
  net::appendU64(out, incarnation);
  return out;
}

// What a hello's MAC covers: the nonce, who dials, and the one process it dials.
std::string helloTranscript(std::string_view nonce, std::string_view dialler, int acceptor, uint64_t acceptor_incarnation) {
  std::string t(nonce);
  t.append(dialler);
  t.append(identity(acceptor, acceptor_incarnation));
  return t;
}

std::string goodbyeTranscript(std::string_view nonce, int sender, uint64_t sender_incarnation, int receiver,
                              uint64_t receiver_incarnation) {
  std::string t(nonce);
  t.append(identity(sender, sender_incarnation));
  t.append(identity(receiver, receiver_incarnation));
  return t;
}

}  // namespace

Result<std::unique_ptr<ControlMesh>> ControlMesh::start(int rank, uint64_t incarnation, const std::string& host,
                                                        const Secret& secret, LostFn on_lost) {
  net::HostPort bound;
  CHAOSBED_ASSIGN_OR_RETURN(net::FileDescriptor listener, net::listenTcp({host, 0}, &bound));
  net::FileDescriptor wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return Status::fromErrno("control mesh: eventfd");
  return std::unique_ptr<ControlMesh>(
      new ControlMesh(rank, incarnation, std::move(listener), bound, std::move(wake), secret, std::move(on_lost)));
}

ControlMesh::ControlMesh(int rank, uint64_t incarnation, net::FileDescriptor listener, net::HostPort address,
                         net::FileDescriptor wake, const Secret& secret, LostFn on_lost)
    : rank_(rank), incarnation_(incarnation), secret_(secret), listener_(std::move(listener)), address_(std::move(address)),
      wake_(std::move(wake)), on_lost_(std::move(on_lost)) {
  thread_ = std::thread([this] { loop(); });
}

ControlMesh::~ControlMesh() { stop(); }

void ControlMesh::stop() {
  if (stopping_.exchange(true)) return;
  wake();
  thread_.join();
}

void ControlMesh::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_.get(), &one, sizeof(one));
  (void)n;  // an eventfd write only fails when the counter would overflow; it is then already signalled
}

Status ControlMesh::dial(int peer, uint64_t peer_incarnation, const net::HostPort& at, Deadline deadline) {
  // A refused or reset connection means the process is gone; a deadline that passed says nothing about it.
  auto fd = net::connectTcp(at, deadline, /*retry=*/false);
  if (!fd.isOk()) {
    const std::string what = "control connection to rank " + std::to_string(peer) + " at " + at.toString() + ": " +
                             fd.status().message();
    return fd.status().code() == StatusCode::kTimeout ? Status::timeout(what) : Status::peerLost(peer, what);
  }
  const std::string me = identity(rank_, incarnation_);
  const std::string nonce = Secret::nonce(kNonceBytes);
  const Secret::Mac mac = secret_.mac(kHelloLabel, helloTranscript(nonce, me, peer, peer_incarnation));
  std::string hello = me + nonce;
  hello.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  if (Status s = net::writeAll(fd->get(), std::as_bytes(std::span(hello)), deadline); !s.isOk()) {
    const std::string what = "control hello to rank " + std::to_string(peer) + ": " + s.message();
    return s.code() == StatusCode::kTimeout ? Status::timeout(what) : Status::peerLost(peer, what);
  }
  auto conn = std::make_unique<Conn>();
  conn->fd = std::move(fd).value();
  conn->peer = peer;
  conn->incarnation = peer_incarnation;
  conn->nonce = nonce;
  {
    MutexLock lock(mu_);
    conns_.push_back(std::move(conn));
  }
  wake();
  return Status::ok();
}

void ControlMesh::sayGoodbye() {
  MutexLock lock(mu_);
  for (auto& c : conns_) {
    if (c->peer < 0) continue;
    const Secret::Mac bye =
        secret_.mac(kGoodbyeLabel, goodbyeTranscript(c->nonce, rank_, incarnation_, c->peer, c->incarnation));
    ssize_t n = ::send(c->fd.get(), bye.data(), bye.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;  // best effort: a peer that misses it only logs the exit as a crash
  }
}

bool ControlMesh::alive(int peer, uint64_t incarnation) const {
  MutexLock lock(mu_);
  for (const auto& c : conns_)
    if (c->peer == peer && c->incarnation == incarnation) return true;
  return false;
}

void ControlMesh::readGoodbye(Conn& c, std::string_view bytes) {
  if (c.bye.size() >= Secret::kMacBytes) return;  // one goodbye per connection; anything after it is ignored
  c.bye.append(bytes.substr(0, Secret::kMacBytes - c.bye.size()));
  if (c.bye.size() < Secret::kMacBytes) return;
  if (secret_.verify(kGoodbyeLabel, goodbyeTranscript(c.nonce, c.peer, c.incarnation, rank_, incarnation_), c.bye)) {
    c.goodbye = true;
  } else {
    noteRejected("a goodbye that did not prove the run's secret");
  }
}

void ControlMesh::noteRejected(const char* what) {
  ++rejected_;
  const auto now = SteadyClock::now();
  if (now - last_rejection_log_ < std::chrono::seconds(10)) return;
  last_rejection_log_ = now;
  LOG(WARNING) << "ucx control mesh of rank " << rank_ << ": rejected " << what << " (" << rejected_
               << " rejected so far)";
}

void ControlMesh::loop() {
  std::vector<pollfd> fds;
  std::vector<Conn*> polled;
  while (!stopping_.load()) {
    fds.clear();
    polled.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listener_.get(), POLLIN, 0});
    Deadline next = Deadline::max();
    {
      MutexLock lock(mu_);
      for (auto& c : conns_) {
        fds.push_back({c->fd.get(), POLLIN, 0});
        polled.push_back(c.get());
        next = std::min(next, c->hello_deadline);
      }
    }
    int rc = ::poll(fds.data(), fds.size(), next == Deadline::max() ? -1 : net::pollTimeoutMs(next));
    if (rc < 0) {
      if (errno == EINTR) continue;
      LOG(ERROR) << "ucx control mesh: poll: " << std::strerror(errno);
      return;
    }
    if (stopping_.load()) return;
    if (fds[0].revents & POLLIN) {
      uint64_t count;
      ssize_t n = ::read(wake_.get(), &count, sizeof(count));
      (void)n;
    }
    if (fds[1].revents & POLLIN) {
      for (;;) {
        auto fd = net::acceptTcp(listener_.get());
        if (!fd.isOk() || !fd->valid()) break;
        auto conn = std::make_unique<Conn>();
        conn->fd = std::move(fd).value();
        conn->hello_deadline = SteadyClock::now() + kHelloTimeout;
        MutexLock lock(mu_);
        conns_.push_back(std::move(conn));
      }
    }
    // Connections only ever leave conns_ on this thread, so the pointers in `polled` stay valid.
    struct Lost {
      int peer;
      uint64_t incarnation;
      bool orderly;
    };
    std::vector<Lost> lost;
    std::vector<Conn*> closed;
    const auto now = SteadyClock::now();
    for (size_t i = 0; i < polled.size(); ++i) {
      Conn* c = polled[i];
      if (c->peer < 0 && c->hello_deadline <= now) {
        noteRejected("a control connection that sent no hello within 2 s");
        closed.push_back(c);
        continue;
      }
      if (fds[i + 2].revents == 0) continue;
      char buf[64];
      ssize_t n = ::recv(c->fd.get(), buf, sizeof(buf), 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (n > 0) {
        size_t used = 0;
        if (c->peer < 0) {
          used = std::min(static_cast<size_t>(n), kHelloSize - c->hello.size());
          c->hello.append(buf, used);
          if (c->hello.size() == kHelloSize) {
            const std::string_view hello(c->hello);
            const std::string_view nonce = hello.substr(kIdentityBytes, kNonceBytes);
            const std::string transcript = helloTranscript(nonce, hello.substr(0, kIdentityBytes), rank_, incarnation_);
            if (!secret_.verify(kHelloLabel, transcript, hello.substr(kIdentityBytes + kNonceBytes))) {
              noteRejected("a control connection whose hello did not prove the run's secret");
              closed.push_back(c);
              continue;
            }
            if (!seen_nonces_.insert(std::string(nonce)).second) {
              noteRejected("a control connection that replayed a hello");
              closed.push_back(c);
              continue;
            }
            int peer = static_cast<int>(net::loadU32(c->hello.data()));
            uint64_t inc = net::loadU64(c->hello.data() + 4);
            MutexLock lock(mu_);
            c->peer = peer;
            c->incarnation = inc;
            c->nonce = std::string(nonce);
            c->hello_deadline = Deadline::max();
          }
        }
        if (c->peer >= 0 && static_cast<size_t>(n) > used) readGoodbye(*c, std::string_view(buf + used, size_t(n) - used));
        continue;
      }
      // EOF or a socket error: the process at the other end closed it or died.
      if (c->peer >= 0) lost.push_back({c->peer, c->incarnation, c->goodbye});
      closed.push_back(c);
    }
    if (!closed.empty()) {
      MutexLock lock(mu_);
      std::erase_if(conns_, [&](const std::unique_ptr<Conn>& c) {
        return std::find(closed.begin(), closed.end(), c.get()) != closed.end();
      });
    }
    for (const Lost& l : lost) on_lost_(l.peer, l.incarnation, l.orderly);
  }
}

}  // namespace chaosbed::ucx
