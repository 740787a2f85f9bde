#pragma once
// A minimal HTTP/1.1 server for one Prometheus endpoint: GET (or HEAD) `path` answers 200 with render()'s
// text (Content-Type text/plain; version=0.0.4), any other path 404, any other method 405, a request head
// over HttpServerOptions::max_request_bytes 431; every response closes its connection.
//
// Bounded. One thread serves every connection at once with a poll() loop, so an idle or slow client never
// delays another's scrape: each connection must deliver its whole request head within head_timeout of
// being accepted (else it gets 408 and is closed; a client that trickles bytes gains nothing), and must
// take its response within write_timeout. At most max_connections are open; a new one beyond that closes
// the oldest connection still sending its head (the one nearest its timeout anyway), and when every open
// connection is receiving a response, new ones wait in the listen backlog until one finishes. When the
// process runs out of descriptors (EMFILE/ENFILE) the server accepts and closes pending connections with a
// reserved descriptor, so the listener does not stay readable and the loop does not spin; that, and any
// other accept failure (which pauses accepting for 100 ms), is logged at most once per 10 s with a count.
//
// Security. The endpoint has no authentication and reveals the run (names, timings, faults). It binds
// loopback only unless HttpServerOptions::allow_remote: a listen address that resolves to anything else
// (0.0.0.0, a host's own address, a name that resolves there) is refused with InvalidArgument.
//
// Why not prometheus::Exposer: civetweb (Debian's build) starts its threads with 100 KiB stacks, and glibc
// carves static TLS out of them; in the chaosbed binary glog and OpenBLAS alone take ~90 KiB of TLS, and
// civetweb's threads overflow their stacks at start (SIGSEGV). This server has no such limit.
//
// render() is called on the server thread, once per request, while no other connection is served; it must
// be thread-safe with respect to its callers' updates. The destructor stops the thread and closes the
// listener and every open connection.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "transports/base/status.h"

namespace chaosbed {

struct HttpServerOptions {
  // Bind addresses beyond loopback. Off: such a listen address is InvalidArgument.
  bool allow_remote = false;
  // From accept to the end of the request head ("\r\n\r\n").
  std::chrono::milliseconds head_timeout{1000};
  // From the end of the request head to the last byte of the response.
  std::chrono::milliseconds write_timeout{5000};
  // A longer request head is answered 431.
  size_t max_request_bytes = 16 * 1024;
  // Open connections at most (each holds one descriptor).
  int max_connections = 128;
};

class HttpMetricsServer {
 public:
  // Binds listen ("host:port"; port 0 = a free port; host a name, IPv4 or [IPv6]) and starts serving.
  // InvalidArgument for a malformed address, or a non-loopback one without options.allow_remote;
  // Unavailable when it cannot be bound.
  static Result<std::unique_ptr<HttpMetricsServer>> start(const std::string& listen, const std::string& path,
                                                          std::function<std::string()> render,
                                                          const HttpServerOptions& options = {});
  ~HttpMetricsServer();
  HttpMetricsServer(const HttpMetricsServer&) = delete;
  HttpMetricsServer& operator=(const HttpMetricsServer&) = delete;

  // "host:port" actually bound (the port resolved when 0 was asked for).
  const std::string& address() const;

  // Blocks until a 200 response to `path` whose render() began after this call has been written out in
  // full, or until the deadline; true if one was. A run uses it to know that a scraper has seen a state
  // (its series at zero before training, its final values before it exits). A response finished later
  // after its accept than the scraper's announced timeout (Prometheus's X-Prometheus-Scrape-Timeout-Seconds)
  // does not count: that scraper has already dropped it.
  bool awaitServed(std::chrono::steady_clock::time_point deadline);
  // Seconds between the last two such responses' renders, once there were two (the scraper's interval).
  std::optional<double> servedInterval() const;

  class Impl;

 private:
  explicit HttpMetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" ("[v6]:port" too) and checks the port is a number 0..65535; errors name the address.
Status parseHostPort(const std::string& address, std::string* host, int* port);

}  // namespace chaosbed
