#include "engine/train/setup.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/core/limits.h"
#include "engine/nn/attention.h"
#include "engine/nn/conv_layers.h"
#include "engine/random/random.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/trace.h"

namespace tsr::train {

namespace {

// The project's [mesh] and [sharding] rules: a mesh of more than one device makes the step an SPMD program.
Status configureSharding(const project::Project& p, Trainer& trainer, const std::function<void(const std::string&)>& info) {
  int64_t n = 1;
  for (int64_t d : p.mesh.shape) n *= d;
  if (n <= 1) return {};
  auto mesh = sharding::Mesh::create(p.mesh.shape, p.mesh.axes);
  if (!mesh.ok()) return makeError("{}: [mesh]: {}", p.file, mesh.error().message);
  TSR_ASSIGN(auto devices, spmd::devices());
  if (devices->numDevices() < mesh->size())
    return makeError("{}: [mesh] {} needs {} devices, but this process has {} (set TESSERA_CPU_DEVICES={} for "
                     "virtual CPU devices, or launch {} processes with mpirun)",
                     p.file, mesh->toString(), mesh->size(), devices->numDevices(), mesh->size(), mesh->size());
  if (devices->kind() == "mpi" && devices->numDevices() != mesh->size())
    return makeError("{}: [mesh] {} has {} devices, but mpirun started {} processes (one device each): launch {}",
                     p.file, mesh->toString(), mesh->size(), devices->numDevices(), mesh->size());
  // The batch is split over the mesh's first axis (placement.h): one it does not divide is refused here, in the
  // project's terms, before a run starts (each batch is checked again as it is placed).
  if (const int64_t first = mesh->shape[0]; p.train.batchSize % first != 0)
    return makeError("{}: [train] batch_size {} is split over the mesh's first axis '{}' of size {}, which does not "
                     "divide it; make batch_size a multiple of {}",
                     p.file, p.train.batchSize, mesh->axes[0], first, first);
  TrainSharding s{*mesh, {}};
  for (const auto& r : p.sharding) s.rules.emplace_back(r.pattern, r.spec);
  auto st = trainer.setSharding(std::move(s));
  if (!st.ok()) return makeError("{}: [sharding]: {}", p.file, st.error().message);
  info(fmt::format("{} over {} {} devices, {} sharding rules", mesh->toString(), mesh->size(), devices->kind(),
                   p.sharding.size()));
  return {};
}

// The [sharding] rules against every parameter and optimizer-state leaf, from their avals, before anything is
// allocated: a rule that does not divide what it matches is an error naming the file, the rule and the leaf.
Status checkRules(const project::Project& p, const TreeOf<Aval>& avals) {
  TSR_ASSIGN(sharding::Mesh mesh, sharding::Mesh::create(p.mesh.shape, p.mesh.axes));
  if (mesh.size() <= 1) return {};
  std::vector<std::pair<std::string, std::string>> rules;
  for (const auto& r : p.sharding) rules.emplace_back(r.pattern, r.spec);
  TSR_ASSIGN(PlacementPolicy policy, PlacementPolicy::create(std::move(mesh), rules, {}, p.file + ": [sharding]"));
  const std::vector<Aval> leaves = avals.leaves();
  const std::vector<ArgumentPath> paths = argumentPaths(avals.paths());
  for (size_t i = 0; i < paths.size() && i < leaves.size(); ++i) TSR_TRY(policy.place(paths[i], leaves[i].shape));
  return {};
}

}  // namespace

Result<Batch> TrainingSetup::next() const {
  if (!train) return makeError("{}: this setup reads no data", project.file);
  return train->next();
}

Result<TrainingSetup> makeTrainingSetup(const project::Project& project, const SetupOverrides& o) {
  auto info = [&](const std::string& line) {
    if (o.info) o.info(line);
  };
  TrainingSetup s;
  s.project = project;
  const project::Project& p = s.project;
  project::TrainSection& t = s.project.train;
  if (o.batchSize > 0) t.batchSize = o.batchSize;
  if (o.seqLen > 0) t.seqLen = o.seqLen;
  const bool lm = p.model.languageModel();
  if (const int64_t context = p.model.contextLength(); lm && context > 0 && t.seqLen > context)
    return makeError("{}: sequence length {} exceeds the model's context of {} tokens", p.file, t.seqLen, context);

  int64_t vocab = 0;
  if (o.data) {
    // Under mpirun every rank reads the same data; rank 0 prepares (and caches) it first, the others then read
    // its cache.
    TSR_ASSIGN(const bool primary, spmd::isPrimaryProcess());
    if (!primary) TSR_TRY(spmd::processBarrier());
    auto prepared = prepareData(p, info);
    if (primary) TSR_TRY(spmd::processBarrier());
    TSR_ASSIGN(ProjectData data, std::move(prepared));
    s.train = std::move(data.train);
    s.val = std::move(data.val);
    s.tokenizer = std::move(data.tokenizer);
    if (s.tokenizer) vocab = s.tokenizer->vocabSize();
    s.itemsPerBatch = s.train->itemsPerBatch();
  } else {
    s.itemsPerBatch = lm ? t.batchSize * t.seqLen : t.batchSize;
  }
  TSR_ASSIGN(s.model, buildModel(p, vocab));
  info(fmt::format("{}: {} with {} parameters, batch {}{}, {}", p.name, p.model.family, s.model.numParams,
                   t.batchSize, lm ? fmt::format(" x {} tokens", t.seqLen) : "", t.optimizer));

  const int64_t scheduleSteps = o.scheduleSteps >= 0 ? o.scheduleSteps : t.steps;
  optim::Schedule lr = makeSchedule(t, scheduleSteps);
  optim::GradientTransformation opt = makeOptimizer(t, lr);
  s.trainer = std::make_unique<Trainer>(s.model.loss, opt, lr, t.seed);
  // [train] remat: "blocks" recomputes each block whole in the backward pass, "dots_saveable" keeps its matmuls.
  s.trainer->setRemat(t.remat == "blocks"          ? RematPolicy::NothingSaveable
                      : t.remat == "dots_saveable" ? RematPolicy::DotsSaveable
                                                   : RematPolicy::None);
  // Products under bf16 autocast are bf16 whatever the f32 matmul precision: attention fuses as with bf16 matmuls.
  s.trainer->setFusedAttention(
      nn::fusedAttentionFor(envOptions().device, s.model.computeDType ? "bf16" : envOptions().matmulPrecision));
  s.trainer->setFusedBatchNorm(nn::fusedBatchNorm());
  if (o.mesh) TSR_TRY(configureSharding(p, *s.trainer, info));

  // The avals of the parameters, the optimizer state and the model's state, from an abstract trace of their
  // init: what the state takes is known before any of it is allocated.
  const auto& init = s.model.init;
  const auto& initState = s.model.initState;
  Result<ClosedGraph> traced = makeGraph([&](const Tree& key) {
    Tree params = init(key.leaf());
    Tree state = Tree::dict({{"params", params}, {"opt", opt.init(params)}});
    if (initState) state.set("batch_stats", initState());
    return state;
  }, TreeOf<Aval>(Aval{Shape{2}, DType::U32}), "init");
  // A model far beyond this machine can fail its init's trace on something else first (a 3.3T-parameter GPT-2
  // draws more random words than one key has counters): its parameter count alone (4 bytes each at the least)
  // then says what is wrong.
  if (!traced.ok() && o.materialize && s.model.numParams > 0 && s.model.numParams <= INT64_MAX / 4) {
    const std::string params = fmt::format("the parameters of {} ({} parameters, 4 bytes each, before any {} state)",
                                           p.model.family, s.model.numParams, t.optimizer);
    if (auto st = limits::checkFitsInMemory(params, s.model.numParams * 4); !st.ok())
      return makeError("{}: {}; make the model smaller in [model]", p.file, st.error().message);
  }
  TSR_ASSIGN(ClosedGraph g, std::move(traced));
  std::vector<Aval> avals;
  int64_t stateBytes = 0;
  for (ir::ValueId v : g.graph.outputs()) {
    avals.push_back(g.graph.aval(v));
    stateBytes += avals.back().bytes();
  }
  TSR_ASSIGN(s.avals, TreeOf<Aval>::unflatten(g.outputTree, std::move(avals)));
  if (o.mesh) TSR_TRY(checkRules(p, *s.avals));
  if (o.materialize) {
    const std::string what = fmt::format("the parameters and {} state of {} ({} parameters)", t.optimizer,
                                         p.model.family, s.model.numParams);
    if (auto st = limits::checkFitsInMemory(what, stateBytes); !st.ok())
      return makeError("{}: {}; make the model smaller in [model]", p.file, st.error().message);
    TSR_ASSIGN(Tree params, capture([&] { return s.model.init(random::key(t.seed)); }));
    TSR_ASSIGN(Tree stats, capture([&] { return initState ? initState() : Tree(); }));
    TSR_ASSIGN(s.state, capture([&] { return s.trainer->init(std::move(params), std::move(stats)); }));
  }
  return s;
}

}  // namespace tsr::train
