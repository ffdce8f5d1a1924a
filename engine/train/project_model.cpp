#include "engine/train/project_model.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "engine/project/model_family.h"
#include "engine/transform/autocast.h"
#include "engine/transform/trace.h"

namespace tsr::train {

int64_t configuredVocab(const project::Project& p) {
  return p.data.tokenizer == "gpt2" ? 50257 : p.data.vocabSize;
}

Array projectLoss(const project::TrainSection& t, const Array& logits, const Array& labels) {
  if (t.loss == "mse") return optim::meanSquaredError(logits, oneHot(labels, logits.shape().dims().back()));
  return optim::softmaxCrossEntropy(logits, labels);
}

std::optional<DType> computeDTypeOf(const project::Project& p) {
  if (p.precision == "bf16") return DType::BF16;
  return std::nullopt;
}

Result<ProjectModel> buildModel(const project::Project& p, int64_t vocab) {
  const auto& t = p.train;
  const project::ModelFamily* family = p.model.definition();
  if (!family) return makeError("{}: [model] family '{}' is not registered", p.file, p.model.family);
  TSR_TRY(project::checkModelFiles(p));  // model.py missing: said at its key's line
  ProjectModel m;
  m.family = family;
  const project::BuildContext context{family->languageModel ? (vocab > 0 ? vocab : configuredVocab(p)) : 0, t.seqLen,
                                      t.batchSize, p.dir, p.precision};
  std::shared_ptr<project::FamilyModel> model;
  try {
    TSR_ASSIGN(project::FamilyModel built, capture([&] { return family->build(p.model.config, context); }));
    model = std::make_shared<project::FamilyModel>(std::move(built));
    m.batch = family->languageModel ? project::tokenBatch(t.batchSize, t.seqLen, context.vocab)
                                    : family->batch(p.model.config, t.batchSize);
  } catch (const std::exception& e) {
    return makeError("{}: the {} family ({}) cannot build its model: {}", p.file, family->name, family->origin, e.what());
  }
  if (!model->init || (!model->apply && !model->loss))
    return makeError("{}: the {} family ({}) built a model without init, or with neither apply nor loss", p.file,
                     family->name, family->origin);
  m.init = model->init;
  // [precision] compute = "bf16": the model's loss and forward pass are traced under autocast (mixed precision:
  // bf16 products, f32 norms, softmax and loss; f32 parameters and optimizer state).
  // (A Python model is traced in its own interpreter, told by BuildContext::compute.)
  const std::optional<DType> compute = computeDTypeOf(p);
  m.computeDType = compute;
  if (model->loss) {
    m.loss = [model, compute](const Tree& prm, const Batch& b, nn::Context& ctx) {
      AutocastScope autocast(compute);
      return model->loss(prm, b.inputs, b.targets, ctx);
    };
  } else {
    m.loss = [model, t, compute, metrics = family->metrics](const Tree& prm, const Batch& b, nn::Context& ctx) {
      AutocastScope autocast(compute);
      Array logits = model->apply(prm, b.inputs, ctx);
      // Scored on evaluation batches only: the training step keeps the graph (and, under a mesh, the collectives)
      // its loss needs.
      if (metrics && !ctx.training()) {
        ModuleScope scope("metrics");
        metrics(logits, b.targets, ctx);
      }
      // The loss's ops (and their gradients) form a module of their own, beside the model's.
      ModuleScope scope("loss");
      return projectLoss(t, logits, b.targets);
    };
  }
  if (model->apply)
    m.forward = [model, compute](const Tree& prm, const Tree& state, const Array& inputs) {
      AutocastScope autocast(compute);
      nn::Context ctx;
      ctx.setState(state);
      return model->apply(prm, inputs, ctx);
    };
  m.initState = model->initState;
  m.numParams = model->numParams;
  m.trainFlopsPerItem = model->trainFlopsPerItem;
  m.flopsRule = model->flopsRule;
  if (family->languageModel) m.itemName = "tokens";
  // A training step is forward + backward (twice the forward): three forwards.
  m.forwardFlopsPerItem = m.trainFlopsPerItem / 3.0;
  return m;
}

optim::Schedule makeSchedule(const project::TrainSection& t, int64_t steps) {
  steps = std::max<int64_t>(steps, 1);
  if (t.schedule == "warmup_cosine") return optim::warmupCosineSchedule(t.lr, t.warmupSteps, steps, t.minLr);
  if (t.schedule == "wsd") return optim::wsdSchedule(t.lr, t.warmupSteps, steps, t.decayFraction, t.minLr);
  // The others after a linear warmup, counted from its end.
  const int64_t rest = std::max<int64_t>(steps - t.warmupSteps, 1);
  optim::Schedule after;
  if (t.schedule == "constant") after = optim::constantSchedule(t.lr);
  else if (t.schedule == "linear") after = optim::linearSchedule(t.lr, t.minLr, rest);
  else if (t.schedule == "cosine") after = optim::cosineSchedule(t.lr, rest, t.minLr);
  else after = optim::stepSchedule(t.lr, t.stepEvery, t.stepGamma);
  if (t.warmupSteps <= 0) return after;
  return optim::joinSchedules(optim::linearSchedule(0.0, t.lr, t.warmupSteps), after, t.warmupSteps);
}

optim::GradientTransformation makeOptimizer(const project::TrainSection& t, const optim::Schedule& lr) {
  optim::GradientTransformation opt;
  if (t.optimizer == "sgd") opt = optim::sgd(lr, t.momentum, t.nesterov, t.weightDecay);
  else if (t.optimizer == "adam") opt = optim::adam(lr, t.beta1, t.beta2, 1e-8, t.weightDecay);
  else opt = optim::adamw(lr, t.beta1, t.beta2, 1e-8, t.weightDecay);
  if (t.gradClip > 0) return optim::chain({optim::clipByGlobalNorm(t.gradClip), opt});
  return opt;
}

SafetensorsFile readCheckpointPart(const SafetensorsFile& ck, const std::string& prefix) {
  SafetensorsFile part;
  for (const auto& [name, a] : ck.tensors)
    if (name.rfind(prefix, 0) == 0) part.tensors[name.substr(prefix.size())] = a;
  return part;
}

Result<Tree> loadCheckpointParams(const std::string& path, const Tree& like) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return makeError("checkpoint {} does not exist", path);
  TSR_ASSIGN(SafetensorsFile ck, readSafetensors(path));
  SafetensorsFile params = readCheckpointPart(ck, "params.");
  // A file without "params." tensors is not one of ours: read it as Hugging Face weights.
  auto tree = params.tensors.empty() ? treeFromHuggingFace(ck, like) : treeFromSafetensors(params, like);
  if (!tree.ok()) return makeError("checkpoint {} does not match the project's model: {}", path, tree.error().message);
  return tree;
}

}  // namespace tsr::train

namespace tsr::train {

Result<Tree> loadCheckpointState(const std::string& path, const Tree& like) {
  if (like.leaves().empty()) return like;
  TSR_ASSIGN(SafetensorsFile ck, readSafetensors(path));
  auto tree = treeFromSafetensors(readCheckpointPart(ck, "batch_stats."), like);
  if (!tree.ok())
    return makeError("checkpoint {} does not hold the model's state (batch_stats.*, its running statistics): {}", path,
                     tree.error().message);
  return tree;
}

}  // namespace tsr::train
