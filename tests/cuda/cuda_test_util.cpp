#include "tests/cuda/cuda_test_util.h"

#include <cstdlib>
#include <cstring>

#include "engine/core/dtype.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/project/project.h"
#include "engine/random/random.h"
#include "engine/train/project_model.h"
#include "engine/train/trainer.h"

namespace tsr::test {

// The source tree: where the binary was built, or TESSERA_SOURCE_DIR (the GPU kit runs elsewhere).
std::string sourceDir() {
  const char* v = std::getenv("TESSERA_SOURCE_DIR");
  return v && *v ? v : TSR_SOURCE_DIR;
}

Result<ClosedGraph> projectStepGraph(const std::string& name, int64_t batch, int64_t seq) {
  TSR_ASSIGN(project::Project p, project::loadProject(sourceDir() + "/sample_projects/" + name));
  p.train.batchSize = batch;
  if (seq > 0) p.train.seqLen = seq;
  const bool lm = p.model.family == "gpt2";
  const int64_t vocab = lm ? train::configuredVocab(p) : 0;
  train::ProjectModel model = train::buildModel(p, vocab);
  optim::Schedule lr = optim::warmupCosineSchedule(p.train.lr, p.train.warmupSteps, std::max<int64_t>(p.train.steps, 1),
                                                   p.train.minLr);
  train::Trainer trainer(model.loss, train::makeOptimizer(p.train, lr), lr, p.train.seed);
  TSR_ASSIGN(Tree params, capture([&] { return model.init(random::key(0)); }));
  train::TrainState state = trainer.init(std::move(params));
  train::Batch b;
  if (lm) {
    std::vector<int32_t> ids(static_cast<size_t>(batch * p.train.seqLen), 1);
    b = train::Batch{Array::fromVector(ids, Shape{batch, p.train.seqLen}), Array::fromVector(ids, Shape{batch, p.train.seqLen})};
  } else if (p.model.family == "vit") {
    const auto& v = p.model.vit;
    std::vector<float> x(static_cast<size_t>(batch * v.channels * v.imageSize * v.imageSize), 0.5f);
    b = train::Batch{Array::fromVector(x, Shape{batch, v.channels, v.imageSize, v.imageSize}),
                     Array::fromVector(std::vector<int32_t>(static_cast<size_t>(batch), 1), Shape{batch})};
  } else {
    const auto& sizes = p.model.mlp.sizes;
    std::vector<float> x(static_cast<size_t>(batch * sizes.front()), 0.5f);
    b = train::Batch{Array::fromVector(x, Shape{batch, sizes.front()}),
                     Array::fromVector(std::vector<int32_t>(static_cast<size_t>(batch), 1), Shape{batch})};
  }
  TSR_ASSIGN(ClosedGraph cg, trainer.lowerStep(state, b));
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  TSR_TRY(pm.run(cg.graph, ctx));
  return cg;
}

Result<std::unique_ptr<cpu::Executable>> lowerForCuda(const ir::Graph& g) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry()));
  return cpu::Executable::compile(g, ops::registry(), plan, cpu::CompileOptions{});
}

std::vector<runtime::BufferPtr> randomInputs(const ir::Graph& g, std::mt19937& rng, double scale, int64_t intBound) {
  std::vector<runtime::BufferPtr> out;
  std::uniform_real_distribution<float> u(0.0f, static_cast<float>(scale));
  std::uniform_int_distribution<int64_t> ui(0, std::max<int64_t>(intBound - 1, 0));
  for (ir::ValueId v : g.inputs()) {
    const Aval& a = g.aval(v);
    auto b = runtime::Buffer::allocate(std::max<int64_t>(a.bytes(), 1));
    char* p = static_cast<char*>((*b)->data());
    for (int64_t i = 0; i < a.numel(); ++i) {
      switch (a.dtype) {
        case DType::F32: reinterpret_cast<float*>(p)[i] = u(rng); break;
        case DType::BF16: reinterpret_cast<bf16*>(p)[i] = bf16(u(rng)); break;
        case DType::I32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(ui(rng)); break;
        case DType::I64: reinterpret_cast<int64_t*>(p)[i] = ui(rng); break;
        case DType::U32: reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(rng()); break;
        case DType::Bool: reinterpret_cast<uint8_t*>(p)[i] = rng() & 1; break;
        default: break;  // zeros
      }
    }
    out.push_back(*b);
  }
  return out;
}

}  // namespace tsr::test
