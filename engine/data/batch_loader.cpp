#include "engine/data/batch_loader.h"

#include <nlohmann/json.hpp>

#include "engine/core/check.h"
#include "engine/data/prefetch_queue.h"

namespace tsr::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

constexpr int kFeistelRounds = 6;

}  // namespace

Permutation::Permutation(uint64_t n, uint64_t key) : m_n(n), m_key(splitmix64(key)), m_halfBits(0) {
  while ((uint64_t{1} << (2 * m_halfBits)) < n) ++m_halfBits;
}

uint64_t Permutation::operator()(uint64_t i) const {
  TSR_CHECK(i < m_n);
  if (m_halfBits == 0) return i;
  const uint64_t mask = (uint64_t{1} << m_halfBits) - 1;
  // The network permutes [0, 4^halfBits) ⊇ [0, n); walking the cycle until the value falls inside [0, n)
  // keeps it a bijection on [0, n). The domain is under 4n, so few steps are needed.
  uint64_t x = i;
  do {
    uint64_t left = x >> m_halfBits, right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      uint64_t f = splitmix64(m_key ^ (static_cast<uint64_t>(r) << 56) ^ right) & mask;
      uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << m_halfBits) | right;
  } while (x >= m_n);
  return x;
}

struct BatchLoader::Impl {
  std::shared_ptr<const TokenFile> file;
  LoaderOptions options;
  int64_t windows = 0;       // S
  int64_t batchesPerEpoch = 0;
  int64_t epoch = 0, batch = 0;  // the next batch next() returns
  std::unique_ptr<PrefetchQueue<Result<TokenBatch>>> queue;

  int64_t globalBatch(int64_t b) const { return b * options.processCount + options.processIndex; }

  std::vector<int64_t> windowStarts(int64_t e, int64_t b) const {
    std::vector<int64_t> starts(static_cast<size_t>(options.batchSize));
    const int64_t first = globalBatch(b) * options.batchSize;
    std::optional<Permutation> perm;
    if (options.shuffle)
      perm.emplace(static_cast<uint64_t>(windows), splitmix64(options.seed) ^ static_cast<uint64_t>(e));
    for (int64_t i = 0; i < options.batchSize; ++i) {
      int64_t w = perm ? static_cast<int64_t>((*perm)(static_cast<uint64_t>(first + i))) : first + i;
      starts[static_cast<size_t>(i)] = w * options.seqLen;
    }
    return starts;
  }

  // Runs on the worker thread (or in next() without prefetch); reads only immutable state.
  Result<TokenBatch> make(int64_t e, int64_t b) const {
    const int64_t B = options.batchSize, T = options.seqLen;
    Aval aval{Shape{B, T}, DType::I32};
    TSR_ASSIGN(runtime::BufferPtr in, runtime::Buffer::allocate(aval.bytes()));
    TSR_ASSIGN(runtime::BufferPtr out, runtime::Buffer::allocate(aval.bytes()));
    std::vector<int32_t> window(static_cast<size_t>(T + 1));
    auto* inputs = static_cast<int32_t*>(in->data());    // [B, T]
    auto* targets = static_cast<int32_t*>(out->data());  // [B, T]
    std::vector<int64_t> starts = windowStarts(e, b);
    for (int64_t i = 0; i < B; ++i) {
      file->read(starts[static_cast<size_t>(i)], T + 1, window.data());
      std::copy(window.begin(), window.end() - 1, inputs + i * T);
      std::copy(window.begin() + 1, window.end(), targets + i * T);
    }
    return TokenBatch{Array::fromBuffer(std::move(in), aval), Array::fromBuffer(std::move(out), aval), e, b};
  }

  void advance(int64_t& e, int64_t& b) const {
    if (++b == batchesPerEpoch) {
      b = 0;
      ++e;
    }
  }

  void startWorker() {
    int64_t e = epoch, b = batch;  // the worker's own cursor, from the consumer's position
    queue = std::make_unique<PrefetchQueue<Result<TokenBatch>>>(
        static_cast<size_t>(options.prefetch), [this, e, b]() mutable {
          Result<TokenBatch> r = make(e, b);
          advance(e, b);
          return r;
        });
  }
};

BatchLoader::BatchLoader(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
BatchLoader::~BatchLoader() = default;
BatchLoader::BatchLoader(BatchLoader&&) noexcept = default;
BatchLoader& BatchLoader::operator=(BatchLoader&&) noexcept = default;

Result<BatchLoader> BatchLoader::open(const std::string& tokenFilePath, const LoaderOptions& options) {
  TSR_ASSIGN(TokenFile file, TokenFile::open(tokenFilePath));
  return create(std::make_shared<const TokenFile>(std::move(file)), options);
}

Result<BatchLoader> BatchLoader::create(std::shared_ptr<const TokenFile> file, const LoaderOptions& options) {
  const std::string& path = file->path();
  if (options.batchSize < 1 || options.seqLen < 1)
    return makeError("batch loader for {}: batch size {} and sequence length {} must be positive", path,
                     options.batchSize, options.seqLen);
  if (options.processCount < 1 || options.processIndex < 0 || options.processIndex >= options.processCount)
    return makeError("batch loader for {}: process {} of {} does not exist", path, options.processIndex,
                     options.processCount);
  if (options.prefetch < 0) return makeError("batch loader for {}: prefetch {} is negative", path, options.prefetch);
  auto impl = std::make_unique<Impl>();
  impl->windows = file->size() > 0 ? (file->size() - 1) / options.seqLen : 0;
  impl->batchesPerEpoch = impl->windows / options.batchSize / options.processCount;
  if (impl->batchesPerEpoch == 0)
    return makeError("batch loader for {}: {} tokens make {} windows of {}+1 tokens; one batch of {} on each of {} "
                     "processes needs {} tokens",
                     path, file->size(), impl->windows, options.seqLen, options.batchSize, options.processCount,
                     options.batchSize * options.processCount * options.seqLen + 1);
  impl->file = std::move(file);
  impl->options = options;
  return BatchLoader(std::move(impl));
}

Result<TokenBatch> BatchLoader::next() {
  Impl& m = *m_impl;
  Result<TokenBatch> r = makeError("batch loader: no batch");
  if (m.options.prefetch == 0) {
    r = m.make(m.epoch, m.batch);
  } else {
    if (!m.queue) m.startWorker();  // lazily, so that a restore() right after creation wastes no work
    try {
      r = m.queue->pop();
    } catch (const std::exception& e) {
      return makeError("batch loader for {}: {}", m.file->path(), e.what());
    }
  }
  if (r.ok()) m.advance(m.epoch, m.batch);
  return r;
}

LoaderState BatchLoader::state() const {
  const Impl& m = *m_impl;
  return LoaderState{m.epoch,          m.batch,          m.options.seed,         m.options.batchSize,
                     m.options.seqLen, m.file->size(),   m.options.shuffle,      m.options.processIndex,
                     m.options.processCount};
}

Status BatchLoader::restore(const LoaderState& s) {
  Impl& m = *m_impl;
  LoaderState mine = state();
  if (s.batchSize != mine.batchSize || s.seqLen != mine.seqLen || s.numTokens != mine.numTokens ||
      s.shuffle != mine.shuffle || s.processIndex != mine.processIndex || s.processCount != mine.processCount)
    return makeError("batch loader for {}: the state was saved for B={}, T={}, {} tokens, shuffle={}, process {} of "
                     "{}; this loader has B={}, T={}, {} tokens, shuffle={}, process {} of {}",
                     m.file->path(), s.batchSize, s.seqLen, s.numTokens, s.shuffle, s.processIndex, s.processCount,
                     mine.batchSize, mine.seqLen, mine.numTokens, mine.shuffle, mine.processIndex, mine.processCount);
  if (s.epoch < 0 || s.batch < 0 || s.batch >= m.batchesPerEpoch)
    return makeError("batch loader for {}: state position epoch {} batch {} is outside 0..{} batches per epoch",
                     m.file->path(), s.epoch, s.batch, m.batchesPerEpoch - 1);
  m.queue.reset();  // stops the worker before the position changes under it
  m.options.seed = s.seed;
  m.epoch = s.epoch;
  m.batch = s.batch;
  return {};
}

int64_t BatchLoader::windowsPerEpoch() const { return m_impl->windows; }
int64_t BatchLoader::batchesPerEpoch() const { return m_impl->batchesPerEpoch; }
const LoaderOptions& BatchLoader::options() const { return m_impl->options; }

std::vector<int64_t> BatchLoader::batchWindowStarts(int64_t epoch, int64_t batch) const {
  return m_impl->windowStarts(epoch, batch);
}

std::string LoaderState::toJson() const {
  nlohmann::ordered_json j;
  j["epoch"] = epoch;
  j["batch"] = batch;
  j["seed"] = seed;
  j["batch_size"] = batchSize;
  j["seq_len"] = seqLen;
  j["num_tokens"] = numTokens;
  j["shuffle"] = shuffle;
  j["process_index"] = processIndex;
  j["process_count"] = processCount;
  return j.dump();
}

Result<LoaderState> LoaderState::fromJson(std::string_view json) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    return makeError("loader state: not valid JSON: {}", e.what());
  }
  if (!j.is_object()) return makeError("loader state: expected a JSON object");
  LoaderState s;
  auto get = [&](const char* key, auto& field) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return makeError("loader state: missing \"{}\"", key);
    using F = std::decay_t<decltype(field)>;
    bool ok = std::is_same_v<F, bool> ? it->is_boolean() : it->is_number_integer();
    if (!ok) return makeError("loader state: \"{}\" is {}, not {}", key, it->dump(), std::is_same_v<F, bool> ? "a boolean" : "an integer");
    field = it->get<F>();
    return {};
  };
  TSR_TRY(get("epoch", s.epoch));
  TSR_TRY(get("batch", s.batch));
  TSR_TRY(get("seed", s.seed));
  TSR_TRY(get("batch_size", s.batchSize));
  TSR_TRY(get("seq_len", s.seqLen));
  TSR_TRY(get("num_tokens", s.numTokens));
  TSR_TRY(get("shuffle", s.shuffle));
  TSR_TRY(get("process_index", s.processIndex));
  TSR_TRY(get("process_count", s.processCount));
  return s;
}

}  // namespace tsr::data
