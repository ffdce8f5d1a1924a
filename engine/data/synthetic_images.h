#pragma once
// Synthetic images for benchmarks, like the FakeDataset of the ViT training comparison (JAX vs PyTorch): each
// sample is a [224, 224, 3] image of standard normal values and a label in [0, 1000). Sample i is a function of
// (seed, i) alone, so a batch is the same whichever way the samples are grouped, on every machine. Images are
// generated in HWC order; NCHW batches hold the same values transposed. About 500 images of 224x224x3 per second
// per thread (Box-Muller dominates), so a batch's samples are generated on several threads.
#include <cstdint>
#include <memory>

#include "engine/core/result.h"
#include "engine/transform/array.h"

namespace tsr::data {

enum class ImageLayout { NHWC, NCHW };  // JAX/Flax take NHWC, PyTorch NCHW

struct SyntheticImageOptions {
  int64_t batchSize = 32;
  int64_t height = 224, width = 224, channels = 3;
  int64_t numClasses = 1000;
  ImageLayout layout = ImageLayout::NHWC;
  DType dtype = DType::F32;   // f32 or bf16
  uint64_t seed = 0;
  int64_t size = 1'000'000;   // samples in the dataset; batches wrap around at the end
  bool randomLabels = false;  // false: label i % numClasses, as the FakeDataset does
  int prefetch = 2;           // batches prepared ahead on a worker thread; 0 prepares each in next()
  int threads = 0;            // threads that generate one batch's samples; 0: all hardware threads
};

struct ImageBatch {
  Array images;  // [B, H, W, C] or [B, C, H, W]
  Array labels;  // i32 [B]
  int64_t first = 0;  // index of the first sample
};

class SyntheticImages {
 public:
  static Result<SyntheticImages> create(const SyntheticImageOptions& options);
  ~SyntheticImages();
  SyntheticImages(SyntheticImages&&) noexcept;
  SyntheticImages& operator=(SyntheticImages&&) noexcept;

  // Samples first, first + 1, ... (mod size). Fails only when memory runs out.
  Result<ImageBatch> batch(int64_t first) const;
  // Consecutive batches from position(), prepared ahead on a worker thread.
  Result<ImageBatch> next();
  int64_t position() const;
  void seek(int64_t first);

  // One sample: image [H, W, C] as f32, and its label.
  void image(int64_t index, float* hwc) const;
  int32_t label(int64_t index) const;
  const SyntheticImageOptions& options() const;

 private:
  struct Impl;
  explicit SyntheticImages(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace tsr::data
