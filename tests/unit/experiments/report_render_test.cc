// report.html from a results directory the test writes: one series per strategy, fault bands from
// chaos.applied/chaos.reverted pairs, marks for kills, stacked idle bars, the escaped spec.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "experiments/report/report.h"

namespace chaosbed::report {
namespace {

namespace fs = std::filesystem;

size_t count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) ++n;
  return n;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json entry(const char* kind, double compute, double peer) {
  return {{"kind", kind},           {"tta_seconds", 12.5},      {"final_accuracy", 0.86},
          {"compute_seconds", compute}, {"transfer_seconds", 1.0}, {"idle_seconds", {{"peer", peer}, {"server", 0.5}, {"recovery", 2.0}}},
          {"idle_fraction", 0.2},   {"goodput_samples_per_s", 900}, {"recoveries", 1},
          {"recovery_seconds", {1.5}}, {"samples_lost", 64},      {"stop_reason", "target"}};
}

std::string writeResults() {
  const std::string dir = ::testing::TempDir() + "/report-" + std::to_string(::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json summary = {{"experiment", "demo"}, {"seed", 3}, {"target_accuracy", 0.85}, {"complete", true},
                            {"strategies", {{"mirrored", entry("mirrored", 20, 3)},
                                            {"parameter_server", entry("parameter_server", 25, 0)}}}};
  std::ofstream(dir + "/summary.json") << summary.dump();
  std::ofstream(dir + "/timeseries.csv") << "time_s,strategy,accuracy,loss,samples,alive_nodes\n"
                                            "1.0,mirrored,0.5,1.2,100,4\n2.0,mirrored,0.7,0.9,200,4\n"
                                            "3.0,mirrored,0.86,0.5,300,4\n1.0,parameter_server,0.6,1.0,120,5\n"
                                            "2.5,parameter_server,0.87,0.4,260,5\n";
  const int64_t s1 = 1'000'000'000'000, s2 = 2'000'000'000'000;
  std::ostringstream ev;
  ev << R"({"type":"run.start","strategy":"mirrored","start_ns":)" << s1 << "}\n"
     << R"({"type":"chaos.applied","fault_id":0,"kind":"pause","node":"worker-0","wall_ns":)" << s1 + 1'000'000'000 << "}\n"
     << R"({"type":"chaos.reverted","fault_id":0,"kind":"pause","node":"worker-0","wall_ns":)" << s1 + 2'000'000'000 << "}\n"
     << R"({"type":"chaos.applied","fault_id":1,"kind":"kill","node":"worker-1","wall_ns":)" << s1 + 2'500'000'000 << "}\n"
     << R"({"type":"node.exited","strategy":"mirrored","node":"worker-1","t":2.5})" << "\n"
     << R"({"type":"run.stop","strategy":"mirrored","t":3.2})" << "\n"
     << "not json\n"
     << R"({"type":"run.start","strategy":"parameter_server","start_ns":)" << s2 << "}\n"
     << R"({"type":"chaos.applied","fault_id":0,"kind":"pause","node":"worker-0","wall_ns":)" << s2 + 1'000'000'000 << "}\n"
     << R"({"type":"run.stop","strategy":"parameter_server","t":2.6})" << "\n";
  std::ofstream(dir + "/events.jsonl") << ev.str();
  std::ofstream(dir + "/spec.yaml") << "metadata: {name: demo, description: \"<script>alert(1)</script> & co\"}\n";
  return dir;
}

TEST(Report, FaultBandsPairAppliedAndRevertedPerStrategy) {
  const std::string dir = writeResults();
  auto bands = faultBandsFromEvents(readFile(dir + "/events.jsonl"));
  ASSERT_EQ(bands.size(), 4u);
  EXPECT_EQ(bands[0].strategy, "mirrored");
  EXPECT_EQ(bands[0].kind, "pause");
  EXPECT_DOUBLE_EQ(bands[0].start_s, 1.0);
  EXPECT_DOUBLE_EQ(bands[0].end_s, 2.0);
  EXPECT_EQ(bands[1].kind, "kill");
  EXPECT_DOUBLE_EQ(bands[1].start_s, bands[1].end_s);
  EXPECT_EQ(bands[2].kind, "node.exited");
  // Never reverted: the band ends when its strategy stopped.
  EXPECT_EQ(bands[3].strategy, "parameter_server");
  EXPECT_DOUBLE_EQ(bands[3].start_s, 1.0);
  EXPECT_DOUBLE_EQ(bands[3].end_s, 2.6);
  fs::remove_all(dir);
}

TEST(Report, ContainsOneSeriesPerStrategyBandsBarsTableAndEscapedSpec) {
  const std::string dir = writeResults();
  ASSERT_TRUE(writeReport(dir).isOk());
  const std::string html = readFile(dir + "/report.html");
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(html, "<polyline class=\"series\""), 2u);
  EXPECT_EQ(count(html, "<polyline class=\"series\" data-strategy=\"mirrored\""), 1u);
  EXPECT_EQ(count(html, "<polyline class=\"series\" data-strategy=\"parameter_server\""), 1u);
  // mirrored has 3 evaluations: as a step line, each one's point, a riser to each later one, and the hold
  // of the last until the end of the run: 3 + 2 + 1 points.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(html, m, std::regex("data-strategy=\"mirrored\"[^>]*points=\"([^\"]*)\"")));
  EXPECT_EQ(count(m[1].str(), ","), 6u);
  EXPECT_EQ(count(html, "<rect class=\"fault\" data-kind=\"pause\""), 2u);
  EXPECT_EQ(count(html, "<line class=\"mark\" data-kind=\"kill\""), 1u);
  EXPECT_EQ(count(html, "<circle class=\"exit\""), 1u);
  EXPECT_EQ(count(html, "class=\"target\""), 1u);
  for (const char* part : {"compute", "transfer", "idle_peer", "idle_server", "idle_recovery"})
    EXPECT_EQ(count(html, std::string("data-part=\"") + part + "\""), 2u) << part;
  EXPECT_NE(html.find("<table class=\"summary\">"), std::string::npos);
  EXPECT_NE(html.find("12.5"), std::string::npos);
  // The spec is shown escaped: no live markup from it.
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt; &amp; co"), std::string::npos);
  // Self-contained: nothing fetched.
  EXPECT_EQ(count(html, "http://"), count(html, "http://www.w3.org/2000/svg"));
  EXPECT_EQ(html.find("https://"), std::string::npos);
  fs::remove_all(dir);
}

// The value of attribute `name` in the first element of `tag` whose attributes include `with` ("" if none).
std::string attrOf(const std::string& html, const std::string& tag, const std::string& with, const std::string& name) {
  std::regex element("<" + tag + "\\b[^>]*>");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), element); it != std::sregex_iterator(); ++it) {
    const std::string e = it->str();
    if (e.find(with) == std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(e, m, std::regex(" " + name + "=\"([^\"]*)\""))) return m[1];
  }
  return "";
}

// The accuracy line holds each evaluation until the next: it never reaches the target before the reported
// TTA, every evaluation has a marker, and each strategy that reached the target has a TTA marker there.
TEST(Report, TheAccuracyLineNeverReachesTheTargetBeforeTheTta) {
  const std::string dir = writeResults();
  auto input = loadReportInput(dir);
  ASSERT_TRUE(input.isOk()) << input.status().toString();
  // The summary's TTA as the timeseries has it: the first evaluation at or above the target.
  input->summary["strategies"]["mirrored"]["tta_seconds"] = 3.0;
  input->summary["strategies"]["parameter_server"]["tta_seconds"] = 2.5;
  const std::string html = renderReport(*input);
  const double target_y = std::stod(attrOf(html, "line", "class=\"target\"", "y1"));
  for (const std::string label : {"mirrored", "parameter_server"}) {
    SCOPED_TRACE(label);
    const std::string strategy = "data-strategy=\"" + label + "\"";
    const std::string points = attrOf(html, "polyline", strategy, "points");
    ASSERT_FALSE(points.empty());
    const double tta_x = std::stod(attrOf(html, "line", "class=\"tta\" " + strategy, "x1"));
    std::istringstream in(points);
    std::string xy;
    double prev_x = -1;
    while (in >> xy) {
      const double px = std::stod(xy.substr(0, xy.find(','))), py = std::stod(xy.substr(xy.find(',') + 1));
      EXPECT_GE(px, prev_x) << "the line goes back in time";
      prev_x = px;
      if (py <= target_y) {
        EXPECT_GE(px, tta_x) << "at or above the target at x=" << px << ", before the TTA";
      }
    }
    size_t evals = 0;
    for (const auto& p : input->series) evals += p.strategy == label;
    EXPECT_EQ(count(html, "<circle class=\"eval\" " + strategy), evals);
  }
  // Strategies' colours are never fault colours.
  std::set<std::string> strokes, fills;
  std::regex stroke("class=\"series\"[^>]*stroke=\"(#[0-9a-f]{6})\""), fill("class=\"(?:fault|lane)\"[^>]*fill=\"(#[0-9a-f]{6})\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), stroke); it != std::sregex_iterator(); ++it)
    strokes.insert((*it)[1]);
  for (auto it = std::sregex_iterator(html.begin(), html.end(), fill); it != std::sregex_iterator(); ++it)
    fills.insert((*it)[1]);
  ASSERT_EQ(strokes.size(), 2u);
  ASSERT_FALSE(fills.empty());
  for (const auto& c : strokes) EXPECT_EQ(fills.count(c), 0u) << c << " is a strategy's and a fault's colour";
}

TEST(Report, MissingSummaryIsAnErrorNamingTheFileAndBadCsvNamesTheLine) {
  const std::string dir = ::testing::TempDir() + "/report-empty-" + std::to_string(::getpid());
  fs::create_directories(dir);
  Status s = writeReport(dir);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.toString().find(dir + "/summary.json"), std::string::npos) << s.toString();
  auto bad = parseTimeseries("time_s,strategy,accuracy\n1,m,0.5\nx,m,0.6\n", "ts.csv");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().toString().find("ts.csv:3: time_s is not a number: 'x'"), std::string::npos)
      << bad.status().toString();
  fs::remove_all(dir);
}

// Each node's lane: a cell per interval between its samples, split by the share of the interval each
// category took (heights add up to the lane), grey where it booked nothing; a call booked when it ended
// fills the cells before it; a node that never booked anything (the evaluator) has no lane.
TEST(Report, NodeTimeLanesSplitEachIntervalByWhatTheNodeBooked) {
  ReportInput in;
  in.summary = {{"strategies", {{"mirrored", entry("mirrored", 20, 3)}}}};
  auto sample = [](double t, const char* node, double compute, double peer, double paused) {
    NodeSeriesPoint p;
    p.time_s = t, p.strategy = "mirrored", p.node = node, p.wall_s = compute + peer + paused;
    p.seconds[0] = compute, p.seconds[3] = peer, p.seconds[6] = paused;
    return p;
  };
  // worker-0: 1 s of compute, then 0.25 compute + 0.75 peer; worker-1: nothing booked, then paused for 1 s;
  // worker-2: a 2 s collective booked as peer when it ended, in the second interval.
  in.node_series = {sample(0, "worker-0", 0, 0, 0), sample(1, "worker-0", 1, 0, 0), sample(2, "worker-0", 1.25, 0.75, 0),
                    sample(0, "worker-1", 0, 0, 0), sample(1, "worker-1", 0, 0, 0), sample(2, "worker-1", 0, 0, 1),
                    sample(0, "worker-2", 0, 0, 0), sample(1, "worker-2", 0, 0, 0), sample(2, "worker-2", 0, 2, 0),
                    sample(0, "evaluator-0", 0, 0, 0), sample(2, "evaluator-0", 0, 0, 0)};
  const std::string html = renderReport(in);
  std::regex cell(R"re(<rect class="nodetime" data-strategy="mirrored" data-node="([^"]+)" x="[^"]+" width="[^"]+" data-part="([^"]+)" y="[^"]+" height="([^"]+)")re");
  std::map<std::string, double> height;  // node/part -> summed height
  std::map<std::string, int> cells;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), cell); it != std::sregex_iterator(); ++it) {
    height[(*it)[1].str() + "/" + (*it)[2].str()] += std::stod((*it)[3].str());
    ++cells[(*it)[1].str()];
  }
  EXPECT_EQ(cells["worker-0"], 3);  // compute; compute + peer
  EXPECT_EQ(cells["worker-1"], 2);  // nothing; paused
  EXPECT_NEAR(height["worker-0/compute"], 16 + 4, 0.02);  // a whole lane, then a quarter of one
  EXPECT_NEAR(height["worker-0/peer"], 12, 0.02);
  EXPECT_NEAR(height["worker-1/none"], 16, 0.02);
  EXPECT_NEAR(height["worker-1/paused"], 16, 0.02);
  EXPECT_EQ(cells["worker-2"], 2);
  EXPECT_NEAR(height["worker-2/peer"], 32, 0.02);  // both intervals
  EXPECT_EQ(height.count("worker-2/none"), 0u);
  EXPECT_EQ(cells.count("evaluator-0"), 0u);
  EXPECT_NE(html.find("time (s)"), std::string::npos);

  auto bad = parseNodeTimeseries("h\n1,m,worker-0,1,1,0,0,0,0,0,0\n2,m,worker-0,2,x,0,0,0,0,0,0\n", "n.csv");
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().toString().find("n.csv:3: a time is not a finite number"), std::string::npos)
      << bad.status().toString();
  EXPECT_FALSE(parseNodeTimeseries("h\n1,m,worker-0,1\n", "n.csv").isOk());  // too few columns
}

}  // namespace
}  // namespace chaosbed::report
