#pragma once
// GPT-2 with the Hugging Face checkpoint's parameter names and layouts (wte.weight, wpe.weight,
// h.0.ln_1.weight, h.0.attn.c_attn.weight stored [in, out], ..., ln_f.weight), so a GPT-2 model.safetensors
// loads directly. The output head is tied to wte.
//
// qkvHeads keeps c_attn's numbers but views them by head: c_attn.weight [C, 3, H, D] and c_attn.bias [3, H, D]
// (the same elements as [C, 3C] and [3C] in row-major order; Hugging Face weights load into it by reshape). A
// PartitionSpec can then split the heads ("None, None, model, None"), which a split of the fused 3C columns
// cannot: its first half holds all of q and half of k. This is the layout for tensor parallelism (as Flax's
// DenseGeneral with features (3, H, D)).
#include <array>
#include <string>

#include "engine/nn/layers.h"

namespace tsr::nn {

struct Gpt2Config {
  int64_t vocabSize = 50257;
  int64_t blockSize = 1024;  // n_positions
  int64_t nLayer = 12;
  int64_t nHead = 12;
  int64_t nEmbd = 768;
  double dropout = 0.0;
  double layerNormEps = 1e-5;
  DType dtype = DType::F32;
  bool qkvHeads = false;  // c_attn as [C, 3, H, D] (see above)

  static Gpt2Config small() { return {}; }  // 124M: 124,439,808 parameters
  static Gpt2Config medium() { return {50257, 1024, 24, 16, 1024}; }
  static Gpt2Config large() { return {50257, 1024, 36, 20, 1280}; }
  static Gpt2Config xl() { return {50257, 1024, 48, 25, 1600}; }
};

class Gpt2 {
 public:
  explicit Gpt2(Gpt2Config config) : m_cfg(config) {}
  const Gpt2Config& config() const { return m_cfg; }

  Tree init(const Array& key) const;
  // tokens: [B, T] integer -> logits [B, T, vocab]
  Array apply(const Tree& params, const Array& tokens, Context& ctx) const;
  int64_t numParams() const;
  // Forward FLOPs per token (matmuls and attention, as in the PaLM/nanoGPT MFU estimate: 6N + 12 L H Q T for
  // a training step; this returns the training-step figure).
  double trainFlopsPerToken(int64_t seqLen) const;

 private:
  Array block(const Tree& p, const Array& x, Context& ctx) const;
  Tree headsView(const Tree& cAttn) const;
  std::array<Array, 3> qkv(const Tree& cAttn, const Array& x) const;
  Gpt2Config m_cfg;
};

}  // namespace tsr::nn
