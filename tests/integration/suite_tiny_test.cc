// End to end: `chaosbed suite` on the tiny synthetic scenario, as a nightly CI runs it: exit codes, the
// JUnit file (parsed by an independent XML parser, Python's xml.etree, when Debian's python3 is present),
// report.html in each scenario's results, and `chaosbed report` regenerating it.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chaosbed/config.h"
#include "tests/testing/command.h"

namespace chaosbed {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

using testing::readFile;

std::string tinySpec() { return std::string(CHAOSBED_SOURCE_DIR) + "/experiments/scenarios/tiny-synthetic.yaml"; }

TEST(SuiteEndToEnd, TinySyntheticPassingAndFailingAssertionsGiveJunitAndExitCodes) {
  const std::string dir = testing::makeTempDir("suite");
  ASSERT_FALSE(dir.empty());
  // One assertion that must hold, one that cannot (TTA below 1 ms), and a ratio.
  std::ofstream(dir + "/suite.yaml") << "apiVersion: chaosbed/v1alpha1\nkind: Suite\nmetadata: {name: e2e}\n"
                                        "scenarios:\n  - spec: " << tinySpec() << "\n    name: tiny\n    assert:\n"
                                        "      - reached_target\n      - tta_seconds < 0.001\n"
                                        "      - tta_seconds[parameter_server] / tta_seconds[mirrored] < 1000\n";
  testing::Command run({testing::chaosbedBinary(), "suite", dir + "/suite.yaml", "--junit=" + dir + "/junit.xml",
                        "--out=" + dir + "/out", "--metrics_addr=127.0.0.1:0"});
  auto code = run.wait(deadlineIn(240s));
  ASSERT_TRUE(code.has_value()) << "suite did not finish in 240 s:\n" << run.output();
  ASSERT_EQ(*code, 1) << "one assertion is impossible, so the suite must fail with 1:\n" << run.output();

  const std::string xml = readFile(dir + "/junit.xml");
  ASSERT_FALSE(xml.empty()) << run.output();
  // reached_target x 2 strategies, tta < 0.001 x 2, the ratio: 5 cases, 2 failures (unless run itself broke).
  EXPECT_NE(xml.find("<testsuites name=\"e2e\" tests=\"5\" failures=\"2\" errors=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("expected tta_seconds &lt; 0.001"), std::string::npos) << xml;

  if (fs::exists("/usr/bin/python3")) {
    std::ofstream(dir + "/check.py")
        << "import sys, xml.etree.ElementTree as ET\n"
           "root = ET.parse(sys.argv[1]).getroot()\n"
           "assert root.tag == 'testsuites', root.tag\n"
           "suites = root.findall('testsuite')\n"
           "assert len(suites) == 1\n"
           "cases = suites[0].findall('testcase')\n"
           "assert len(cases) == int(suites[0].get('tests')) == 5\n"
           "fails = [c for c in cases if c.find('failure') is not None]\n"
           "assert len(fails) == 2, [c.get('name') for c in fails]\n"
           "assert all('measured' in c.find('failure').get('message') for c in fails)\n"
           "print('junit ok')\n";
    testing::Command check({"/usr/bin/python3", dir + "/check.py", dir + "/junit.xml"});
    auto rc = check.wait(deadlineIn(30s));
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(*rc, 0) << check.output();
  }

  // The scenario's results directory has a report with one series per strategy.
  const std::string results = dir + "/out/tiny";
  const std::string html = readFile(results + "/report.html");
  ASSERT_FALSE(html.empty()) << "no report.html in " << results;
  EXPECT_NE(html.find("<polyline class=\"series\" data-strategy=\"mirrored\""), std::string::npos);
  EXPECT_NE(html.find("<polyline class=\"series\" data-strategy=\"parameter_server\""), std::string::npos);
  EXPECT_NE(html.find("data-kind=\"pause\""), std::string::npos) << "the 2 s pause should be shaded";

  // `chaosbed report DIR` regenerates it.
  fs::remove(results + "/report.html");
  testing::Command report({testing::chaosbedBinary(), "report", results});
  auto rc = report.wait(deadlineIn(30s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 0) << report.output();
  EXPECT_EQ(readFile(results + "/report.html"), html);

  // A passing suite exits 0; an invalid one exits 3 with file:line:col.
  std::ofstream(dir + "/bad.yaml") << "apiVersion: chaosbed/v1alpha1\nkind: Suite\nmetadata: {name: bad}\n"
                                      "scenarios:\n  - spec: " << tinySpec() << "\n    assert: [tta_second < 1]\n";
  testing::Command bad({testing::chaosbedBinary(), "suite", dir + "/bad.yaml"});
  rc = bad.wait(deadlineIn(30s));
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(*rc, 3) << bad.output();
  EXPECT_NE(bad.output().find(dir + "/bad.yaml:6:14: scenarios[0].assert[0]: unknown metric 'tta_second'"),
            std::string::npos) << bad.output();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace chaosbed
