#pragma once
// Model families: what `[model] family = "NAME"` in project.toml names. Every family, the core ones (gpt2, vit,
// mlp, resnet, unet; core_families.cpp) and those plugins add (plugin::Host::addModelFamily), is one ModelFamily record in one
// registry, and nothing outside this registry tests a family by name. A family declares:
//   - its [model] keys, with their types, defaults, ranges and doc strings: project.toml validation, the IDE's
//     settings form and New Project dialog, and `tessera families` all read this declaration;
//   - the [data] kinds it trains on, and whether it is a language model (tokens [B, T] -> logits [B, T, V],
//     trained on text, able to generate);
//   - the batch it trains on, and its model: init, apply (inputs -> logits; the loss is the project's [train]
//     loss on them), parameter count and FLOPs.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/tree.h"
#include "engine/nn/gpt2.h"

namespace tsr::project {

enum class KeyType {
  Integer,  // a TOML integer in [min, max]
  Number,   // a TOML number in [min, max] (or [min, max) with maxOpen)
  Text,     // a TOML string, one of `choices` when there are any
  Sizes,    // a TOML array of integers, each in [1, max], their product at most `product`
};
std::string_view keyTypeName(KeyType t);  // "integer", "number", "string", "array of integers"

using KeyValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;
// A value as project.toml spells it: 12, 0.1, "heads", [784, 10].
std::string keyValueToml(const KeyValue& v);

struct FamilyKey {
  std::string name;  // the key in [model]
  KeyType type = KeyType::Integer;
  KeyValue defaultValue = int64_t(0);
  std::string help;  // one line: what the key means
  double min = 1;
  double max = 1e18;
  bool maxOpen = false;                // Number: max itself is out of range
  int64_t minCount = 1;                // Sizes: at least this many
  int64_t product = INT64_MAX;         // Sizes: the product of the sizes at most this
  std::vector<std::string> choices;    // Text: the accepted values
  std::string requirement;             // the words after "must be" in an error; empty: from the range
  // Text: a file relative to the project folder that the model reads (a Python model's model.py). Building the
  // model checks that it exists, and the error names the key's line in project.toml (checkModelFiles).
  bool projectFile = false;

  // The words after "'key' must be" when a value is out of range: "positive", "in [0, 1)", "heads or fused".
  std::string describeRequirement() const;
};

// A family's [model] values: every declared key, set from project.toml or its default. Reading a key the family
// did not declare throws std::out_of_range (a family's own mistake, caught where its functions are called).
class ModelConfig {
 public:
  int64_t integer(std::string_view key) const;
  double number(std::string_view key) const;
  const std::string& text(std::string_view key) const;
  const std::vector<int64_t>& sizes(std::string_view key) const;
  const KeyValue& at(std::string_view key) const;
  bool has(std::string_view key) const;
  void set(const std::string& key, KeyValue value) { m_values[key] = std::move(value); }
  const std::map<std::string, KeyValue, std::less<>>& values() const { return m_values; }

 private:
  std::map<std::string, KeyValue, std::less<>> m_values;
};

// The tensors of one training batch: inputs and integer labels in [0, classes).
struct BatchSignature {
  Aval inputs, targets;
  int64_t classes = 0;  // the label range: the vocabulary of a language model, the classes of a classifier
};

// A built model: parameters as a Tree, inputs -> logits.
struct FamilyModel {
  std::function<Tree(const Array& key)> init;
  std::function<Array(const Tree& params, const Array& inputs, nn::Context& ctx)> apply;
  // The model's own loss on a batch, where it has one (a Python model's `loss`): then the project's [train] loss
  // is not used, and `apply` may be empty (no logits: no accuracy, no `tessera logits`, no generation).
  std::function<Array(const Tree& params, const Array& inputs, const Array& targets, nn::Context& ctx)> loss;
  // The model's state at its start, where it keeps one beside its parameters (BatchNorm's running statistics,
  // Flax's "batch_stats"): apply reads it from nn::Context::state and, in training, leaves the updated one in
  // Context::updatedState. Not parameters: no gradient, no optimizer; the Trainer carries it through each step
  // and checkpoints keep it. Empty: a model without state.
  std::function<Tree()> initState;
  int64_t numParams = 0;
  double trainFlopsPerItem = 0;  // model FLOPs of a training step per item (token or sample)
  std::string flopsRule;         // how, for reports: "6*N*samples"
};

// What a family's functions are given besides the config.
struct BuildContext {
  int64_t vocab = 0;      // a language model's vocabulary (the tokenizer's)
  int64_t seqLen = 0;     // [train] seq_len
  int64_t batchSize = 0;  // [train] batch_size
  std::string projectDir;  // the project folder (where a Python model's file is)
  // [precision] compute: "bf16" when the model is traced under autocast. C++ families are traced under it by
  // the caller; a Python model's tracer needs to be told (it runs in its own interpreter).
  std::string compute = "f32";
};

struct ModelFamily {
  std::string name;
  std::string description;
  std::vector<FamilyKey> keys;
  // [model] keys it does not declare are kept as written (integers, numbers, strings, arrays of integers) and
  // handed to the model (a Python model's cfg) instead of being unknown-key errors.
  bool openKeys = false;
  std::vector<std::string> dataKinds = {"text"};  // [data] kinds it trains on; the first is the default
  // Tokens [B, T] -> logits [B, T, V], trained on [data] text: the vocabulary comes from the tokenizer, the batch
  // is [batch_size, seq_len] tokens with next-token targets, and generate/logits work. `contextKey` names the
  // integer key that bounds seq_len (block_size).
  bool languageModel = false;
  std::string contextKey;
  // Its model runs each block through nn::applyBlock, so [train] remat = "blocks" | "dots_saveable" can recompute
  // the blocks in the backward pass.
  bool rematBlocks = false;
  // Rules across keys, checked after each key is in range (n_embd divisible by n_head); the message is prefixed
  // with the project file. Optional.
  std::function<Status(const ModelConfig&)> check;
  std::function<FamilyModel(const ModelConfig&, const BuildContext&)> build;
  // The batch a step trains on. Language models need none (tokens and next tokens).
  std::function<BatchSignature(const ModelConfig&, int64_t batchSize)> batch;
  // What the model's logits score against the labels on evaluation batches, reported beside the loss
  // (nn::Context::sow; a run logs each as val_NAME, `tessera eval` prints it): a classifier's accuracy, a
  // segmentation model's pixel_accuracy and mean_iou (optim/metrics.h). Not called in training steps, whose graph
  // stays the loss's. Empty: none. Not called for a model that gives its own loss (it reports its own metrics).
  std::function<void(const Array& logits, const Array& labels, nn::Context& ctx)> metrics;
  std::string origin;  // "core" for gpt2, vit, mlp, resnet and unet; a plugin's path; empty for one registered by the program
};

// A declaration's own faults: an empty name, no build function, a non-language model without a batch function,
// no data kinds, keys whose defaults do not match their types.
Status validateModelFamily(const ModelFamily& family);
// Fails as validateModelFamily does, and on a name already registered (a core family's included).
Status registerModelFamily(ModelFamily family);
// The registered family, or null. Families are never removed, so the pointer stays valid.
const ModelFamily* findModelFamily(std::string_view name);
// The names of the registered families: the core ones first, then in registration order.
std::vector<std::string> modelFamilyNames();
bool isCoreFamily(std::string_view name);

// Every declared key at its default.
ModelConfig defaultConfig(const ModelFamily& family);

// GPT-2's [model] keys and its config, for plugin families that are GPT-2 shaped (they read the same keys and
// add their own).
std::vector<FamilyKey> gpt2Keys();
nn::Gpt2Config gpt2Config(const ModelConfig& config, const BuildContext& context);
Status checkGpt2(const ModelConfig& config);

// The batch of a language model: [batch, seqLen] tokens and next tokens in [0, vocab).
BatchSignature tokenBatch(int64_t batchSize, int64_t seqLen, int64_t vocab);

}  // namespace tsr::project
