#pragma once
// ViT with the Hugging Face ViTForImageClassification parameter names and layouts
// (vit.embeddings.patch_embeddings.projection.weight [768, 3, 16, 16], vit.encoder.layer.0.attention.attention.
// query.weight [out, in], ..., classifier.weight), so its safetensors load directly.
#include <vector>

#include "engine/nn/layers.h"

namespace tsr::nn {

struct VitConfig {
  int64_t imageSize = 224;
  int64_t patchSize = 16;
  int64_t channels = 3;
  int64_t hidden = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t mlp = 3072;
  int64_t numClasses = 1000;
  double dropout = 0.0;
  double layerNormEps = 1e-12;
  DType dtype = DType::F32;

  static VitConfig base16() { return {}; }  // ViT-B/16: 86,567,656 parameters
  int64_t numPatches() const { return (imageSize / patchSize) * (imageSize / patchSize); }
};

class Vit {
 public:
  explicit Vit(VitConfig config) : m_cfg(config) {}
  const VitConfig& config() const { return m_cfg; }

  Tree init(const Array& key) const;
  // pixels: [B, C, H, W] (NCHW, as the HF model takes them) -> logits [B, numClasses]
  Array apply(const Tree& params, const Array& pixels, Context& ctx) const;
  int64_t numParams() const;

 private:
  Array layer(const Tree& p, const Array& x, Context& ctx) const;
  VitConfig m_cfg;
};

}  // namespace tsr::nn
