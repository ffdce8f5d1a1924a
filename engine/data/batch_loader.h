#pragma once
// BatchLoader: (B, T) batches of next-token prediction from a token file, as llm.c's DataLoader makes them.
//
// The stream of N tokens is cut into S = (N - 1) / T windows; window s is tokens [s*T, s*T + T + 1), whose
// first T tokens are one row of `inputs` and last T one row of `targets` (inputs shifted left by one).
// An epoch visits the windows in order, or when shuffled in a pseudo-random permutation determined by
// (seed, epoch) alone; batch j of an epoch takes the windows at positions j*B .. j*B + B - 1 of that order, and
// the S mod B windows left over skip that epoch. With processCount > 1 (data parallel), process p takes global
// batches p, p + processCount, ...
//
// A worker thread prepares the next `prefetch` batches. state() is the position of the next batch; a loader
// restored to a saved state returns exactly the batches the saved one would have returned.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/token_file.h"
#include "engine/transform/array.h"

namespace tsr::data {

struct LoaderOptions {
  int64_t batchSize = 8;   // B
  int64_t seqLen = 1024;   // T
  bool shuffle = false;
  uint64_t seed = 0;
  int prefetch = 4;        // batches prepared ahead on a worker thread; 0 prepares each in next()
  int64_t processIndex = 0;
  int64_t processCount = 1;
};

// Where a loader is, and what it was reading, so restore() can refuse a state that belongs to other data.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;  // the next batch within the epoch (this process's numbering)
  uint64_t seed = 0;
  int64_t batchSize = 0, seqLen = 0, numTokens = 0;
  bool shuffle = false;
  int64_t processIndex = 0, processCount = 1;

  bool operator==(const LoaderState&) const = default;
  std::string toJson() const;
  static Result<LoaderState> fromJson(std::string_view json);
};

struct TokenBatch {
  Array inputs;   // i32 [B, T]
  Array targets;  // i32 [B, T]: targets[b, t] = inputs[b, t + 1], the last one from the window's extra token
  int64_t epoch = 0;
  int64_t batch = 0;
};

class BatchLoader {
 public:
  static Result<BatchLoader> open(const std::string& tokenFilePath, const LoaderOptions& options);
  static Result<BatchLoader> create(std::shared_ptr<const TokenFile> file, const LoaderOptions& options);
  ~BatchLoader();  // stops the worker thread
  BatchLoader(BatchLoader&&) noexcept;
  BatchLoader& operator=(BatchLoader&&) noexcept;

  // The next batch; epochs follow each other without end. Fails only when memory runs out.
  Result<TokenBatch> next();
  LoaderState state() const;
  Status restore(const LoaderState& state);  // the worker restarts at the state's position

  int64_t windowsPerEpoch() const;
  int64_t batchesPerEpoch() const;  // this process's
  // The first token of each window of a batch (what next() would copy), for tests and tools.
  std::vector<int64_t> batchWindowStarts(int64_t epoch, int64_t batch) const;
  const LoaderOptions& options() const;

 private:
  struct Impl;
  explicit BatchLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// A keyed pseudo-random permutation of [0, n) (a Feistel network with cycle walking): O(1) memory and random
// access, so a shuffled epoch over billions of windows costs nothing to set up or to resume.
class Permutation {
 public:
  Permutation(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t m_n, m_key;
  int m_halfBits;
};

}  // namespace tsr::data
