#pragma once
// ResNet (He et al., 2016) as torchvision builds it: basic blocks for depths 18 and 34, bottleneck blocks (the
// stride on the 3x3 convolution, "ResNet v1.5") for 50, projection shortcuts (1x1 convolution + norm) where a
// block changes the shape, no bias on convolutions, a linear head. Parameters carry torchvision's names
// (conv1.weight, bn1.weight, layer1.0.conv1.weight, layer2.0.downsample.0.weight, layer2.0.downsample.1.bias,
// fc.weight [classes, features], fc.bias), with kernels in HWIO (channels last) rather than torch's OIHW. With
// batch norm the running statistics are the model's state, a tree of the same names (bn1.running_mean,
// layer1.0.bn2.running_var, ...): apply reads it from Context::state and, in training, leaves the updated one in
// Context::updatedState.
#include <string>
#include <vector>

#include "engine/nn/layers.h"

namespace tsr::nn {

struct ResNetConfig {
  int64_t depth = 18;          // 18, 34 or 50
  int64_t numClasses = 1000;
  int64_t width = 64;          // channels of the stem and the first stage; each later stage doubles them
  std::string stem = "imagenet";  // "imagenet": 7x7/2 convolution + 3x3/2 max pool; "cifar": 3x3/1, no pool
  std::string norm = "batch";     // "batch" (running statistics as state) or "group" (gcd(32, channels) groups)
  int64_t imageSize = 224;     // pixels a side (FLOPs only: the model takes any size)
  int64_t channels = 3;
  double bnMomentum = 0.99;    // Flax's convention (PyTorch's 0.1)
  double eps = 1e-5;
  DType dtype = DType::F32;
};

// The depths ResNetConfig::depth takes.
const std::vector<int64_t>& resnetDepths();

class ResNet {
 public:
  explicit ResNet(ResNetConfig config);
  const ResNetConfig& config() const { return m_cfg; }

  Tree init(const Array& key) const;
  // The running statistics at their start (means 0, variances 1); an empty dict with group norm.
  Tree initState() const;
  // pixels: [B, C, H, W] (NCHW, as the data kinds and torchvision give them) -> logits [B, numClasses]. Batch
  // norm normalises with the batch's statistics when ctx.training() (and sets ctx's updated state), else with
  // ctx.state()'s.
  Array apply(const Tree& params, const Array& pixels, Context& ctx) const;
  int64_t numParams() const;
  // Multiply-adds of one image's forward pass at imageSize (convolutions and the head).
  double forwardMacsPerSample() const;

 private:
  struct Block {
    int64_t in, planes, out, stride;
    bool project;  // a 1x1 convolution + norm on the shortcut
  };
  struct Stage {
    std::vector<Block> blocks;
  };
  class Pass;  // one apply's walk over the layers

  bool bottleneck() const { return m_cfg.depth >= 50; }
  int64_t features() const;  // channels into the head

  ResNetConfig m_cfg;
  std::vector<Stage> m_stages;
};

}  // namespace tsr::nn
