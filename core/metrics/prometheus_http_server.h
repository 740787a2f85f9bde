#pragma once
// A minimal HTTP/1.1 server for one Prometheus endpoint: GET (or HEAD) `path` answers 200 with render()'s
// text (Content-Type text/plain; version=0.0.4), any other path 404, any other method 405; every response
// closes its connection. One thread with a normal stack serves connections one at a time, each with a 5 s
// deadline, so a stuck client delays the next scrape by at most that.
//
// Why not prometheus::Exposer: civetweb (Debian's build) starts its threads with 100 KiB stacks, and glibc
// carves static TLS out of them; in the chaosbed binary glog and OpenBLAS alone take ~90 KiB of TLS, and
// civetweb's threads overflow their stacks at start (SIGSEGV). This server has no such limit.
//
// render() is called on the server thread, once per request; it must be thread-safe with respect to its
// callers' updates. The destructor stops the thread and closes the socket.

#include <functional>
#include <memory>
#include <string>

#include "transports/status.h"

namespace chaosbed {

class HttpMetricsServer {
 public:
  // Binds listen ("host:port"; port 0 = a free port; host a name, IPv4 or [IPv6]) and starts serving.
  // InvalidArgument for a malformed address, Unavailable when it cannot be bound.
  static Result<std::unique_ptr<HttpMetricsServer>> start(const std::string& listen, const std::string& path,
                                                          std::function<std::string()> render);
  ~HttpMetricsServer();
  HttpMetricsServer(const HttpMetricsServer&) = delete;
  HttpMetricsServer& operator=(const HttpMetricsServer&) = delete;

  // "host:port" actually bound (the port resolved when 0 was asked for).
  const std::string& address() const;

  class Impl;

 private:
  explicit HttpMetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Splits "host:port" ("[v6]:port" too) and checks the port is a number 0..65535; errors name the address.
Status parseHostPort(const std::string& address, std::string* host, int* port);

}  // namespace chaosbed
