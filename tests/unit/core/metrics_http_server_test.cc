// HttpMetricsServer under hostile or careless clients, over real loopback sockets: idle and half-sent
// connections do not delay a scrape; a client that never finishes its request head (or trickles it) is
// answered 408 and closed at the head timeout; an oversized head gets 431; at the connection cap the
// oldest idle connection makes room; out of descriptors (EMFILE), pending connections are accepted and
// closed with one rate-limited log line, and serving resumes when descriptors are back; a non-loopback
// listen address needs allow_remote.

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/metrics/prometheus_http_server.h"
#include "core/metrics/prometheus_scrape.h"
#include "transports/bootstrap/net.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
using net::FileDescriptor;

constexpr const char* kBody = "chaosbed_up 1\n";

std::unique_ptr<HttpMetricsServer> startServer(const HttpServerOptions& options = {}) {
  auto s = HttpMetricsServer::start("127.0.0.1:0", "/metrics", [] { return std::string(kBody); }, options);
  EXPECT_TRUE(s.isOk()) << s.status().toString();
  return s.isOk() ? std::move(*s) : nullptr;
}

FileDescriptor dial(const std::string& address) {
  auto hp = net::parseHostPort(address);
  EXPECT_TRUE(hp.isOk()) << hp.status().toString();
  auto fd = net::connectTcp(*hp, deadlineIn(5s), false);
  EXPECT_TRUE(fd.isOk()) << fd.status().toString();
  return fd.isOk() ? std::move(*fd) : FileDescriptor();
}

void send(int fd, const std::string& text) {
  ASSERT_TRUE(net::writeAll(fd, std::as_bytes(std::span(text.data(), text.size())), deadlineIn(5s)).isOk());
}

struct Received {
  std::string data;
  bool eof = false;  // the server closed the connection (EOF or reset) before the deadline
};

// Reads what the server sends until it closes the connection, or until the deadline.
Received readToEof(int fd, Deadline deadline) {
  Received r;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, net::pollTimeoutMs(deadline));
    if (n <= 0) return r;  // deadline
    char buf[4096];
    const ssize_t got = ::recv(fd, buf, sizeof buf, 0);
    if (got > 0) {
      r.data.append(buf, size_t(got));
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    r.eof = true;
    return r;
  }
}

// Whether the server has sent anything or closed (without consuming it).
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

double msSince(SteadyClock::time_point t) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - t).count();
}

TEST(HttpMetricsServer, AwaitServedCountsOnlyAScrapeRenderedAfterTheCall) {
  auto server = startServer();
  ASSERT_TRUE(server);
  EXPECT_FALSE(server->servedInterval().has_value());
  ASSERT_TRUE(httpGet(server->address(), "/metrics", deadlineIn(5s)).isOk());
  // That scrape came before the call: it does not count, so the wait runs to its deadline.
  EXPECT_FALSE(server->awaitServed(deadlineIn(50ms)));
  // Neither do answers that are not the metrics (a 404).
  FileDescriptor other = dial(server->address());
  send(other.get(), "GET /elsewhere HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(readToEof(other.get(), deadlineIn(5s)).data.find("404"), std::string::npos);
  EXPECT_FALSE(server->awaitServed(deadlineIn(50ms)));
  // A scrape that begins while the wait is on ends it, once its response is out. (The scraper repeats until
  // the wait is over, so one of its scrapes surely begins after the call.)
  std::atomic<bool> waited{false};
  std::thread scraper([&] {
    while (!waited) EXPECT_TRUE(httpGet(server->address(), "/metrics", deadlineIn(5s)).isOk());
  });
  EXPECT_TRUE(server->awaitServed(deadlineIn(10s)));
  waited = true;
  scraper.join();
  ASSERT_TRUE(server->servedInterval().has_value()) << "two scrapes were served";
  EXPECT_GT(*server->servedInterval(), 0);
}

// Prometheus drops a scrape that outlasts its scrape_timeout, so a response finished after the timeout the
// request announced is not one the scraper has seen.
TEST(HttpMetricsServer, AwaitServedIgnoresAResponseLaterThanTheScrapersTimeout) {
  auto server = startServer();
  ASSERT_TRUE(server);
  auto waited = std::async(std::launch::async, [&] { return server->awaitServed(deadlineIn(10s)); });
  auto scrape = [&](const std::string& timeout) {
    FileDescriptor c = dial(server->address());
    send(c.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Prometheus-Scrape-Timeout-Seconds: " + timeout + "\r\n\r\n");
    const Received r = readToEof(c.get(), deadlineIn(5s));
    EXPECT_TRUE(r.eof);
    EXPECT_NE(r.data.find(kBody), std::string::npos);
  };
  // Accept, read, render and send take longer than a microsecond: the scraper has given up by then. The
  // answer is still complete (a client that waits longer may use it), but the wait goes on.
  scrape("0.000001");
  EXPECT_EQ(waited.wait_for(100ms), std::future_status::timeout) << "a late response counted as seen";
  scrape("10.000000");
  EXPECT_TRUE(waited.get());
}

TEST(HttpMetricsServer, TwentyIdleConnectionsDoNotDelayAScrape) {
  auto server = startServer();  // default options: 1 s head timeout
  ASSERT_TRUE(server);
  const auto opened = SteadyClock::now();
  std::vector<FileDescriptor> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(dial(server->address()));
    ASSERT_TRUE(idle.back().valid());
    // Half say nothing at all, half stop in the middle of their request head.
    if (i % 2) send(idle.back().get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  }
  const auto t0 = SteadyClock::now();
  auto body = httpGet(server->address(), "/metrics", deadlineIn(5s));
  const double ms = msSince(t0);
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_EQ(*body, kBody);
  std::printf("[metrics-http] scrape with 20 idle connections open: %.2f ms\n", ms);
  EXPECT_LT(ms, 1000) << "a scrape waited behind idle connections";
  // They really were held open while the scrape was served: none was closed before its head timeout.
  if (msSince(opened) < 900) {
    for (const auto& fd : idle) EXPECT_FALSE(readable(fd.get())) << "an idle connection was closed early";
  }
}

TEST(HttpMetricsServer, APartialRequestIsAnswered408AndClosedAtTheHeadTimeout) {
  HttpServerOptions options;
  options.head_timeout = 300ms;
  auto server = startServer(options);
  ASSERT_TRUE(server);
  FileDescriptor fd = dial(server->address());
  ASSERT_TRUE(fd.valid());
  const auto t0 = SteadyClock::now();
  send(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n");
  const Received r = readToEof(fd.get(), deadlineIn(3s));
  const double ms = msSince(t0);
  ASSERT_TRUE(r.eof) << "the slow client was never closed";
  EXPECT_TRUE(r.data.starts_with("HTTP/1.1 408")) << r.data;
  EXPECT_GE(ms, 250) << "closed before the head timeout";
  EXPECT_LT(ms, 1300) << "closed long after the head timeout";
}

TEST(HttpMetricsServer, TricklingBytesDoesNotExtendTheHeadTimeout) {
  HttpServerOptions options;
  options.head_timeout = 300ms;
  auto server = startServer(options);
  ASSERT_TRUE(server);
  FileDescriptor fd = dial(server->address());
  ASSERT_TRUE(fd.valid());
  const auto t0 = SteadyClock::now();
  send(fd.get(), "GET /metrics HTTP/1.1\r\nX-Pad: ");
  // One more byte every 50 ms until the server closes (each wait ends early when it does).
  int trickled = 0;
  Received r;
  while (msSince(t0) < 3000) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 50) == 1) {
      r = readToEof(fd.get(), deadlineIn(3s));
      break;
    }
    if (::send(fd.get(), "a", 1, MSG_NOSIGNAL) != 1) break;  // already reset
    ++trickled;
  }
  const double ms = msSince(t0);
  EXPECT_GE(trickled, 3) << "the trickle never got going";
  EXPECT_LT(ms, 1300) << "a trickling client kept its connection past the head timeout";
  EXPECT_TRUE(r.eof || r.data.empty()) << r.data;
}

TEST(HttpMetricsServer, AnOversizedRequestHeadIs431) {
  HttpServerOptions options;
  auto server = startServer(options);
  ASSERT_TRUE(server);
  FileDescriptor fd = dial(server->address());
  ASSERT_TRUE(fd.valid());
  // One byte over the cap and no end of head: the server reads it all, then refuses.
  send(fd.get(), "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(options.max_request_bytes, 'a'));
  const Received r = readToEof(fd.get(), deadlineIn(3s));
  EXPECT_TRUE(r.eof);
  EXPECT_TRUE(r.data.starts_with("HTTP/1.1 431")) << r.data;
}

TEST(HttpMetricsServer, AtTheConnectionCapTheOldestIdleConnectionMakesRoom) {
  HttpServerOptions options;
  options.max_connections = 4;
  auto server = startServer(options);
  ASSERT_TRUE(server);
  std::vector<FileDescriptor> idle;
  for (int i = 0; i < options.max_connections; ++i) idle.push_back(dial(server->address()));
  const auto t0 = SteadyClock::now();
  auto body = httpGet(server->address(), "/metrics", deadlineIn(5s));
  const double ms = msSince(t0);
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_LT(ms, 1000);
  const Received first = readToEof(idle[0].get(), deadlineIn(2s));
  EXPECT_TRUE(first.eof) << "the oldest idle connection should have been closed to make room";
  EXPECT_EQ(first.data, "") << "an evicted connection gets no response";
  if (msSince(t0) < 900) {
    EXPECT_FALSE(readable(idle.back().get())) << "the newest idle connection was closed too";
  }
}

TEST(HttpMetricsServer, OutOfDescriptorsConnectionsAreClosedAndLoggedOnce) {
  auto server = startServer();
  ASSERT_TRUE(server);
  auto hp = net::parseHostPort(server->address());
  ASSERT_TRUE(hp.isOk());
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(hp->port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Client sockets first: connect() needs no new descriptor once the table is full.
  constexpr int kClients = 5;
  std::vector<FileDescriptor> clients;
  for (int i = 0; i < kClients; ++i) clients.emplace_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ::testing::internal::CaptureStderr();  // opens its file now, before descriptors run out

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 256;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<FileDescriptor> fillers;
  for (;;) {
    int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd < 0) break;
    fillers.emplace_back(fd);
  }
  const int fill_errno = errno;

  std::vector<Received> got;
  for (auto& c : clients) {
    ASSERT_EQ(::connect(c.get(), reinterpret_cast<sockaddr*>(&to), sizeof to), 0) << std::strerror(errno);
    got.push_back(readToEof(c.get(), deadlineIn(3s)));
  }
  fillers.clear();
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  const std::string log = ::testing::internal::GetCapturedStderr();

  EXPECT_EQ(fill_errno, EMFILE);
  for (int i = 0; i < kClients; ++i) {
    EXPECT_TRUE(got[i].eof) << "client " << i << " was left in the accept queue";
    EXPECT_EQ(got[i].data, "") << "client " << i;
  }
  size_t lines = 0;
  for (size_t at = 0; (at = log.find("accept failure", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << "accept failures are logged at most once per 10 s:\n" << log;
  EXPECT_NE(log.find("Too many open files"), std::string::npos) << log;
  // Descriptors are back: the next scrape is served.
  auto body = httpGet(server->address(), "/metrics", deadlineIn(5s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_EQ(*body, kBody);
}

TEST(HttpMetricsServer, ANonLoopbackAddressNeedsAllowRemote) {
  auto render = [] { return std::string(kBody); };
  for (const char* remote : {"0.0.0.0:0"}) {
    auto refused = HttpMetricsServer::start(remote, "/metrics", render);
    ASSERT_FALSE(refused.isOk()) << remote;
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("not a loopback address"), std::string::npos)
        << refused.status().message();
  }
  HttpServerOptions allow;
  allow.allow_remote = true;
  auto wildcard = HttpMetricsServer::start("0.0.0.0:0", "/metrics", render, allow);
  ASSERT_TRUE(wildcard.isOk()) << wildcard.status().toString();
  const std::string port = (*wildcard)->address().substr((*wildcard)->address().rfind(':') + 1);
  auto body = httpGet("127.0.0.1:" + port, "/metrics", deadlineIn(5s));
  ASSERT_TRUE(body.isOk()) << body.status().toString();
  EXPECT_EQ(*body, kBody);
  // Names that resolve to loopback are loopback.
  auto local = HttpMetricsServer::start("localhost:0", "/metrics", render);
  EXPECT_TRUE(local.isOk()) << local.status().toString();
}

}  // namespace
}  // namespace chaosbed
