#pragma once
// safetensors: an 8-byte little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, ...,
// "__metadata__": {...}}, then the raw little-endian tensor bytes. Hugging Face checkpoints use it, so GPT-2 and
// ViT weights load directly. Writes are atomic: a temp file in the same folder, fsync, rename.
#include <map>
#include <optional>
#include <string>

#include "engine/core/result.h"
#include "engine/transform/array.h"

namespace tsr::train {

struct SafetensorsFile {
  std::map<std::string, Array> tensors;          // by name ("h.0.attn.c_attn.weight")
  std::map<std::string, std::string> metadata;   // "__metadata__", string to string
};

Status writeSafetensors(const std::string& path, const SafetensorsFile& file);
Result<SafetensorsFile> readSafetensors(const std::string& path);
// The metadata alone, with every check readSafetensors makes on the header and the file's size (a truncated or
// garbled file fails here as there), without reading the tensors: whether a checkpoint is intact, and its step.
Result<std::map<std::string, std::string>> readSafetensorsMetadata(const std::string& path);

// A Tree's leaves by path, and back: every path of `like` must be present with the same aval.
SafetensorsFile treeToSafetensors(const Tree& tree, std::map<std::string, std::string> metadata = {});
Result<Tree> treeFromSafetensors(const SafetensorsFile& file, const Tree& like, const std::string& prefix = "");

// Weights saved by Hugging Face (model.safetensors of GPT2Model, GPT2LMHeadModel or ViTForImageClassification):
// every path of `like` is looked up as is or under "transformer."; extra tensors (attention-mask buffers, a tied
// lm_head.weight) are ignored; floating tensors of another float dtype (f16, bf16) are converted to like's.
Result<Tree> treeFromHuggingFace(const SafetensorsFile& file, const Tree& like);

}  // namespace tsr::train
