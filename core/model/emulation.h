#pragma once
// Model emulation: a small real model that behaves, on the wire and on the clock, like a named large one on
// a named accelerator and network (`workload.emulate` in a spec; docs/design.md, "Model emulation").
//
// From public facts (parameter count, training FLOPs per sample, accelerator peak and a stated efficiency)
// plan() derives the real job's step: its gradient bytes and its compute time on one accelerator, and from
// the network's bandwidth the time its gradient spends on the wire per step, so the target ratio
//   R = wire time / compute time
// (ring all-reduce for mirrored: 2 (N-1)/N gradients through each worker's link; parameter server: a push
// and a pull). On this machine the gradient is padded to min(real bytes, the cap) so that the transport,
// the link shaper and the servers really carry it, and the worker's compute is stretched, off the CPU as a
// GPU-bound host's would be, to t / R, where t is the transfer time per step this worker measured over its
// first steps (EmulatedCompute). Accuracy still comes from the small real model.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "transports/base/status.h"

namespace chaosbed::model {

struct ModelProfile {
  std::string_view name;
  double parameters;              // trainable parameters
  double train_flops_per_sample;  // forward + backward, ~3x the forward FLOPs (2 per multiply-add)
  int default_batch;              // per accelerator
  std::string_view sample;        // what one sample is
};

struct AcceleratorProfile {
  std::string_view name;
  double peak_flops;  // dense fp16/bf16 tensor-core peak
  double efficiency;  // the fraction of peak a tuned training step reaches (stated, see the docs)
};

std::span<const ModelProfile> modelProfiles();
std::span<const AcceleratorProfile> acceleratorProfiles();
std::vector<std::string> modelProfileNames();
std::vector<std::string> acceleratorProfileNames();

struct EmulationSpec {
  std::string model;              // a ModelProfile name; empty: no emulation
  std::string accelerator;        // an AcceleratorProfile name
  double network_gbps = 0;        // each worker's link, Gb/s (1e9 bit/s)
  int batch_per_worker = 0;       // the emulated job's batch per accelerator; 0: the profile's default
  double max_gradient_mb = 32;    // cap on the padded gradient (MiB), to fit many workers on one machine
  bool enabled() const { return !model.empty(); }
  bool operator==(const EmulationSpec&) const = default;
};

struct EmulationPlan {
  EmulationSpec spec;               // with batch_per_worker resolved
  double real_gradient_bytes = 0;   // the emulated job's: parameters x 4 (fp32 gradients)
  double real_compute_s = 0;        // its step on one accelerator: batch x FLOPs / (peak x efficiency)
  size_t padded_parameters = 0;     // what every node here holds and carries: max(small model, capped size)

  // The emulated job's seconds of wire time per step for one worker, and the ratio to its compute.
  double wireSeconds(bool allreduce, int workers) const;
  double targetRatio(bool allreduce, int workers) const { return wireSeconds(allreduce, workers) / real_compute_s; }
};

// InvalidArgument naming the unknown profile or the bad number.
Result<EmulationPlan> planEmulation(const EmulationSpec& spec, size_t small_model_parameters);

// Stretches each step's compute to the emulated one, calibrated in rounds of `round_steps` steps (after the
// first, which pays for start-up): the first round runs at the small model's own speed, and each round
// sets the compute per step to median(its transfer per step) / target_ratio. A transfer measured with the
// compute stretched differs from one without (the nodes no longer contend for the CPU at the same
// instants), so the later rounds correct the first; after `rounds` the compute is fixed for the rest of the
// run, so that a fault that slows the transfer later does not stretch the compute too. Every step's compute
// lasts that long: the small model's compute first, the rest a wait off the CPU.
class EmulatedCompute {
 public:
  explicit EmulatedCompute(double target_ratio, int round_steps = 10, int rounds = 3);

  // Called when a step's real compute is done: `compute_elapsed` seconds since it started, and this node's
  // cumulative transfer seconds so far. Returns how long to wait before the step's compute counts as done.
  double waitSeconds(double compute_elapsed, double transfer_total);
  // The emulated compute per step, once calibrated.
  std::optional<double> computeSeconds() const {
    return rounds_done_ == rounds_ ? std::optional<double>(compute_s_) : std::nullopt;
  }

 private:
  double target_ratio_;
  int round_steps_;
  int rounds_;
  int rounds_done_ = 0;
  int calls_ = 0;
  double last_transfer_total_ = 0;
  std::vector<double> transfers_;  // of the round in progress
  double compute_s_ = 0;           // 0 until the first round ends
};

}  // namespace chaosbed::model
