#include "engine/data/synthetic_images.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <thread>
#include <vector>

#include "engine/data/prefetch_queue.h"

namespace tsr::data {

namespace {

uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

struct SyntheticImages::Impl {
  SyntheticImageOptions options;
  uint64_t key = 0;
  int64_t position = 0;
  std::unique_ptr<PrefetchQueue<Result<ImageBatch>>> queue;

  int64_t pixels() const { return options.height * options.width * options.channels; }

  // Box-Muller on counter-based bits: pair j of sample i comes from hash(key, i, j), so any element can be made
  // independently of the others.
  void image(int64_t index, float* hwc) const {
    const uint64_t sampleKey = mix(key ^ mix(static_cast<uint64_t>(index) + 0x632BE59BD9B4E019ull));
    const int64_t n = pixels();
    for (int64_t j = 0; j < n; j += 2) {
      uint64_t bits = mix(sampleKey + static_cast<uint64_t>(j) * 0x9E3779B97F4A7C15ull);
      float u1 = (static_cast<float>(bits >> 40) + 0.5f) * 0x1p-24f;  // (0, 1): the log stays finite
      float u2 = static_cast<float>(bits & 0xFFFFFF) * 0x1p-24f;
      float r = std::sqrt(-2.0f * std::log(u1));
      float theta = 2.0f * std::numbers::pi_v<float> * u2;
      hwc[j] = r * std::cos(theta);
      if (j + 1 < n) hwc[j + 1] = r * std::sin(theta);
    }
  }

  int32_t label(int64_t index) const {
    if (!options.randomLabels) return static_cast<int32_t>(index % options.numClasses);
    uint64_t bits = mix(key ^ mix(static_cast<uint64_t>(index) ^ 0x5851F42D4C957F2Dull));
    return static_cast<int32_t>(bits % static_cast<uint64_t>(options.numClasses));
  }

  // Sample `index` into slot b of a batch: element (h, w, c) goes to [b, h, w, c] or [b, c, h, w].
  template <class T>
  void fill(int64_t index, int64_t b, T* images, int32_t* labels, std::vector<float>& hwc) const {
    const SyntheticImageOptions& o = options;
    const int64_t n = pixels(), HW = o.height * o.width, C = o.channels;
    image(index, hwc.data());
    labels[b] = label(index);
    T* dst = images + b * n;
    if (o.layout == ImageLayout::NHWC) {
      for (int64_t i = 0; i < n; ++i) dst[i] = T(hwc[static_cast<size_t>(i)]);
    } else {
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p) dst[c * HW + p] = T(hwc[static_cast<size_t>(p * C + c)]);
    }
  }

  Result<ImageBatch> make(int64_t first) const {
    const SyntheticImageOptions& o = options;
    const int64_t B = o.batchSize;
    Shape shape = o.layout == ImageLayout::NHWC ? Shape{B, o.height, o.width, o.channels}
                                                : Shape{B, o.channels, o.height, o.width};
    Aval imagesAval{shape, o.dtype};
    Aval labelsAval{Shape{B}, DType::I32};
    TSR_ASSIGN(runtime::BufferPtr images, runtime::Buffer::allocate(imagesAval.bytes()));
    TSR_ASSIGN(runtime::BufferPtr labels, runtime::Buffer::allocate(labelsAval.bytes()));
    auto* labelData = static_cast<int32_t*>(labels->data());
    // Samples are independent: thread k makes samples k, k + threads, ...
    auto work = [&](int64_t k, int64_t step) {
      std::vector<float> hwc(static_cast<size_t>(pixels()));
      for (int64_t b = k; b < B; b += step) {
        const int64_t index = (first + b) % o.size;
        if (o.dtype == DType::F32) fill(index, b, static_cast<float*>(images->data()), labelData, hwc);
        else fill(index, b, static_cast<bf16*>(images->data()), labelData, hwc);
      }
    };
    int64_t threads = o.threads > 0 ? o.threads : std::max<int64_t>(1, std::thread::hardware_concurrency());
    threads = std::min(threads, B);
    std::vector<std::thread> pool;
    for (int64_t k = 1; k < threads; ++k) pool.emplace_back(work, k, threads);
    work(0, threads);
    for (auto& t : pool) t.join();
    return ImageBatch{Array::fromBuffer(std::move(images), imagesAval), Array::fromBuffer(std::move(labels), labelsAval),
                      first % o.size};
  }

  void startWorker() {
    int64_t next = position;
    queue = std::make_unique<PrefetchQueue<Result<ImageBatch>>>(static_cast<size_t>(options.prefetch),
                                                                [this, next]() mutable {
                                                                  Result<ImageBatch> r = make(next);
                                                                  next = (next + options.batchSize) % options.size;
                                                                  return r;
                                                                });
  }
};

SyntheticImages::SyntheticImages(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
SyntheticImages::~SyntheticImages() = default;
SyntheticImages::SyntheticImages(SyntheticImages&&) noexcept = default;
SyntheticImages& SyntheticImages::operator=(SyntheticImages&&) noexcept = default;

Result<SyntheticImages> SyntheticImages::create(const SyntheticImageOptions& o) {
  if (o.batchSize < 1 || o.height < 1 || o.width < 1 || o.channels < 1)
    return makeError("synthetic images: batch {} of {}x{}x{} images: every size must be positive", o.batchSize,
                     o.height, o.width, o.channels);
  if (o.numClasses < 1 || o.numClasses > (int64_t{1} << 31) - 1)
    return makeError("synthetic images: {} classes; need 1..2^31-1", o.numClasses);
  if (o.size < 1) return makeError("synthetic images: the dataset size {} must be positive", o.size);
  if (o.dtype != DType::F32 && o.dtype != DType::BF16)
    return makeError("synthetic images: dtype {} is not supported (f32 or bf16)", dtypeName(o.dtype));
  if (o.prefetch < 0 || o.threads < 0)
    return makeError("synthetic images: prefetch {} and threads {} must not be negative", o.prefetch, o.threads);
  auto impl = std::make_unique<Impl>();
  impl->options = o;
  impl->key = mix(o.seed + 0x9E3779B97F4A7C15ull);
  return SyntheticImages(std::move(impl));
}

Result<ImageBatch> SyntheticImages::batch(int64_t first) const {
  return m_impl->make(((first % m_impl->options.size) + m_impl->options.size) % m_impl->options.size);
}

Result<ImageBatch> SyntheticImages::next() {
  Impl& m = *m_impl;
  Result<ImageBatch> r = makeError("synthetic images: no batch");
  if (m.options.prefetch == 0) {
    r = m.make(m.position);
  } else {
    if (!m.queue) m.startWorker();
    try {
      r = m.queue->pop();
    } catch (const std::exception& e) {
      return makeError("synthetic images: {}", e.what());
    }
  }
  if (r.ok()) m.position = (m.position + m.options.batchSize) % m.options.size;
  return r;
}

int64_t SyntheticImages::position() const { return m_impl->position; }

void SyntheticImages::seek(int64_t first) {
  m_impl->queue.reset();
  m_impl->position = ((first % m_impl->options.size) + m_impl->options.size) % m_impl->options.size;
}

void SyntheticImages::image(int64_t index, float* hwc) const { m_impl->image(index, hwc); }
int32_t SyntheticImages::label(int64_t index) const { return m_impl->label(index); }
const SyntheticImageOptions& SyntheticImages::options() const { return m_impl->options; }

}  // namespace tsr::data
