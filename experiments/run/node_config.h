#pragma once
// What the controller tells its nodes about training: the spec's training section and a strategy's options,
// in the types that core reads (written into each strategy's node-config.json).

#include "core/strategies/strategy.h"
#include "experiments/spec/spec.h"

namespace chaosbed::run {

// The strategy's recipe (spec::Recipe) and the shared rest of the spec's training.
TrainingConfig trainingConfig(const spec::ExperimentSpec& s, const spec::StrategySpec& strategy);
StrategyOptions strategyOptions(const spec::ExperimentSpec& s, const spec::StrategySpec& st);

}  // namespace chaosbed::run
