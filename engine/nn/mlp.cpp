#include "engine/nn/mlp.h"

#include <cmath>

#include "engine/random/random.h"

namespace tsr::nn {

namespace {

Array activate(const std::string& name, const Array& h) {
  if (name == "gelu") return gelu(h, true);
  if (name == "silu") return h * sigmoid(h);
  if (name == "tanh") return tanh(h);
  if (name == "sigmoid") return sigmoid(h);
  if (name == "relu") return relu(h);
  raise(makeError("mlp: unknown activation '{}'", name));
}

}  // namespace

Tree Mlp::init(const Array& key) const {
  const auto& s = m_cfg.sizes;
  Array keys = random::split(key, static_cast<int64_t>(s.size()));
  Tree layers = Tree::list();
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    // He initialisation for ReLU layers.
    double std = std::sqrt(2.0 / static_cast<double>(s[i]));
    layers.push(Dense{s[i], s[i + 1], true, WeightLayout::InOut, std, m_cfg.dtype}.init(keyAt(keys, static_cast<int64_t>(i))));
  }
  return Tree::dict({{"layers", layers}});
}

const std::vector<std::string>& mlpActivations() {
  static const std::vector<std::string> names = {"relu", "gelu", "silu", "tanh", "sigmoid"};
  return names;
}

Array Mlp::apply(const Tree& params, const Array& x, Context& ctx) const {
  const auto& s = m_cfg.sizes;
  const Tree& layers = *params.find("layers");
  Array h = x;
  for (size_t i = 0; i + 1 < s.size(); ++i) {
    ModuleScope scope("layers." + std::to_string(i));
    h = Dense{s[i], s[i + 1]}.apply(layers.child(i), h);
    if (i + 2 < s.size()) h = Dropout{m_cfg.dropout}.apply(activate(m_cfg.activation, h), ctx);
  }
  return h;
}

int64_t Mlp::numParams() const {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < m_cfg.sizes.size(); ++i) n += m_cfg.sizes[i] * m_cfg.sizes[i + 1] + m_cfg.sizes[i + 1];
  return n;
}

}  // namespace tsr::nn
