// Node events (core/runtime/events.h): what a node writes, the controller reads back unchanged, the shape
// of each type told apart; and what a node (or anyone who can write the store) writes malformed is refused
// with a Status naming the field, never thrown.

#include "core/runtime/events.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <variant>

namespace chaosbed::events {
namespace {

NodeEvent from(NodePayload e) { return NodeEvent{"worker-1", 2, 3.5, std::move(e)}; }

// Written, then read back: the same line, of the same alternative.
void expectRoundTrip(const NodePayload& e) {
  const NodeEvent sent = from(e);
  const std::string line = toJson(sent).dump();
  Result<NodeEvent> back = decodeNodeEvent(line);
  ASSERT_TRUE(back.isOk()) << line << " -> " << back.status().toString();
  EXPECT_EQ(back->what.index(), e.index()) << line;
  EXPECT_EQ(back->node, "worker-1");
  EXPECT_EQ(back->incarnation, 2);
  EXPECT_EQ(back->t, 3.5);
  EXPECT_EQ(toJson(*back).dump(), line);
}

TEST(NodeEvents, EveryShapeIsReadBackAsWrittenAndToldApartFromItsTwin) {
  expectRoundTrip(Eval{.snapshot_t = 1.25, .step = 40, .accuracy = 0.5, .loss = 0.7, .refined = true});
  expectRoundTrip(MirroredCheckpoint{.step = 7, .reason = "notice"});
  expectRoundTrip(ShardCheckpoint{.shard = 1, .version = 9});
  expectRoundTrip(MirroredCheckpointFailed{.step = 7, .error = "disk full"});
  expectRoundTrip(ShardCheckpointFailed{.shard = 0, .version = 3, .error = "disk full"});
  expectRoundTrip(ShardNoticeCheckpoint{.shard = 0, .version = 3, .saved = true, .error = ""});
  expectRoundTrip(ShardRestored{.shard = 0, .version = 3, .path = "/x/ckpt-3"});
  expectRoundTrip(MirroredRollback{.step = 5, .from_step = 9, .samples_lost = 128, .generation = 2});
  expectRoundTrip(MirroredRollback{.step = 5, .from_step = std::nullopt, .samples_lost = 0, .generation = 2});
  expectRoundTrip(ShardRollback{.shard = 1, .version = 3, .lost_updates = 4, .samples_lost = 64});
  expectRoundTrip(TotalLoss{.restored = true, .step = 5, .samples = 160, .generation = 3});
  expectRoundTrip(TotalLoss{.restored = false, .step = 0, .samples = 0, .generation = 3});
  expectRoundTrip(MirroredFailureDetected{.lost_rank = -1, .step = 5, .generation = 1, .reason = "r", .error = "e"});
  expectRoundTrip(PsWorkerFailureDetected{.lost = 0, .status = "Unavailable"});
  expectRoundTrip(MirroredRecovered{.seconds = 0.5, .generation = 1, .step = 6});
  expectRoundTrip(PsWorkerRecovered{.seconds = 0.5});
  expectRoundTrip(MembershipChanged{.generation = 2, .workers = {0, 2}, .joined = {2}, .step = 6, .seconds = 0.1});
  expectRoundTrip(MirroredLeftOnNotice{.step = 6, .generation = 1});
  expectRoundTrip(PsWorkerLeftOnNotice{.step = 6});
  expectRoundTrip(EmulationCalibrated{.compute_seconds = 0.01, .target_ratio = 3, .transfer_seconds = 0.03});
  expectRoundTrip(Error{.message = "boom"});
  expectRoundTrip(SimulatedReport{.seq = 4});
  expectRoundTrip(MembershipSeen{.generation = 4});
}

TEST(NodeEvents, ADivergedLossIsWrittenAsNullAndReadAsNaN) {
  const std::string line = toJson(from(Eval{.snapshot_t = 1, .step = 1, .accuracy = 0.1, .loss = std::nan("")})).dump();
  EXPECT_NE(line.find("\"loss\":null"), std::string::npos) << line;
  Result<NodeEvent> back = decodeNodeEvent(line);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  EXPECT_TRUE(std::isnan(std::get<Eval>(back->what).loss));
}

void expectRefused(const std::string& text, const std::string& field) {
  Status s;
  EXPECT_NO_THROW(s = decodeNodeEvent(text).status()) << text;
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << text << " -> " << s.toString();
  EXPECT_NE(s.message().find(field), std::string::npos) << text << " -> " << s.toString();
}

TEST(NodeEvents, MalformedEventsAreRefusedNamingTheField) {
  const std::string head = R"("node":"worker-0","incarnation":0,"t":1.0,)";
  expectRefused("not json", "event");
  expectRefused("[1,2]", "event");
  expectRefused("{" + head + R"("type":"no.such.event"})", "unknown type");
  expectRefused(R"({"incarnation":0,"t":1.0,"type":"error","message":"m"})", "node");
  expectRefused(R"({"node":"worker-0","incarnation":-1,"t":1.0,"type":"error","message":"m"})", "incarnation");
  expectRefused("{" + head + R"("type":"error"})", "message");
  expectRefused("{" + head + R"("type":"error","message":"m","extra":1})", "extra");
  expectRefused("{" + head + R"("type":"eval","snapshot_t":1,"step":1,"accuracy":1.5,"loss":0.1})", "accuracy");
  expectRefused("{" + head + R"("type":"eval","snapshot_t":1,"step":"1","accuracy":0.5,"loss":0.1})", "step");
  expectRefused("{" + head + R"("type":"eval","snapshot_t":1,"step":1.5,"accuracy":0.5,"loss":0.1})", "step");
  expectRefused("{" + head + R"("type":"checkpoint","shard":1})", "version");
  expectRefused("{" + head + R"("type":"checkpoint","shard":1,"version":2,"reason":"x"})", "reason");
  expectRefused("{" + head + R"("type":"membership_changed","generation":1,"workers":[0,-3],"joined":[],)" +
                    R"("step":1,"seconds":0})",
                "workers");
  expectRefused("{" + head + R"("type":"error","message":")" + std::string(20000, 'x') + R"("})", "message");
}

// A node's long text is shortened when written (at a UTF-8 boundary), never the reason its event is refused.
TEST(NodeEvents, ALongMessageIsClippedWhenWrittenAndReadBack) {
  // The cut (4093 bytes and "...") falls inside the first é (2 bytes at 4092-4093): it moves before it.
  const std::string long_text = std::string(4092, 'x') + "\u00e9\u00e9" + std::string(100, 'y');
  const std::string line = toJson(from(Error{.message = long_text})).dump();
  Result<NodeEvent> back = decodeNodeEvent(line);
  ASSERT_TRUE(back.isOk()) << back.status().toString();
  const std::string& message = std::get<Error>(back->what).message;
  EXPECT_EQ(message, std::string(4092, 'x') + "...");
}

}  // namespace
}  // namespace chaosbed::events
