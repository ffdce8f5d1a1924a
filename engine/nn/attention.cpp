#include "engine/nn/attention.h"

#include <cmath>
#include <limits>

#include "engine/core/env_options.h"

namespace tsr::nn {

bool fusedAttentionFor(const std::string& device, const std::string& matmulPrecision) {
  const std::string& mode = envOptions().fusedAttention;
  if (mode == "on") return true;
  if (mode == "off") return false;
  return device != "cuda" || matmulPrecision == "bf16";
}

Array splitHeads(const Array& x, int64_t heads) {
  int64_t b = x.dim(0), t = x.dim(1), c = x.dim(2);
  if (c % heads != 0) raise(makeError("attention: width {} is not divisible by {} heads", c, heads));
  return transpose(reshape(x, {b, t, heads, c / heads}), {0, 2, 1, 3});
}

Array mergeHeads(const Array& x) {
  int64_t b = x.dim(0), h = x.dim(1), t = x.dim(2), d = x.dim(3);
  return reshape(transpose(x, {0, 2, 1, 3}), {b, t, h * d});
}

Array dotProductAttention(const Array& q, const Array& k, const Array& v, bool causal, const Dropout& dropout,
                          Context& ctx) {
  const bool dropping = dropout.rate > 0 && ctx.training();
  if (ctx.fusedAttention() && !dropping && isFloating(q.dtype())) {
    // [B, H, T, D] -> the op's [B, T, H, D]: these transposes cancel the heads' split and merge around it.
    const Axes swap = {0, 2, 1, 3};
    return transpose(tsr::dotProductAttention(transpose(q, swap), transpose(k, swap), transpose(v, swap), causal),
                     swap);
  }
  int64_t t = q.dim(2), d = q.dim(3);
  // scores: [B, H, T, S] = q . k over D, batched over B and H
  Array scores = dotGeneral(q, k, {{3}, {3}, {0, 1}, {0, 1}}) * (1.0 / std::sqrt(static_cast<double>(d)));
  if (causal) {
    Array mask = causalMask(t);
    scores = where(mask, scores, fullLike(scores, -std::numeric_limits<float>::infinity()));
  }
  Array att = dropout.apply(softmax(scores, -1), ctx);
  // [B, H, T, S] . [B, H, S, D] over S -> [B, H, T, D]
  return dotGeneral(att, v, {{3}, {2}, {0, 1}, {0, 1}});
}

}  // namespace tsr::nn
