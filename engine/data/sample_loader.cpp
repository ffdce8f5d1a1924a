#include "engine/data/sample_loader.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/data/batch_loader.h"
#include "engine/data/prefetch_queue.h"

namespace tsr::data {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

struct SampleLoader::Impl {
  std::shared_ptr<const SampleSet> set;
  SampleLoaderOptions options;
  int64_t sampleElements = 0;
  int64_t batchesPerEpoch = 0;
  int64_t epoch = 0, batch = 0;  // the next batch next() returns
  std::unique_ptr<PrefetchQueue<Result<SampleBatch>>> queue;

  std::vector<int64_t> samples(int64_t e, int64_t b) const {
    std::vector<int64_t> out(static_cast<size_t>(options.batchSize));
    const auto n = static_cast<uint64_t>(set->size());
    std::optional<Permutation> perm;
    if (options.shuffle) perm.emplace(n, mix(options.seed) ^ static_cast<uint64_t>(e));
    for (int64_t i = 0; i < options.batchSize; ++i) {
      const auto pos = static_cast<uint64_t>(b * options.batchSize + i);
      out[static_cast<size_t>(i)] = static_cast<int64_t>(perm ? (*perm)(pos) : pos);
    }
    return out;
  }

  // Runs on the worker thread (or in next() without prefetch); reads only immutable state.
  Result<SampleBatch> make(int64_t e, int64_t b) const {
    const int64_t B = options.batchSize, D = sampleElements;
    std::vector<int64_t> shape = {B};
    shape.insert(shape.end(), options.inputShape.begin(), options.inputShape.end());
    Aval inAval{Shape(shape), DType::F32}, labelAval{Shape{B}, DType::I32};
    TSR_ASSIGN(runtime::BufferPtr in, runtime::Buffer::allocate(inAval.bytes()));
    TSR_ASSIGN(runtime::BufferPtr lab, runtime::Buffer::allocate(labelAval.bytes()));
    auto* inputs = static_cast<float*>(in->data());
    auto* labels = static_cast<int32_t*>(lab->data());
    const std::vector<int64_t> idx = samples(e, b);
    const int threads = static_cast<int>(std::clamp<int64_t>(options.threads, 1, B));
    std::vector<std::optional<Error>> errors(static_cast<size_t>(threads));
    auto readSamples = [&](int t) {
      for (int64_t i = t; i < B; i += threads) {
        const uint64_t seed = mix(mix(options.seed ^ mix(static_cast<uint64_t>(e))) ^ static_cast<uint64_t>(b * B + i));
        Result<int32_t> label = set->read(idx[static_cast<size_t>(i)], seed, inputs + i * D);
        if (!label.ok()) {
          errors[static_cast<size_t>(t)] = label.error();
          return;
        }
        if (options.classes > 0 && (*label < 0 || *label >= options.classes)) {
          errors[static_cast<size_t>(t)] = makeError("{}: label {} is outside the model's {} classes [0, {})",
                                                     set->where(idx[static_cast<size_t>(i)]), *label, options.classes,
                                                     options.classes);
          return;
        }
        labels[i] = *label;
      }
    };
    // Each thread keeps its first error; an exception (memory running out) must not escape a thread.
    auto work = [&](int t) {
      try {
        readSamples(t);
      } catch (const std::exception& ex) {
        errors[static_cast<size_t>(t)] = makeError("reading a batch: {}", ex.what());
      }
    };
    if (threads == 1) {
      work(0);
    } else {
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
      for (std::thread& th : pool) th.join();
    }
    for (const auto& err : errors)
      if (err) return *err;
    return SampleBatch{Array::fromBuffer(std::move(in), inAval), Array::fromBuffer(std::move(lab), labelAval)};
  }

  void advance(int64_t& e, int64_t& b) const {
    if (++b == batchesPerEpoch) {
      b = 0;
      ++e;
    }
  }

  void startWorker() {
    int64_t e = epoch, b = batch;
    queue = std::make_unique<PrefetchQueue<Result<SampleBatch>>>(static_cast<size_t>(options.prefetch),
                                                                 [this, e, b]() mutable {
                                                                   Result<SampleBatch> r = make(e, b);
                                                                   advance(e, b);
                                                                   return r;
                                                                 });
  }
};

SampleLoader::SampleLoader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
SampleLoader::~SampleLoader() = default;
SampleLoader::SampleLoader(SampleLoader&&) noexcept = default;
SampleLoader& SampleLoader::operator=(SampleLoader&&) noexcept = default;

Result<SampleLoader> SampleLoader::create(std::shared_ptr<const SampleSet> set, const SampleLoaderOptions& options) {
  if (options.batchSize < 1) return makeError("sample loader: batch size {} must be positive", options.batchSize);
  if (options.prefetch < 0) return makeError("sample loader: prefetch {} is negative", options.prefetch);
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (impl->options.inputShape.empty()) impl->options.inputShape = set->shape();
  impl->sampleElements = product(set->shape());
  if (product(impl->options.inputShape) != impl->sampleElements)
    return makeError("sample loader: samples of {} values do not fill inputs of {} values", impl->sampleElements,
                     product(impl->options.inputShape));
  impl->batchesPerEpoch = set->size() / options.batchSize;
  if (impl->batchesPerEpoch == 0)
    return makeError("{} samples ({} ...) make no batch of {}", set->size(), set->size() > 0 ? set->where(0) : "none",
                     options.batchSize);
  impl->set = std::move(set);
  return SampleLoader(std::move(impl));
}

Result<SampleBatch> SampleLoader::next() {
  Impl& m = *m_impl;
  Result<SampleBatch> r = makeError("sample loader: no batch");
  if (m.options.prefetch == 0) {
    r = m.make(m.epoch, m.batch);
  } else {
    if (!m.queue) m.startWorker();
    try {
      r = m.queue->pop();
    } catch (const std::exception& e) {
      return makeError("sample loader: {}", e.what());
    }
  }
  if (r.ok()) m.advance(m.epoch, m.batch);
  else m.queue.reset();  // the worker has moved on; a retry starts again at this batch
  return r;
}

std::string SampleLoader::state() const {
  const Impl& m = *m_impl;
  nlohmann::ordered_json j;
  j["epoch"] = m.epoch;
  j["batch"] = m.batch;
  j["seed"] = m.options.seed;
  j["batch_size"] = m.options.batchSize;
  j["samples"] = m.set->size();
  j["shuffle"] = m.options.shuffle;
  return j.dump();
}

Status SampleLoader::restore(const std::string& state) {
  Impl& m = *m_impl;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(state);
  } catch (const nlohmann::json::exception& e) {
    return makeError("sample loader state: not valid JSON: {}", e.what());
  }
  auto integer = [&](const char* key) -> Result<int64_t> {
    if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer())
      return makeError("sample loader state: \"{}\" is missing or not an integer", key);
    return j[key].get<int64_t>();
  };
  TSR_ASSIGN(int64_t epoch, integer("epoch"));
  TSR_ASSIGN(int64_t batch, integer("batch"));
  TSR_ASSIGN(int64_t seed, integer("seed"));
  TSR_ASSIGN(int64_t batchSize, integer("batch_size"));
  TSR_ASSIGN(int64_t samples, integer("samples"));
  if (!j.contains("shuffle") || !j["shuffle"].is_boolean()) return makeError("sample loader state: \"shuffle\" is missing");
  const bool shuffle = j["shuffle"].get<bool>();
  if (batchSize != m.options.batchSize || samples != m.set->size() || shuffle != m.options.shuffle)
    return makeError("sample loader: the state was saved for batch size {}, {} samples, shuffle={}; this data has "
                     "batch size {}, {} samples, shuffle={}",
                     batchSize, samples, shuffle, m.options.batchSize, m.set->size(), m.options.shuffle);
  if (epoch < 0 || batch < 0 || batch >= m.batchesPerEpoch)
    return makeError("sample loader: state position epoch {} batch {} is outside 0..{} batches per epoch", epoch,
                     batch, m.batchesPerEpoch - 1);
  m.queue.reset();
  m.options.seed = static_cast<uint64_t>(seed);
  m.epoch = epoch;
  m.batch = batch;
  return {};
}

void SampleLoader::rewind() {
  m_impl->queue.reset();
  m_impl->epoch = 0;
  m_impl->batch = 0;
}

int64_t SampleLoader::batchesPerEpoch() const { return m_impl->batchesPerEpoch; }
std::vector<int64_t> SampleLoader::batchSamples(int64_t epoch, int64_t batch) const {
  return m_impl->samples(epoch, batch);
}
const SampleLoaderOptions& SampleLoader::options() const { return m_impl->options; }

}  // namespace tsr::data
