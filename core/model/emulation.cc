#include "core/model/emulation.h"

#include <algorithm>
#include <cmath>

namespace chaosbed::model {
namespace {

// Parameters and forward multiply-adds as the models' papers and torchvision report them; training FLOPs
// = 3 x forward (the backward pass costs about twice the forward), 2 FLOPs per multiply-add. For the
// transformers, 6 x parameters x tokens (the usual estimate, which leaves out the attention scores).
constexpr ModelProfile kModels[] = {
    {"resnet50", 25.557e6, 3 * 2 * 4.09e9, 64, "one 224 x 224 image"},
    {"vgg16", 138.358e6, 3 * 2 * 15.47e9, 64, "one 224 x 224 image"},
    {"bert-base", 110e6, 6 * 110e6 * 128, 32, "one sequence of 128 tokens"},
    {"gpt2-small", 124e6, 6 * 124e6 * 1024, 8, "one sequence of 1024 tokens"},
};

// Dense fp16/bf16 tensor-core peaks from the vendor's data sheets (V100 SXM2, A100, H100 SXM). The stated
// efficiency, 25% of peak, is an assumption typical of tuned mixed-precision training of these models.
constexpr AcceleratorProfile kAccelerators[] = {
    {"v100", 125e12, 0.25},
    {"a100", 312e12, 0.25},
    {"h100", 989e12, 0.25},
};

template <typename Profile>
std::vector<std::string> names(std::span<const Profile> profiles) {
  std::vector<std::string> out;
  for (const Profile& p : profiles) out.emplace_back(p.name);
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::span<const ModelProfile> modelProfiles() { return kModels; }
std::span<const AcceleratorProfile> acceleratorProfiles() { return kAccelerators; }
std::vector<std::string> modelProfileNames() { return names(modelProfiles()); }
std::vector<std::string> acceleratorProfileNames() { return names(acceleratorProfiles()); }

double EmulationPlan::wireSeconds(bool allreduce, int workers) const {
  // A bandwidth-optimal ring all-reduce sends and receives 2 (N-1)/N gradients through each link; a
  // parameter-server worker pushes a gradient and pulls the parameters back.
  const double gradients = allreduce ? 2.0 * double(workers - 1) / double(workers) : 2.0;
  return gradients * real_gradient_bytes * 8.0 / (spec.network_gbps * 1e9);
}

Result<EmulationPlan> planEmulation(const EmulationSpec& spec, size_t small_model_parameters) {
  const ModelProfile* model = nullptr;
  for (const ModelProfile& p : modelProfiles())
    if (p.name == spec.model) model = &p;
  if (model == nullptr)
    return Status::invalidArgument("emulate.model: '" + spec.model + "' is not one of " + joined(modelProfileNames()));
  const AcceleratorProfile* accelerator = nullptr;
  for (const AcceleratorProfile& a : acceleratorProfiles())
    if (a.name == spec.accelerator) accelerator = &a;
  if (accelerator == nullptr) {
    return Status::invalidArgument("emulate.accelerator: '" + spec.accelerator + "' is not one of " +
                                   joined(acceleratorProfileNames()));
  }
  if (!(spec.network_gbps > 0) || !std::isfinite(spec.network_gbps))
    return Status::invalidArgument("emulate.network_gbps: must be positive");
  if (spec.batch_per_worker < 0) return Status::invalidArgument("emulate.batch_per_worker: must not be negative");
  if (!(spec.max_gradient_mb > 0)) return Status::invalidArgument("emulate.max_gradient_mb: must be positive");
  EmulationPlan plan;
  plan.spec = spec;
  if (plan.spec.batch_per_worker == 0) plan.spec.batch_per_worker = model->default_batch;
  plan.real_gradient_bytes = model->parameters * 4.0;
  plan.real_compute_s = double(plan.spec.batch_per_worker) * model->train_flops_per_sample /
                        (accelerator->peak_flops * accelerator->efficiency);
  const double capped_bytes = std::min(plan.real_gradient_bytes, spec.max_gradient_mb * 1024 * 1024);
  plan.padded_parameters = std::max(small_model_parameters, size_t(capped_bytes / 4.0));
  return plan;
}

EmulatedCompute::EmulatedCompute(double target_ratio, int round_steps, int rounds)
    : target_ratio_(target_ratio), round_steps_(std::max(1, round_steps)), rounds_(std::max(1, rounds)) {}

double EmulatedCompute::waitSeconds(double compute_elapsed, double transfer_total) {
  const double transfer = transfer_total - last_transfer_total_;
  last_transfer_total_ = transfer_total;
  // The first call's delta is the start-up (a parameter server's first pull); the next ones are one step's.
  if (calls_++ > 0 && rounds_done_ < rounds_) {
    transfers_.push_back(transfer);
    if (int(transfers_.size()) == round_steps_) {
      std::nth_element(transfers_.begin(), transfers_.begin() + long(transfers_.size() / 2), transfers_.end());
      compute_s_ = transfers_[transfers_.size() / 2] / target_ratio_;
      transfers_.clear();
      ++rounds_done_;
    }
  }
  return std::max(0.0, compute_s_ - compute_elapsed);
}

}  // namespace chaosbed::model
