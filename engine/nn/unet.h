#pragma once
// U-Net (Ronneberger et al., 2015) for semantic segmentation, small and padded as most reimplementations build
// it: `depth` encoder levels of two 3x3 convolutions (each followed by the norm and a ReLU) and a 2x2 max pool,
// a bottom block, and `depth` decoder levels that upsample (a 2x2 stride-2 transposed convolution, or nearest or
// bilinear upsampling and a 1x1 convolution) to the width of the level, concatenate the encoder's output of that
// level (skip first, then the upsampled features) and apply two 3x3 convolutions; a final 1x1 convolution gives
// `numClasses` logits per pixel. Level i has baseWidth * 2^i channels, the bottom baseWidth * 2^depth.
//
// Parameters (kernels HWIO, channels last): down_0.conv_0.weight, down_0.norm_0.weight, down_0.norm_0.bias,
// down_0.conv_1.weight, ..., bottom.conv_0.weight, ..., up_0.upsample.weight, up_0.upsample.bias,
// up_0.conv_0.weight, ..., head.weight, head.bias. The 3x3 convolutions have no bias when a norm follows them
// (norm = "none": they have one). With batch norm the running statistics are the model's state, a tree of the
// same names (down_0.norm_0.running_mean, ...), as ResNet's.
#include <string>
#include <vector>

#include "engine/nn/layers.h"

namespace tsr::nn {

struct UNetConfig {
  int64_t inChannels = 3;
  int64_t numClasses = 2;
  int64_t baseWidth = 16;             // channels of the first level; each deeper level doubles them
  int64_t depth = 3;                  // encoder (and decoder) levels: the image is pooled depth times
  std::string norm = "batch";         // "batch" (running statistics as state), "group" (gcd(32, channels) groups) or "none"
  std::string upsample = "transpose"; // "transpose", "bilinear" or "nearest"
  int64_t imageSize = 64;             // pixels a side (FLOPs only: the model takes any size divisible by 2^depth)
  double bnMomentum = 0.99;           // Flax's convention (PyTorch's 0.1)
  double eps = 1e-5;
  DType dtype = DType::F32;
};

// The values UNetConfig::norm and ::upsample take.
const std::vector<std::string>& unetNorms();
const std::vector<std::string>& unetUpsamplings();

class UNet {
 public:
  explicit UNet(UNetConfig config);  // raises on a config it cannot build (unknown norm, depth < 1, ...)
  const UNetConfig& config() const { return m_cfg; }

  Tree init(const Array& key) const;
  // The running statistics at their start (means 0, variances 1); an empty dict without batch norm.
  Tree initState() const;
  // pixels: [B, inChannels, H, W] (NCHW, as the data kinds give them), H and W divisible by 2^depth ->
  // logits [B, H, W, numClasses] (channels last: the per-pixel loss takes labels [B, H, W]).
  Array apply(const Tree& params, const Array& pixels, Context& ctx) const;
  int64_t numParams() const;
  // Multiply-adds of one image's forward pass at imageSize.
  double forwardMacsPerSample() const;

  int64_t width(int64_t level) const { return m_cfg.baseWidth << level; }  // level depth: the bottom block

 private:
  class Pass;
  UNetConfig m_cfg;
};

}  // namespace tsr::nn
