#pragma once
// SampleLoader: batches of a SampleSet (sample_set.h) for a classifier: inputs f32 [B, ...shape] and labels
// i32 [B].
//
// An epoch visits the N samples in order, or when shuffled in the pseudo-random permutation of (seed, epoch)
// (Permutation, batch_loader.h); batch j takes positions j*B .. j*B + B - 1, and the N mod B samples left over
// skip that epoch. A sample's augmentation is drawn from (seed, epoch, position), so a batch depends only on the
// data, the options and its place in the run, never on threads or timing. Worker threads decode the samples
// of a batch and a queue prepares the next `prefetch` batches. state() is the position of the next batch; a
// loader restored to it returns the batches the saved one would have returned.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/sample_set.h"
#include "engine/transform/array.h"

namespace tsr::data {

struct SampleLoaderOptions {
  int64_t batchSize = 32;
  bool shuffle = true;
  uint64_t seed = 0;
  int prefetch = 2;   // batches prepared ahead on a worker thread; 0 prepares each in next()
  int threads = 1;    // threads that read one batch's samples
  std::vector<int64_t> inputShape;  // one sample's shape in the batch; empty: the set's. Same element count.
  int64_t classes = 0;  // labels must lie in [0, classes); 0: not checked
};

struct SampleBatch {
  Array inputs;  // f32 [B, ...inputShape]
  Array labels;  // i32 [B]
};

class SampleLoader {
 public:
  static Result<SampleLoader> create(std::shared_ptr<const SampleSet> set, const SampleLoaderOptions& options);
  ~SampleLoader();
  SampleLoader(SampleLoader&&) noexcept;
  SampleLoader& operator=(SampleLoader&&) noexcept;

  // The next batch; epochs follow each other without end. Fails when a sample cannot be read (a bad image).
  Result<SampleBatch> next();
  // {"epoch", "batch", "seed", "batch_size", "samples", "shuffle"} as JSON.
  std::string state() const;
  Status restore(const std::string& state);
  void rewind();  // back to epoch 0, batch 0

  int64_t batchesPerEpoch() const;
  // The samples of a batch, in order (what next() reads), for tests.
  std::vector<int64_t> batchSamples(int64_t epoch, int64_t batch) const;
  const SampleLoaderOptions& options() const;

 private:
  struct Impl;
  explicit SampleLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace tsr::data
