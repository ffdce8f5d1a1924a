#pragma once
// A project's model and optimiser as a training run builds them: `tessera train`, `tessera bench`, evaluation and
// generation all go through here, so they measure and load the same thing.
#include <functional>
#include <optional>
#include <string>

#include "engine/core/result.h"
#include "engine/optim/optim.h"
#include "engine/project/project.h"
#include "engine/train/safetensors.h"
#include "engine/train/trainer.h"

namespace tsr::train {

// The model of a project, without its weights, as its family builds it (project/model_family.h): init, the
// loss of [train] on its logits, and the forward (a language model's [B, T] -> [B, T, V]).
struct ProjectModel {
  const project::ModelFamily* family = nullptr;
  std::function<Tree(const Array& key)> init;
  TrainLossFn loss;
  // The model's state at its start (BatchNorm's running statistics: FamilyModel::initState); empty: none.
  std::function<Tree()> initState;
  // inputs -> logits, no dropout, in inference with the state given (an empty Tree for a model without);
  // empty for a model that gives only its loss (a Python model without logits)
  std::function<Array(const Tree& params, const Tree& state, const Array& inputs)> forward;
  int64_t numParams = 0;
  // Model FLOPs of a training step per item: 6 N (+ 12 L C T attention for gpt2), the PaLM/nanoGPT estimate.
  double trainFlopsPerItem = 0, forwardFlopsPerItem = 0;
  std::string flopsRule;
  std::string itemName = "samples";  // "tokens" for a language model
  project::BatchSignature batch;     // what a step trains on, at [train] batch_size and seq_len
  // [precision] compute: bf16 when the loss and forward are traced under autocast (engine/transform/autocast.h)
  std::optional<DType> computeDType;
};

// The autocast dtype of [precision] compute: bf16 for "bf16", none for "f32".
std::optional<DType> computeDTypeOf(const project::Project& p);

// The vocabulary a language-model project is configured for: GPT-2's 50257 with its tokenizer, else [data]
// vocab_size.
int64_t configuredVocab(const project::Project& p);

// `vocab` is the tokenizer's size (language models only; <= 0: the configured one). Errors: a family whose
// build fails (a plugin's, say) is reported, not thrown.
Result<ProjectModel> buildModel(const project::Project& p, int64_t vocab);

// The learning rate of [train] (schedule, lr, min_lr, warmup_steps and the schedule's own keys) over `steps`.
optim::Schedule makeSchedule(const project::TrainSection& t, int64_t steps);

// The optimiser of [train] (adamw | adam | sgd), after clip_by_global_norm when grad_clip > 0.
optim::GradientTransformation makeOptimizer(const project::TrainSection& t, const optim::Schedule& lr);

// The loss a project trains with: cross-entropy on labels, or MSE against one-hot labels ([train] loss).
Array projectLoss(const project::TrainSection& t, const Array& logits, const Array& labels);

// The tensors of a checkpoint whose names start with `prefix`, with the prefix removed.
SafetensorsFile readCheckpointPart(const SafetensorsFile& ck, const std::string& prefix);

// Parameters shaped like `like` from a checkpoint written by a training run, or weights saved by Hugging Face.
Result<Tree> loadCheckpointParams(const std::string& path, const Tree& like);
// The model's state (the "batch_stats." tensors) shaped like `like` from a checkpoint written by a training run;
// `like` itself when it is empty (a model without state).
Result<Tree> loadCheckpointState(const std::string& path, const Tree& like);

}  // namespace tsr::train
