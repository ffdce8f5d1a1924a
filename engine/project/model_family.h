#pragma once
// Model families that plugins add, usable from project.toml as `[model] family = "NAME"`. A plugin family is a
// language model: it reads GPT-2's [model] keys (vocab_size, block_size, n_layer, n_head, n_embd, dropout) into
// ModelSection::gpt2, plus its own keys (numbers with defaults) into ModelSection::extra, and trains on [data]
// text as gpt2 does. The core families (gpt2, vit, mlp) are not in this registry.
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/nn/gpt2.h"

namespace tsr::project {

struct FamilyKey {
  std::string name;        // the key in [model]
  double defaultValue = 0;
  bool integer = false;    // the value must be an integer
  double min = 0;          // values below are an error naming the key and its line
  std::string help;
};

// A built model: parameters as a Tree, tokens [B, T] -> logits [B, T, vocab].
struct FamilyModel {
  std::function<Tree(const Array& key)> init;
  std::function<Array(const Tree& params, const Array& tokens, nn::Context& ctx)> apply;
  int64_t numParams = 0;
  double trainFlopsPerToken = 0;  // model FLOPs of a training step per token (6 N + attention)
};

struct ModelFamily {
  std::string name;
  std::string description;
  std::vector<FamilyKey> keys;
  // cfg.vocabSize is the tokenizer's; extra holds every key of `keys`.
  std::function<FamilyModel(const nn::Gpt2Config& cfg, const std::map<std::string, double>& extra)> build;
  std::string origin;  // who added it (a plugin's path), for listings
};

bool isCoreFamily(std::string_view name);
// Fails on an empty name, a core family's name, a name already registered, or no build function.
Status registerModelFamily(ModelFamily family);
// The registered family, or null. Families are never removed, so the pointer stays valid.
const ModelFamily* findModelFamily(std::string_view name);
// The names of the registered families, in registration order.
std::vector<std::string> modelFamilyNames();

}  // namespace tsr::project
