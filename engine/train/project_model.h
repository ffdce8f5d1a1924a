#pragma once
// A project's model and optimiser as a training run builds them: `tessera train`, `tessera bench`, evaluation and
// generation all go through here, so they measure and load the same thing.
#include <functional>
#include <string>

#include "engine/core/result.h"
#include "engine/optim/optim.h"
#include "engine/project/project.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"

namespace tsr::train {

// The model of a project, without its weights: init, loss, and the LM forward for gpt2.
struct ProjectModel {
  std::function<Tree(const Array& key)> init;
  TrainLossFn loss;
  std::function<Array(const Tree& params, const Array& tokens)> lmForward;  // gpt2 only: [B, T] -> [B, T, V]
  int64_t numParams = 0;
  // Model FLOPs of a training step per item: 6 N (+ 12 L C T attention for gpt2), the PaLM/nanoGPT estimate.
  double trainFlopsPerItem = 0, forwardFlopsPerItem = 0;
  std::string itemName = "samples";
};

// The vocabulary a gpt2 project is configured for: GPT-2's 50257 with its tokenizer, else [data] vocab_size.
int64_t configuredVocab(const project::Project& p);

// `vocab` is the tokenizer's size (gpt2 only; <= 0: the configured one).
ProjectModel buildModel(const project::Project& p, int64_t vocab);

// The optimiser of [train] (adamw | adam | sgd), after clip_by_global_norm when grad_clip > 0.
optim::GradientTransformation makeOptimizer(const project::TrainSection& t, const optim::Schedule& lr);

// The loss a project trains with: cross-entropy on labels, or MSE against one-hot labels ([train] loss).
Array projectLoss(const project::TrainSection& t, const Array& logits, const Array& labels);

// The tensors of a checkpoint whose names start with `prefix`, with the prefix removed.
SafetensorsFile readCheckpointPart(const SafetensorsFile& ck, const std::string& prefix);

// Parameters shaped like `like` from a checkpoint written by a training run, or weights saved by Hugging Face.
Result<Tree> loadCheckpointParams(const std::string& path, const Tree& like);

}  // namespace tsr::train
