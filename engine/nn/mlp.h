#pragma once
// The MLP of the distributed-arrays tutorial (the mlp family): Dense layers with an activation and dropout
// between them.
#include <string>
#include <vector>

#include "engine/nn/layers.h"

namespace tsr::nn {

// The MLP of the distributed-arrays tutorial: 784-1024-1024-1024-10 with ReLU. params: layers.i.{weight
// [in, out], bias}.
struct MlpConfig {
  std::vector<int64_t> sizes = {784, 1024, 1024, 1024, 10};
  DType dtype = DType::F32;
  // After each hidden layer: relu | gelu (tanh approximation) | silu | tanh | sigmoid, then dropout (in training).
  std::string activation = "relu";
  double dropout = 0.0;
};
// The names MlpConfig::activation takes.
const std::vector<std::string>& mlpActivations();

class Mlp {
 public:
  explicit Mlp(MlpConfig config) : m_cfg(std::move(config)) {}
  const MlpConfig& config() const { return m_cfg; }
  Tree init(const Array& key) const;
  Array apply(const Tree& params, const Array& x, Context& ctx) const;  // x: [B, 784] -> logits [B, 10]
  int64_t numParams() const;

 private:
  MlpConfig m_cfg;
};

}  // namespace tsr::nn
