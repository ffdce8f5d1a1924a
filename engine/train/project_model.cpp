#include "engine/train/project_model.h"

#include <filesystem>
#include <memory>

#include "engine/nn/gpt2.h"
#include "engine/nn/vit.h"
#include "engine/project/model_family.h"

namespace tsr::train {

int64_t configuredVocab(const project::Project& p) {
  return p.data.tokenizer == "gpt2" ? 50257 : p.data.vocabSize;
}

Array projectLoss(const project::TrainSection& t, const Array& logits, const Array& labels) {
  if (t.loss == "mse") return optim::meanSquaredError(logits, oneHot(labels, logits.shape().dims().back()));
  return optim::softmaxCrossEntropy(logits, labels);
}

ProjectModel buildModel(const project::Project& p, int64_t vocab) {
  const auto& t = p.train;
  ProjectModel m;
  auto attach = [&](auto model) {
    m.init = [model](const Array& key) { return model->init(key); };
    m.loss = [model, t](const Tree& prm, const Batch& b, nn::Context& ctx) {
      return projectLoss(t, model->apply(prm, b.inputs, ctx), b.targets);
    };
    m.numParams = model->numParams();
  };
  if (p.model.family == "gpt2") {
    nn::Gpt2Config cfg = p.model.gpt2;
    cfg.vocabSize = vocab > 0 ? vocab : configuredVocab(p);
    auto model = std::make_shared<nn::Gpt2>(cfg);
    attach(model);
    m.lmForward = [model](const Tree& prm, const Array& tokens) {
      nn::Context ctx;
      return model->apply(prm, tokens, ctx);
    };
    m.trainFlopsPerItem = model->trainFlopsPerToken(t.seqLen);
    m.itemName = "tokens";
  } else if (const project::ModelFamily* family = project::findModelFamily(p.model.family)) {
    // A plugin's language model (project/model_family.h), configured as gpt2 is plus its own keys.
    nn::Gpt2Config cfg = p.model.gpt2;
    cfg.vocabSize = vocab > 0 ? vocab : configuredVocab(p);
    auto model = std::make_shared<project::FamilyModel>(family->build(cfg, p.model.extra));
    m.init = model->init;
    m.loss = [model, t](const Tree& prm, const Batch& b, nn::Context& ctx) {
      return projectLoss(t, model->apply(prm, b.inputs, ctx), b.targets);
    };
    m.lmForward = [model](const Tree& prm, const Array& tokens) {
      nn::Context ctx;
      return model->apply(prm, tokens, ctx);
    };
    m.numParams = model->numParams;
    m.trainFlopsPerItem = model->trainFlopsPerToken;
    m.itemName = "tokens";
  } else if (p.model.family == "vit") {
    auto model = std::make_shared<nn::Vit>(p.model.vit);
    attach(model);
    m.trainFlopsPerItem = 6.0 * static_cast<double>(m.numParams) * static_cast<double>(p.model.vit.numPatches() + 1);
  } else {
    auto model = std::make_shared<nn::Mlp>(p.model.mlp);
    attach(model);
    m.trainFlopsPerItem = 6.0 * static_cast<double>(m.numParams);
  }
  // A training step is forward + backward (twice the forward): three forwards.
  m.forwardFlopsPerItem = m.trainFlopsPerItem / 3.0;
  return m;
}

optim::GradientTransformation makeOptimizer(const project::TrainSection& t, const optim::Schedule& lr) {
  optim::GradientTransformation opt;
  if (t.optimizer == "sgd") opt = optim::sgd(lr, t.momentum);
  else if (t.optimizer == "adam") opt = optim::adam(lr, t.beta1, t.beta2);
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
