#pragma once
// Text sampling for language models: temperature and top-k, with Threefry keys so a seed reproduces a sample.
#include <functional>
#include <string>

#include "engine/data/bpe.h"
#include "engine/transform/array.h"

namespace tsr::train {

// forward(tokens [1, window] i32) -> logits [1, window, vocab]. The context is the last `window` tokens, padded
// on the right so that one compiled forward serves every length; causal attention makes the padding harmless.
using LmForward = std::function<Array(const Array& tokens)>;

Result<std::string> sampleText(int64_t window, const LmForward& forward, const data::BpeTokenizer& tokenizer,
                               const std::string& prompt, int64_t newTokens, double temperature, int64_t topK,
                               uint64_t seed);

// One draw from logits [vocab] (f32): softmax(logits / temperature) restricted to the top k (k <= 0: all).
Result<int32_t> sampleToken(const Array& logits, double temperature, int64_t topK, const Array& key);

}  // namespace tsr::train
