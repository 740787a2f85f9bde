// Decoders of values read from the store (untrusted input): each malformed input is rejected with a
// Status naming the field, and none throws.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/config/json_fields.h"
#include "core/metrics/accounting.h"
#include "core/runtime/control.h"
#include "core/runtime/link_command.h"

namespace chaosbed {
namespace {

using config::JsonFields;
using config::parseJson;

// Runs decode(text), which must not throw, and expects InvalidArgument mentioning `field`.
template <class Decode>
void expectRejected(Decode decode, const std::string& text, const std::string& field) {
  Status s;
  EXPECT_NO_THROW(s = decode(text).status()) << text;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text << " -> " << s.toString();
  EXPECT_NE(s.message().find(field), std::string::npos) << text << " -> " << s.toString();
}

// ------------------------------------------------------------------------------------------- JsonFields

TEST(ParseJson, RejectsSyntaxErrorsAndOversizedTexts) {
  EXPECT_TRUE(parseJson("{\"a\": 1}", "x").isOk());
  EXPECT_EQ(parseJson("{\"a\": ", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parseJson("", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parseJson("[1, 2, 3]", "x", 4).status().code(), StatusCode::kInvalidArgument);
  // Invalid UTF-8 inside a string: refused by the parser, so nothing downstream can throw on dump().
  EXPECT_EQ(parseJson("\"\xff\xfe\"", "x").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parseJson("nope", "membership/3").status().message().find("membership/3"), std::string::npos);
}

TEST(JsonFields, ChecksTypesRangesAndFiniteness) {
  auto j = parseJson(R"({"i": 5, "neg": -3, "f": 2.5, "null": null, "s": "abc", "b": true,
                         "u": 18446744073709551615, "arr": [1, 2, "x"], "obj": {"k": 1}})", "t");
  ASSERT_TRUE(j.isOk()) << j.status().toString();
  // The parser refuses 1e999 and NaN, but a json built in memory can hold them: checked all the same.
  (*j)["big"] = std::numeric_limits<double>::infinity();
  (*j)["nan"] = std::nan("");
  EXPECT_EQ(parseJson("[1e999]", "t").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parseJson("[NaN]", "t").status().code(), StatusCode::kInvalidArgument);
  {
    JsonFields f(*j, "t");
    EXPECT_EQ(f.integer("i", 0, 10), 5);
    EXPECT_EQ(f.integer("missing", 0, 10, 7), 7);  // absent: the fallback
    EXPECT_DOUBLE_EQ(f.number("f", 0, 10), 2.5);
    EXPECT_DOUBLE_EQ(f.number("i", 0, 10), 5.0);  // an integer is a number
    EXPECT_EQ(f.string("s", 8), "abc");
    EXPECT_TRUE(f.boolean("b"));
    EXPECT_EQ(f.object("obj").integer("k", 0, 1), 1);
    EXPECT_TRUE(f.status().isOk()) << f.status().toString();
  }
  struct Case {
    std::function<void(JsonFields&)> read;
    std::string field;
  };
  const std::vector<Case> bad = {
      {[](JsonFields& f) { (void)f.integer("null", 0, 10, 0); }, "null: expected an integer, got null"},
      {[](JsonFields& f) { (void)f.number("null", 0, 10, 0.0); }, "null: expected a number, got null"},
      {[](JsonFields& f) { (void)f.integer("f", 0, 10); }, "f: expected an integer"},
      {[](JsonFields& f) { (void)f.integer("i", 0, 4); }, "i: must be in [0, 4]"},
      {[](JsonFields& f) { (void)f.integer("neg", 0, 10); }, "neg: must be in"},
      {[](JsonFields& f) { (void)f.integer("u", 0, std::numeric_limits<int64_t>::max()); }, "u: must be in"},
      {[](JsonFields& f) { (void)f.number("big", 0, 1e300); }, "big: must be finite"},
      {[](JsonFields& f) { (void)f.number("nan", 0, 1e300); }, "nan: must be finite"},
      {[](JsonFields& f) { f.object("obj").error("", "cross-field"); }, "t: obj: cross-field"},
      {[](JsonFields& f) { f.object("obj").error("k", "cross-field"); }, "t: obj.k: cross-field"},
      {[](JsonFields& f) { (void)f.number("s", 0, 1); }, "s: expected a number, got string"},
      {[](JsonFields& f) { (void)f.string("i", 8); }, "i: expected a string"},
      {[](JsonFields& f) { (void)f.string("s", 2); }, "s: longer than 2 bytes"},
      {[](JsonFields& f) { (void)f.boolean("s"); }, "s: expected a boolean"},
      {[](JsonFields& f) { (void)f.integer("missing", 0, 1); }, "missing: missing"},
      {[](JsonFields& f) { (void)f.integers("arr", 0, 10, 8); }, "arr[2]: expected an integer, got string"},
      {[](JsonFields& f) { (void)f.integers("arr", 0, 10, 2); }, "arr: more than 2 items"},
      {[](JsonFields& f) { (void)f.strings("arr", 8, 8); }, "arr[0]: expected a string"},
      {[](JsonFields& f) { (void)f.numbers("s", 0, 1, 8); }, "s: expected an array"},
      {[](JsonFields& f) { (void)f.object("i").integer("k", 0, 1); }, "i: expected an object"},
      {[](JsonFields& f) { (void)f.object("obj").integer("k", 2, 3); }, "obj.k: must be in"},
  };
  for (const Case& c : bad) {
    JsonFields f(*j, "t");
    EXPECT_NO_THROW(c.read(f));
    EXPECT_FALSE(f.ok());
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(c.field), std::string::npos) << f.status().message();
  }
}

TEST(JsonFields, KeepsTheFirstProblemAndReadsNonObjectsAsErrors) {
  auto j = parseJson(R"({"a": "x", "b": "y"})", "t");
  ASSERT_TRUE(j.isOk());
  JsonFields f(*j, "t");
  EXPECT_EQ(f.integer("a", 0, 1, 9), 9);  // a bad field reads as the fallback
  (void)f.integer("b", 0, 1, 9);
  EXPECT_EQ(f.status().message(), "t: a: expected an integer, got string");

  for (const char* text : {"[]", "3", "null", "\"s\""}) {
    auto v = parseJson(text, "t");
    ASSERT_TRUE(v.isOk());
    JsonFields g(*v, "t");
    EXPECT_EQ(g.integer("a", 0, 1, 0), 0);
    EXPECT_NE(g.status().message().find("expected an object"), std::string::npos) << text;
  }
}

TEST(JsonFields, ExcerptEscapesControlBytesAndTruncates) {
  EXPECT_EQ(config::excerpt("a\nb\x01"), "a\\x0ab\\x01");
  EXPECT_EQ(config::excerpt(std::string(10, 'x'), 4), "xxxx...");
}

// ------------------------------------------------------------------------------------------ link commands

TEST(LinkCommand, RoundTrips) {
  LinkCommand set{.op = LinkCommand::Op::kSet, .peers = {"worker-1", "ps-0"}, .bandwidth_mbps = 100.0, .latency_ms = 25.5};
  auto d = decodeLinkCommand(encodeLinkCommand(set));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(*d, set);
  LinkCommand clear{.op = LinkCommand::Op::kClear, .peers = {"worker-1"}};
  d = decodeLinkCommand(encodeLinkCommand(clear));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(*d, clear);
  // Optional shaping fields default to "none".
  d = decodeLinkCommand(R"({"op": "set", "peers": [], "partition": true})");
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_TRUE(d->partition);
  EXPECT_EQ(d->latency_ms, 0);
  EXPECT_EQ(d->bandwidth_mbps, 0);
}

TEST(LinkCommand, TransportErrorCommandsRoundTripAndAreChecked) {
  LinkCommand error;
  error.op = LinkCommand::Op::kError;
  error.peers = {"worker-1"};
  error.fault = 3;
  error.incarnation = 2;
  error.error = "fail_send";
  error.nth = 5;
  error.count = 2;
  auto d = decodeLinkCommand(encodeLinkCommand(error));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(*d, error);
  LinkCommand clear;
  clear.op = LinkCommand::Op::kClearErrors;
  clear.fault = 3;
  d = decodeLinkCommand(encodeLinkCommand(clear));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(*d, clear);
  auto decode = [](const std::string& t) { return decodeLinkCommand(t); };
  expectRejected(decode, R"({"op": "error", "fault": 1, "incarnation": 0, "error": "explode"})", "error: not one of");
  expectRejected(decode, R"({"op": "error", "fault": 1, "incarnation": 0, "error": "drop", "nth": 0})", "nth: must be in");
  expectRejected(decode, R"({"op": "error", "incarnation": 0, "error": "drop"})", "fault: missing");
  expectRejected(decode, R"({"op": "error", "fault": -1, "incarnation": 0, "error": "drop"})", "fault: must be in");
  expectRejected(decode, R"({"op": "error", "fault": 1, "error": "drop"})", "incarnation: missing");
}

TEST(LinkCommand, RejectsMalformedCommandsWithoutThrowing) {
  auto decode = [](const std::string& t) { return decodeLinkCommand(t); };
  expectRejected(decode, R"({"op": "set", "peers": ["worker-1"], "latency_ms": null})", "latency_ms");
  expectRejected(decode, R"({"op": "set", "peers": [1]})", "peers[0]");
  expectRejected(decode, R"({"op": "set", "peers": ["worker-1", null]})", "peers[1]");
  expectRejected(decode, R"({"op": "set", "peers": "worker-1"})", "peers: expected an array");
  expectRejected(decode, R"({"op": "set", "peers": {"a": 1}})", "peers: expected an array");
  expectRejected(decode, R"({"op": "set"})", "peers: missing");
  expectRejected(decode, R"({"peers": []})", "op: missing");
  expectRejected(decode, R"({"op": "explode", "peers": []})", "op: expected \"set\", \"clear\", \"error\" or \"clear_errors\"");
  expectRejected(decode, R"({"op": 1, "peers": []})", "op: expected a string");
  expectRejected(decode, R"({"op": "set", "peers": [], "latency_ms": "10"})", "latency_ms: expected a number");
  expectRejected(decode, R"({"op": "set", "peers": [], "latency_ms": -1})", "latency_ms: must be in");
  expectRejected(decode, R"({"op": "set", "peers": [], "latency_ms": 1e999})", "link command");
  expectRejected(decode, R"({"op": "set", "peers": [], "latency_ms": NaN})", "link command");
  expectRejected(decode, R"({"op": "set", "peers": [], "latency_ms": 1e300})", "latency_ms: must be in");
  expectRejected(decode, R"({"op": "set", "peers": [], "bandwidth_mbps": 1e-300})", "bandwidth_mbps");
  expectRejected(decode, R"({"op": "set", "peers": [], "bandwidth_mbps": -5})", "bandwidth_mbps");
  expectRejected(decode, R"({"op": "set", "peers": [], "partition": 1})", "partition: expected a boolean");
  expectRejected(decode, R"({"op": "clear", "peers": [], "latency_ms": null})", "latency_ms");
  expectRejected(decode, R"(["op", "set"])", "expected an object");
  expectRejected(decode, "not json", "not JSON");
  expectRejected(decode, R"({"op": "set", "peers": [")" + std::string(kMaxNodeNameBytes + 1, 'w') + R"("]})",
                 "peers[0]: longer than");
  std::string many = R"({"op": "set", "peers": [)";
  for (size_t i = 0; i <= kMaxLinkPeers; ++i) many += (i ? ",\"w\"" : "\"w\"");
  expectRejected(decode, many + "]}", "peers: more than");
  expectRejected(decode, std::string(kMaxLinkCommandBytes + 1, ' '), "bytes, more than");
}

TEST(LinkAck, AppliedRejectedAndMalformed) {
  EXPECT_EQ(encodeLinkAck(Status::ok()), "1");
  EXPECT_TRUE(decodeLinkAck(encodeLinkAck(Status::ok())).isOk());
  const std::string rejected = encodeLinkAck(Status::invalidArgument("link command: latency_ms: null\nsecond line"));
  EXPECT_EQ(rejected.rfind("rejected: ", 0), 0u) << rejected;
  EXPECT_EQ(rejected.find('\n'), std::string::npos) << "one line";
  Status s = decodeLinkAck(rejected);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("latency_ms"), std::string::npos) << s.toString();
  EXPECT_LE(encodeLinkAck(Status::internal(std::string(10000, 'x'))).size(), kMaxAckReason + 20);
  EXPECT_EQ(decodeLinkAck("").code(), StatusCode::kDataLoss);
  EXPECT_EQ(decodeLinkAck("yes").code(), StatusCode::kDataLoss);
  EXPECT_EQ(decodeLinkAck("11").code(), StatusCode::kDataLoss);
}

// ------------------------------------------------------------------------------------------- membership

TEST(MembershipDecode, RoundTripsAValidMembership) {
  Membership m;
  m.generation = 3;
  m.workers = {0, 2, 3};
  m.rollback = true;
  m.joined = {3, 2};
  m.incarnations = {0, 4, 1};
  auto d = Membership::decode(m.toJson().dump(), 4);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->generation, 3);
  EXPECT_EQ(d->workers, m.workers);
  EXPECT_TRUE(d->rollback);
  EXPECT_EQ(d->joined, m.joined);
  EXPECT_EQ(d->incarnations, m.incarnations);
  EXPECT_EQ(d->incarnationOf(2), 4);
  EXPECT_EQ(d->incarnationOf(1), std::nullopt);
  // rollback, joined and incarnations are optional: without incarnations every member is a first one.
  d = Membership::decode(R"({"generation": 0, "workers": [0]})", 1);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_FALSE(d->rollback);
  EXPECT_TRUE(d->joined.empty());
  EXPECT_EQ(d->incarnationOf(0), 0);
}

TEST(MembershipDecode, RejectsMalformedMemberships) {
  auto decode = [](const std::string& t) { return Membership::decode(t, 4); };
  expectRejected(decode, R"({"generation": -1, "workers": [0]})", "generation: must be in");
  expectRejected(decode, R"({"generation": "1", "workers": [0]})", "generation: expected an integer");
  expectRejected(decode, R"({"generation": 1.5, "workers": [0]})", "generation: expected an integer");
  expectRejected(decode, R"({"generation": null, "workers": [0]})", "generation");
  expectRejected(decode, R"({"generation": 9223372036854775808, "workers": [0]})", "generation: must be in");
  expectRejected(decode, R"({"workers": [0]})", "generation: missing");
  expectRejected(decode, R"({"generation": 1})", "workers: missing");
  expectRejected(decode, R"({"generation": 1, "workers": []})", "workers: empty");
  expectRejected(decode, R"({"generation": 1, "workers": [1, 0]})", "workers: not strictly increasing");
  expectRejected(decode, R"({"generation": 1, "workers": [0, 0]})", "workers: not strictly increasing");
  expectRejected(decode, R"({"generation": 1, "workers": [0, 4]})", "workers[1]: must be in [0, 3]");
  expectRejected(decode, R"({"generation": 1, "workers": [-1]})", "workers[0]: must be in");
  expectRejected(decode, R"({"generation": 1, "workers": [0, "1"]})", "workers[1]: expected an integer");
  expectRejected(decode, R"({"generation": 1, "workers": 0})", "workers: expected an array");
  expectRejected(decode, R"({"generation": 1, "workers": [0], "rollback": "yes"})", "rollback");
  expectRejected(decode, R"({"generation": 1, "workers": [0], "joined": [1]})", "joined: rank 1 is not among");
  expectRejected(decode, R"({"generation": 1, "workers": [0, 1], "joined": [1, 1]})", "joined: rank 1 listed twice");
  expectRejected(decode, R"({"generation": 1, "workers": [0], "joined": null})", "joined");
  expectRejected(decode, R"({"generation": 1, "workers": [0, 1], "incarnations": [0]})", "incarnations: 1 entries for 2");
  expectRejected(decode, R"({"generation": 1, "workers": [0], "incarnations": [-1]})", "incarnations[0]: must be in");
  expectRejected(decode, R"({"generation": 1, "workers": [0], "incarnations": [0.5]})", "incarnations[0]: expected an");
  expectRejected(decode, "[0, 1]", "expected an object");
  expectRejected(decode, "{", "not JSON");
  // Without a world size only the lower bound holds.
  EXPECT_TRUE(Membership::decode(R"({"generation": 1, "workers": [0, 40]})").isOk());
}

// ------------------------------------------------------------------------------------------- start time

TEST(StartTime, ParsesOnlyAPositiveDecimal) {
  auto ok = parseStartNs("1700000000123456789");
  ASSERT_TRUE(ok.isOk());
  EXPECT_EQ(*ok, 1700000000123456789);
  auto decode = [](const std::string& t) { return parseStartNs(t); };
  for (const char* bad : {"", "abc", "12abc", " 12", "12 ", "+12", "-12", "0", "1.5", "99999999999999999999999"})
    expectRejected(decode, bad, "start");
}

// ---------------------------------------------------------------------------------------------- stats

TEST(NodeStatsDecode, RoundTripsAReport) {
  Accounting a;
  a.add(TimeCategory::kCompute, 1.5);
  a.add(TimeCategory::kIdlePeer, 0.25);
  a.step(32, 0.01);
  a.step(32, 0.2);
  a.staleness(3);
  a.recovery(2.0);
  a.checkpoint(true);
  a.rollback(64);
  const NodeStats s = a.snapshot();
  // The process's own peak resident set: this test binary holds at least a few MB.
  EXPECT_GT(s.peak_rss_bytes, int64_t{1} << 20);
  auto d = NodeStats::decode(s.toJson().dump());
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->toJson(), s.toJson());
  // Merged, the peak is the largest node's, not a sum.
  NodeStats bigger;
  bigger.peak_rss_bytes = s.peak_rss_bytes + 1;
  NodeStats merged = s;
  merged.merge(bigger);
  merged.merge(s);
  EXPECT_EQ(merged.peak_rss_bytes, s.peak_rss_bytes + 1);
  // Absent fields read as zero.
  d = NodeStats::decode("{}");
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->steps, 0);
}

TEST(NodeStatsDecode, RejectsNegativeNonFiniteAndMistypedValues) {
  auto decode = [](const std::string& t) { return NodeStats::decode(t); };
  expectRejected(decode, R"({"steps": -1})", "steps: must be in");
  expectRejected(decode, R"({"steps": 1.5})", "steps: expected an integer");
  expectRejected(decode, R"({"steps": "10"})", "steps: expected an integer");
  expectRejected(decode, R"({"samples": 18446744073709551615})", "samples: must be in");
  expectRejected(decode, R"({"recoveries": null})", "recoveries");
  expectRejected(decode, R"({"seconds": {"compute": -0.5}})", "seconds.compute: must be in");
  expectRejected(decode, R"({"seconds": {"compute": 1e999}})", "stats report");
  expectRejected(decode, R"({"seconds": {"compute": 1e300}})", "seconds.compute: must be in");
  expectRejected(decode, R"({"seconds": {"peer": null}})", "seconds.peer");
  expectRejected(decode, R"({"seconds": [1, 2]})", "seconds: expected an object");
  expectRejected(decode, R"({"step_seconds": 3})", "step_seconds: expected an object");
  expectRejected(decode, R"({"step_seconds": {"bounds": [1, 2], "counts": [1, 2], "sum": 1, "count": 2}})",
                 "step_seconds.counts: 2 entries for 2 bounds");
  expectRejected(decode, R"({"step_seconds": {"bounds": [2, 1], "counts": [0, 0, 0], "sum": 0, "count": 0}})",
                 "step_seconds.bounds: not strictly increasing");
  expectRejected(decode, R"({"step_seconds": {"bounds": [1], "counts": [2, 1], "sum": 1, "count": 1}})",
                 "step_seconds.counts: not cumulative");
  expectRejected(decode, R"({"step_seconds": {"bounds": [1], "counts": [1, 1], "sum": 1, "count": 5}})",
                 "is not count");
  expectRejected(decode, R"({"step_seconds": {"bounds": [1], "counts": [0, 1], "sum": -1, "count": 1}})",
                 "step_seconds.sum: must be in");
  expectRejected(decode, R"({"staleness": {"bounds": [1], "counts": [0, -1], "sum": 1, "count": 1}})",
                 "staleness.counts[1]: must be in");
  expectRejected(decode, R"({"staleness": {"bounds": [1], "counts": [0, 1], "count": 1}})", "staleness.sum: missing");
  expectRejected(decode, "[]", "expected an object");
  expectRejected(decode, "{\"steps\":", "not JSON");
}

TEST(HistogramDecode, RoundTripsAndRejects) {
  Histogram h = stepSecondsHistogram();
  h.observe(0.003);
  h.observe(7);
  auto d = Histogram::fromJson(h.toJson());
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->toJson(), h.toJson());
  nlohmann::json bad = h.toJson();
  bad["counts"] = nlohmann::json::array({1});
  EXPECT_EQ(Histogram::fromJson(bad).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace chaosbed
