#pragma once
// The layers of convolutional networks, channels last as Flax's (inputs [N, spatial..., C], 1 to 3 spatial
// dims) with parameters named as the other layers' ("weight", "bias"): Conv (kernel [spatial..., C/groups, out],
// HWIO), ConvTranspose (kernel [spatial..., in, out], lax.conv_transpose), max and average pooling, global
// average pooling, Upsample (nearest or linear), the norms that work per example (RMSNorm and GroupNorm) and
// BatchNorm, which works over the batch and keeps running statistics beside its parameters.
// Each is a small config struct with init(key) -> Tree and apply(params, x), as in layers.h.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/transform/api.h"

namespace tsr::nn {

struct Conv {
  int64_t in = 0, out = 0;
  std::vector<int64_t> kernel;    // the window's spatial size: 1 to 3 dims
  std::vector<int64_t> strides;   // empty: 1
  ConvPadding padding = "SAME";   // "SAME", "VALID" or (low, high) pairs
  std::vector<int64_t> dilation;  // the kernel's (rhs dilation); empty: 1
  int64_t groups = 1;             // feature groups (in and out divisible by it; groups = in: depthwise)
  bool useBias = true;
  DType dtype = DType::F32;

  Tree init(const Array& key) const;  // weight: He normal over its fan-in; bias: zeros
  Array apply(const Tree& p, const Array& x) const;
  int64_t numParams() const;
};

// The input dilated by the strides and convolved at stride 1 (lax.conv_transpose, the kernel not flipped):
// "SAME" padding gives inputs * strides positions.
struct ConvTranspose {
  int64_t in = 0, out = 0;
  std::vector<int64_t> kernel;
  std::vector<int64_t> strides;
  ConvPadding padding = "SAME";
  bool useBias = true;
  DType dtype = DType::F32;

  Tree init(const Array& key) const;
  Array apply(const Tree& p, const Array& x) const;
  int64_t numParams() const;
};

// (low, high) padding of the dilated input for one spatial dim of a transposed convolution: kernel extent k,
// stride s, "SAME" or "VALID" (JAX's rule).
std::pair<int64_t, int64_t> convTransposePadding(int64_t k, int64_t s, const std::string& mode);

struct MaxPool {
  std::vector<int64_t> window, strides;  // strides empty: the window (non-overlapping)
  ConvPadding padding = "VALID";
  Array apply(const Array& x) const;
};

struct AvgPool {
  std::vector<int64_t> window, strides;
  ConvPadding padding = "VALID";
  bool countIncludePad = true;
  Array apply(const Array& x) const;
};

// The mean over the spatial dims: [N, spatial..., C] -> [N, C].
Array globalAvgPool(const Array& x);

// Each spatial dim scaled by its factor: "nearest" repeats, "linear" interpolates with half-pixel centres
// (edges repeat), as jax.image.resize does when enlarging.
struct Upsample {
  std::vector<int64_t> factors;  // one per spatial dim, or one for all
  std::string method = "nearest";
  Array apply(const Array& x) const;
};

// x / sqrt(mean(x^2) + eps) * weight over the last axis.
struct RMSNorm {
  int64_t dim = 0;
  double eps = 1e-6;
  DType dtype = DType::F32;
  Tree init() const;  // {weight: ones}
  Array apply(const Tree& p, const Array& x) const;
  int64_t numParams() const { return dim; }
};

// Per example, over the spatial dims and each group's channels (channels last), then weight and bias per channel.
struct GroupNorm {
  int64_t groups = 32, dim = 0;
  double eps = 1e-5;
  DType dtype = DType::F32;
  Tree init() const;  // {weight: ones, bias: zeros}
  Array apply(const Tree& p, const Array& x) const;
  int64_t numParams() const { return 2 * dim; }
};

// Over every axis but the last (the features, channels last), as flax.linen.BatchNorm with Flax's conventions:
// training normalises with the batch's mean and biased variance, mean((x - mean)^2), and moves the running
// statistics towards them, running = momentum * running + (1 - momentum) * batch (momentum 0.99: PyTorch's
// momentum 0.1; PyTorch keeps the unbiased variance, Flax and this layer the biased one); inference normalises
// with the running statistics. The statistics are state, not parameters: no gradient reaches them and no
// optimizer updates them (Context::state carries them through a training step). Under data parallelism the
// batch's mean is one reduction over the whole (sharded) batch axis, so every device normalises with the global
// batch's statistics.
// Batch norm in training over every axis but the last: (x [..., C], weight [C], bias [C]) -> (y, the batch's mean
// [C], its biased variance [C]), one custom_vjp op whose backward pass keeps the normalised x and 1/sqrt(var + eps)
// only. Each output is differentiable (BatchNorm stops the gradient through the statistics it keeps).
std::vector<Array> batchNormTraining(const Array& x, const Array& weight, const Array& bias, double eps);

// The batch_norm_training op over every dim but `featureIndex`: (y, mean [C], biased variance [C]); its vjp is
// batch_norm_grad (engine/ops/batch_norm.cpp).
std::vector<Array> batchNormTrainingOp(const Array& x, const Array& scale, const Array& offset, double eps,
                                       int64_t featureIndex);

// Whether models trace batch norm in training as the batch_norm_training op: TESSERA_FUSED_BATCH_NORM=on; off and
// auto trace batchNormTraining, whose reductions and elementwise ops fuse with the relu and residual add around
// them (on ResNet-18 CIFAR as fast as oneDNN's primitives, which take them as passes of their own), split under a
// mesh (the op's statistics need the whole batch on each device) and run on every backend.
bool fusedBatchNorm();

struct BatchNorm {
  int64_t dim = 0;
  double momentum = 0.99;
  double eps = 1e-5;
  DType dtype = DType::F32;
  bool fused = false;  // training: the batch_norm_training op (Context::fusedBatchNorm), else batchNormTraining

  Tree init() const;       // {weight: ones, bias: zeros}: torchvision's names
  Tree initStats() const;  // {running_mean: zeros, running_var: ones}, f32
  struct Output {
    Array y;
    Tree stats;  // training: the updated running statistics; inference: those given
  };
  // x: [..., dim]; stats as initStats gives them.
  Output apply(const Tree& p, const Tree& stats, const Array& x, bool training) const;
  int64_t numParams() const { return 2 * dim; }
};

}  // namespace tsr::nn
