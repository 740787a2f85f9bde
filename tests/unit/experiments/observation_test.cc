// observationAt: a row of timeseries.csv reports the workers' samples and the nodes alive at its snapshot's
// instant, from the controller's readings around it, not when the controller got to the evaluation.

#include <gtest/gtest.h>

#include "experiments/run/strategy_run.h"

namespace chaosbed::run {
namespace {

// Readings every 500 ms of workers making 1000 samples/s, with a node lost at 1.2 s.
const std::vector<Observation> kHistory = {{0.5, 500, 5}, {1.0, 1000, 5}, {1.5, 1500, 4}, {2.0, 2000, 4}};

TEST(ObservationAt, SamplesAreInterpolatedBetweenTheReadingsAroundTheInstant) {
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 0.75).samples, 750);
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 1.0).samples, 1000);
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 1.9).samples, 1900);
}

TEST(ObservationAt, ASnapshotReadLateIsNotGivenTheLaterReadings) {
  // Evaluations of snapshots at 0.6, 1.1 and 1.6 s all handled at 3.0 s (a burst): each keeps its own
  // instant's figures instead of three rows of the same samples (a false plateau).
  const Observation latest{3.0, 3000, 4};
  EXPECT_EQ(observationAt(kHistory, latest, 0.6).samples, 600);
  EXPECT_EQ(observationAt(kHistory, latest, 1.1).samples, 1100);
  EXPECT_EQ(observationAt(kHistory, latest, 1.6).samples, 1600);
}

TEST(ObservationAt, NodesAliveAreTheLastReadingAtOrBeforeTheInstant) {
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 1.2).alive, 5) << "the loss was seen at 1.5 s, not before";
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 1.5).alive, 4);
  EXPECT_EQ(observationAt(kHistory, {2.1, 2100, 4}, 0.2).alive, 5) << "before the first reading: the first";
}

TEST(ObservationAt, BeyondTheReadingsTheFreshestOneIsUsed) {
  EXPECT_EQ(observationAt(kHistory, {2.4, 2400, 3}, 2.2).samples, 2200) << "between the last tick and now";
  EXPECT_EQ(observationAt(kHistory, {2.4, 2400, 3}, 2.2).alive, 4);
  EXPECT_EQ(observationAt(kHistory, {2.4, 2400, 3}, 9.0).samples, 2400);
  EXPECT_EQ(observationAt({}, {2.4, 2400, 3}, 1.2).samples, 1200) << "no ticks yet: from 0 at time 0";
  EXPECT_EQ(observationAt(kHistory, {2.4, 2400, 3}, 0.25).samples, 250);
}

}  // namespace
}  // namespace chaosbed::run
