#pragma once
// Loop lowerings: how an elementwise op runs inside a fused loop, written once as a scalar expression.
//
//   def.loop = TSR_LOOP_LOWERING(2, tsr_max(a, b));
//
// The expression is C++ over the operands a, b, c in the loop dialect (loop_dialect_avx2.inc: + - * /, the
// comparisons, tsr_b, tsr_nz, tsr_select, tsr_max, tsr_exp, tsr_log, ...). The macro compiles it here, over 8
// f32 lanes, into the op's tile functions (the CPU interpreter), and keeps its text, from which the CPU backend
// generates native kernels and the CUDA backend its kernels, with the same names defined for each. A core op and
// a plugin op declare it the same way, and either becomes fusible by doing so.
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "engine/ir/op_def.h"

namespace tsr::loop_dialect {
#include "engine/ops/vmath_avx2.inc"
#include "engine/ops/loop_dialect_avx2.inc"
}  // namespace tsr::loop_dialect

namespace tsr::ops {

// The expression with the operand names a, b, c replaced by `operands` (as they are, so callers parenthesise
// or wrap them as their dialect needs). Numbers, and names that merely contain the letters, are left alone.
std::string instantiateLoopExpression(std::string_view expr, std::span<const std::string> operands);

// The dialect as text, for generated kernels: the vector math and the AVX2 dialect (after <immintrin.h> and the
// C library's float functions), and the CUDA dialect.
const char* loopDialectAvx2Text();
const char* loopDialectCudaText();

namespace loop_detail {

using loop_dialect::tsr_v;

template <unsigned kUniform, int kOperand>
inline tsr_v lanes(const float* const* x, int64_t i) {
  if constexpr (((kUniform >> kOperand) & 1u) != 0) return tsr_v(x[kOperand][0]);
  else return tsr_v(_mm256_loadu_ps(x[kOperand] + i));
}

template <class F, int kArity, unsigned kUniform>
inline tsr_v at(const float* const* x, int64_t i) {
  const F f{};
  const tsr_v a = lanes<kUniform, 0>(x, i);
  if constexpr (kArity == 1) return f(a, a, a);
  else if constexpr (kArity == 2) return f(a, lanes<kUniform, 1>(x, i), a);
  else return f(a, lanes<kUniform, 1>(x, i), lanes<kUniform, 2>(x, i));
}

// 8 elements at a time; the tail through zero-padded copies (every lane is independent, so its results are
// those of a full vector).
template <class F, int kArity, unsigned kUniform>
void tileLoop(const float* const* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, at<F, kArity, kUniform>(x, i).v);
  if (i == n) return;
  const auto rest = static_cast<size_t>(n - i) * sizeof(float);
  alignas(32) float pad[3][8] = {};
  const float* px[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < kArity; ++k) {
    if ((kUniform >> k) & 1u) {
      px[k] = x[k];
    } else {
      std::memcpy(pad[k], x[k] + i, rest);
      px[k] = pad[k];
    }
  }
  alignas(32) float y[8];
  _mm256_store_ps(y, at<F, kArity, kUniform>(px, 0).v);
  std::memcpy(out + i, y, rest);
}

template <class F, int kArity, size_t... kMasks>
std::array<ir::LoopTileFn, 8> tileTable(std::index_sequence<kMasks...>) {
  constexpr unsigned kUsed = (1u << kArity) - 1u;
  return {tileLoop<F, kArity, static_cast<unsigned>(kMasks) & kUsed>...};
}

template <int kArity, class F>
ir::LoopLowering makeLoopLowering(const char* expr, F) {
  static_assert(kArity >= 1 && kArity <= 3, "loop lowerings take 1 to 3 operands");
  ir::LoopLowering l;
  l.expr = expr;
  l.tile = tileTable<F, kArity>(std::make_index_sequence<8>{});
  return l;
}

}  // namespace loop_detail
}  // namespace tsr::ops

#define TSR_LOOP_LOWERING(arity, ...)                                                                    \
  ::tsr::ops::loop_detail::makeLoopLowering<arity>(                                                      \
      #__VA_ARGS__, []([[maybe_unused]] ::tsr::loop_dialect::tsr_v a, [[maybe_unused]] ::tsr::loop_dialect::tsr_v b, \
                       [[maybe_unused]] ::tsr::loop_dialect::tsr_v c) -> ::tsr::loop_dialect::tsr_v { return __VA_ARGS__; })
