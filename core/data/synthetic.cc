#include "core/data/dataset.h"
#include "core/data/random.h"

namespace chaosbed::data {
namespace {

Dataset sampleClusters(const SyntheticOptions& o, const std::vector<float>& centres, size_t count,
                       uint64_t stream) {
  Rng rng(mixSeed(o.seed, stream));
  Dataset d;
  d.dims = o.dims;
  d.num_classes = o.num_classes;
  d.images.resize(count * o.dims);
  d.labels.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const int c = static_cast<int>(i % static_cast<size_t>(o.num_classes));
    d.labels[i] = static_cast<uint8_t>(c);
    const float* centre = centres.data() + static_cast<size_t>(c) * o.dims;
    float* x = d.images.data() + i * o.dims;
    for (size_t j = 0; j < o.dims; ++j) x[j] = centre[j] + o.noise * standardNormal(rng);
  }
  return d;
}

}  // namespace

Result<DatasetSplits> makeSynthetic(const SyntheticOptions& o) {
  if (o.dims == 0) return Status::invalidArgument("synthetic dataset: dims must be positive");
  if (o.num_classes < 1 || o.num_classes > 256)
    return Status::invalidArgument("synthetic dataset: num_classes must be in 1..256, got " +
                                   std::to_string(o.num_classes));
  if (o.train_size == 0 || o.test_size == 0)
    return Status::invalidArgument("synthetic dataset: train_size and test_size must be positive");
  if (!(o.noise > 0) || !(o.separation > 0))
    return Status::invalidArgument("synthetic dataset: noise and separation must be positive");
  Rng rng(mixSeed(o.seed, 0));
  std::vector<float> centres(static_cast<size_t>(o.num_classes) * o.dims);
  for (float& v : centres) v = o.separation * standardNormal(rng);
  DatasetSplits s;
  s.train = sampleClusters(o, centres, o.train_size, 1);
  s.test = sampleClusters(o, centres, o.test_size, 2);
  return s;
}

}  // namespace chaosbed::data
