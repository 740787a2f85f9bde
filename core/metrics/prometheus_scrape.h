#pragma once
// Reading a Prometheus endpoint back: a minimal HTTP/1.1 GET (and the PUT of a Pushgateway push; plain TCP,
// no TLS, no redirects) with a deadline, and a parser of the text exposition format (version 0.0.4). Used by the tests, the metrics
// benchmark and anything that checks what an exporter really serves. Not a general HTTP client.

#include <map>
#include <string>
#include <vector>

#include "transports/base/status.h"
#include "transports/transport.h"

namespace chaosbed {

// GET http://host_port/path; returns the body of a 200 response. host_port is "host:port" (IPv4 or a
// resolvable name). Errors: InvalidArgument for a bad address, Timeout past the deadline, Unavailable for
// connection failures, IoError for a non-200 status or a malformed response (the message says which).
Result<std::string> httpGet(const std::string& host_port, const std::string& path, Deadline deadline);
// PUT `body` to http://host_port/path; the response body of any 2xx status. Errors as for httpGet.
Result<std::string> httpPut(const std::string& host_port, const std::string& path, const std::string& content_type,
                            const std::string& body, Deadline deadline);

struct MetricSample {
  std::string name;                           // as exposed, e.g. "chaosbed_step_duration_seconds_bucket"
  std::map<std::string, std::string> labels;  // unescaped values
  double value = 0;
};

struct Exposition {
  std::vector<MetricSample> samples;
  std::map<std::string, std::string> types;  // family name -> counter|gauge|histogram|summary|untyped

  // Samples named `name` whose labels include every pair of `match`.
  std::vector<MetricSample> find(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
  // The one sample matching, or NotFound (naming it) when there is none, InvalidArgument when several.
  Result<double> value(const std::string& name, const std::map<std::string, std::string>& match = {}) const;
};

// Parses the text format; errors name the line ("line 12: ...").
Result<Exposition> parseExposition(const std::string& text);

}  // namespace chaosbed
