#pragma once
// Vectorised float math for the fused kernels: exp, log, tanh and logistic over arrays, 8 lanes at a time
// with AVX2/FMA (Cephes-style range reduction and polynomials for exp and log, a rational function for tanh).
// Within a few ulp of the C library (exp and log 1, logistic 2, tanh 5), with the same special values (NaN in
// gives NaN out; exp overflows to inf and underflows to 0; log(0) = -inf, log of a negative number is NaN). The
// reference kernels use the C library, so compiled and eager results agree to a few ulp, not bit for bit, as
// with XLA.
#include <cstdint>

namespace tsr::cpu::vmath {

void exp(const float* x, float* y, int64_t n);
void log(const float* x, float* y, int64_t n);
void tanh(const float* x, float* y, int64_t n);
void logistic(const float* x, float* y, int64_t n);

}  // namespace tsr::cpu::vmath
