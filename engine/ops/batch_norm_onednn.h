#pragma once
// batch_norm_training's and batch_norm_grad's f32 CPU kernels through oneDNN's batch_normalization primitives,
// for features in the last dim: the data seen as [rows, C, 1, 1] channels last (nhwc), which oneDNN's jit kernels
// take (the 2-D `nc` form would run its reference kernel). Primitives are cached per (rows, C, epsilon).
#include <cstdint>

namespace tsr::ops {

// y, the mean and the biased variance per feature, from x [rows, C], scale and offset [C]. False where oneDNN
// declines (the caller computes them another way).
bool oneDnnBatchNormForward(const float* x, const float* scale, const float* offset, float* y, float* mean,
                            float* var, int64_t rows, int64_t c, double epsilon);

// dx, d scale and d offset from x and dy [rows, C], scale, mean and var [C] (dx without the terms of the
// statistics' own cotangents). False where oneDNN declines.
bool oneDnnBatchNormBackward(const float* x, const float* dy, const float* scale, const float* mean,
                             const float* var, float* dx, float* dscale, float* doffset, int64_t rows, int64_t c,
                             double epsilon);

}  // namespace tsr::ops
