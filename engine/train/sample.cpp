#include "engine/train/sample.h"

#include <algorithm>
#include <limits>

#include "engine/random/random.h"
#include "engine/compile/jit.h"

namespace tsr::train {

Result<int32_t> sampleToken(const Array& logits, double temperature, int64_t topK, const Array& key) {
  return capture([&]() -> int32_t {
    std::vector<double> v = logits.toDoubles();
    if (v.empty()) raise(makeError("sampleToken: empty logits"));
    if (temperature <= 0) return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    if (topK > 0 && topK < static_cast<int64_t>(v.size())) {
      std::vector<double> sorted = v;
      std::nth_element(sorted.begin(), sorted.begin() + (topK - 1), sorted.end(), std::greater<>());
      double kth = sorted[static_cast<size_t>(topK - 1)];
      for (auto& x : v)
        if (x < kth) x = -std::numeric_limits<double>::infinity();
    }
    for (auto& x : v) x /= temperature;
    Array scaled = Array::fromVector(v, Shape{static_cast<int64_t>(v.size())}, DType::F32);
    return static_cast<int32_t>(random::categorical(key, scaled).item());
  });
}

Result<std::string> sampleText(int64_t window, const LmForward& forward, const data::BpeTokenizer& tokenizer,
                               const std::string& prompt, int64_t newTokens, double temperature, int64_t topK,
                               uint64_t seed) {
  std::vector<data::TokenId> ids = tokenizer.encode(prompt);
  if (ids.empty()) ids.push_back(tokenizer.byteToken('\n'));
  size_t promptLen = ids.size();
  Jit step = jit([&](const std::vector<Array>& xs) { return std::vector<Array>{forward(xs[0])}; }, "sample");
  Array key = random::key(seed);
  for (int64_t n = 0; n < newTokens; ++n) {
    size_t start = ids.size() > static_cast<size_t>(window) ? ids.size() - static_cast<size_t>(window) : 0;
    std::vector<int32_t> ctx(static_cast<size_t>(window), 0);
    for (size_t i = start; i < ids.size(); ++i) ctx[i - start] = static_cast<int32_t>(ids[i]);
    int64_t last = static_cast<int64_t>(ids.size() - start) - 1;
    TSR_ASSIGN(std::vector<Array> out, step({Array::fromVector(ctx, Shape{1, window})}));
    TSR_ASSIGN(Array row, capture([&] { return reshape(sliceAxis(out[0], 1, last, last + 1), {-1}); }));
    TSR_ASSIGN(Array k, capture([&] { return random::foldIn(key, static_cast<uint32_t>(n)); }));
    TSR_ASSIGN(int32_t next, sampleToken(row, temperature, topK, k));
    ids.push_back(static_cast<data::TokenId>(next));
  }
  return tokenizer.decode(std::span<const data::TokenId>(ids).subspan(promptLen));
}

}  // namespace tsr::train
