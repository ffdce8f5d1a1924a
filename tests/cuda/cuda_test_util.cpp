#include "tests/cuda/cuda_test_util.h"

#include <cstdlib>
#include <cstring>

#include "engine/backends/cuda/executable.h"
#include "engine/core/dtype.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/project/project.h"
#include "engine/random/random.h"
#include "engine/transform/autodiff.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"

namespace tsr::test {

// The source tree: where the binary was built, or TESSERA_SOURCE_DIR (the GPU kit runs elsewhere).
std::string sourceDir() {
  const char* v = std::getenv("TESSERA_SOURCE_DIR");
  return v && *v ? v : TSR_SOURCE_DIR;
}

Result<ClosedGraph> projectStepGraph(const std::string& name, int64_t batch, int64_t seq, const std::string& compute) {
  TSR_ASSIGN(project::Project p, project::loadProject(sourceDir() + "/sample_projects/" + name));
  if (!compute.empty()) p.precision = compute;
  // The step from avals, as `tessera compile` traces it: no data, no weights.
  train::SetupOverrides o;
  o.batchSize = batch;
  o.seqLen = seq;
  o.data = false;
  o.materialize = false;
  o.mesh = false;
  TSR_ASSIGN(train::TrainingSetup setup, train::makeTrainingSetup(p, o));
  const project::BatchSignature& b = setup.model.batch;
  const TreeOf<Aval>* stats = setup.avals->find("batch_stats");  // models with batch norm
  TSR_ASSIGN(ClosedGraph cg, setup.trainer->lowerStep(*setup.avals->find("params"), *setup.avals->find("opt"),
                                                      b.inputs, b.targets, stats ? *stats : TreeOf<Aval>()));
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  TSR_TRY(pm.run(cg.graph, ctx));
  return cg;
}

Result<std::unique_ptr<cpu::Executable>> lowerForCuda(const ir::Graph& g) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry(), nullptr, cuda::fusionOptions()));
  cpu::CompileOptions co;
  co.oneDnn = false;  // as the CUDA executable lowers
  return cpu::Executable::compile(g, ops::registry(), plan, co);
}

std::vector<std::pair<size_t, size_t>> stepCarries(const ClosedGraph& step) {
  std::vector<std::string> in = inspect::treePaths(step.inputTree);
  const std::vector<std::string> out = inspect::treePaths(step.outputTree);
  for (std::string& p : in) {  // the arguments' list index: "0.params.wte" -> "params.wte"
    const size_t dot = p.find('.');
    if (dot != std::string::npos && dot > 0 && p.find_first_not_of("0123456789") == dot) p.erase(0, dot + 1);
  }
  const ir::Graph& g = step.graph;
  std::vector<std::pair<size_t, size_t>> carries;
  for (size_t o = 0; o < out.size() && o < g.outputs().size(); ++o)
    for (size_t i = 0; i < in.size() && i < g.inputs().size(); ++i) {
      if (in[i] == out[o] && g.aval(g.inputs()[i]) == g.aval(g.outputs()[o])) carries.push_back({o, i});
    }
  return carries;
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

const std::vector<ConvCase>& convCases() {
  static const std::vector<ConvCase> cases = {
      {"nchw_3x3", Shape{2, 3, 8, 8}, Shape{4, 3, 3, 3}, {"NCHW", "OIHW", "NCHW"}, {1, 1}, {{1, 1}, {1, 1}}, {}, 1,
       DType::F32, {"forward", "forward", "backward_filter"}},
      {"nhwc_hwio_strided", Shape{2, 9, 9, 3}, Shape{3, 3, 3, 8}, {"NHWC", "HWIO", "NHWC"}, {2, 2}, {{1, 1}, {1, 1}},
       {}, 1, DType::F32, {"forward", "backward_data", "backward_filter"}},
      {"nchw_asymmetric_padding", Shape{1, 2, 7, 6}, Shape{3, 2, 3, 3}, {"NCHW", "OIHW", "NCHW"}, {2, 1},
       {{2, 0}, {0, 1}}, {}, 1, DType::F32, {"forward", "backward_data", "backward_filter"}, true},
      {"nhwc_oihw_dilated", Shape{2, 10, 10, 4}, Shape{5, 4, 3, 3}, {"NHWC", "OIHW", "NHWC"}, {1, 1},
       {{2, 2}, {2, 2}}, {2, 2}, 1, DType::F32, {"forward", "forward", "backward_filter"}},
      {"nchw_grouped_strided", Shape{2, 4, 8, 8}, Shape{6, 2, 3, 3}, {"NCHW", "OIHW", "NCHW"}, {2, 2},
       {{1, 1}, {1, 1}}, {}, 2, DType::F32, {"forward", "backward_data", "backward_filter"}},
      {"nhwc_depthwise", Shape{2, 6, 6, 4}, Shape{3, 3, 1, 4}, {"NHWC", "HWIO", "NHWC"}, {1, 1}, {{1, 1}, {1, 1}}, {},
       4, DType::F32, {"forward", "forward", "backward_filter"}},
      {"ncw_1d_strided", Shape{2, 3, 11}, Shape{5, 3, 3}, {"NCH", "OIH", "NCH"}, {2}, {{1, 1}}, {}, 1, DType::F32,
       {"forward", "backward_data", "backward_filter"}},
      {"ndhwc_3d", Shape{1, 5, 5, 5, 2}, Shape{3, 3, 3, 2, 4}, {"NDHWC", "DHWIO", "NDHWC"}, {1, 1, 1},
       {{1, 1}, {1, 1}, {1, 1}}, {}, 1, DType::F32, {"forward", "forward", "backward_filter"}},
      {"nhwc_bf16_strided", Shape{2, 8, 8, 8}, Shape{16, 8, 3, 3}, {"NHWC", "OIHW", "NHWC"}, {2, 2},
       {{1, 1}, {1, 1}}, {}, 1, DType::BF16, {"forward", "backward_data", "backward_filter"}},
      // ResNet's downsampling on even sides, as its CIFAR and ImageNet stages have them (the strided cases above
      // have odd sides): the 3x3 stride-2 convolution padded by 1, and the 1x1 stride-2 shortcut.
      {"nhwc_hwio_even_strided", Shape{2, 8, 8, 4}, Shape{3, 3, 4, 8}, {"NHWC", "HWIO", "NHWC"}, {2, 2},
       {{1, 1}, {1, 1}}, {}, 1, DType::F32, {"forward", "backward_data", "backward_filter"}},
      {"nhwc_hwio_1x1_even_strided", Shape{2, 8, 8, 4}, Shape{1, 1, 4, 8}, {"NHWC", "HWIO", "NHWC"}, {2, 2},
       {{0, 0}, {0, 0}}, {}, 1, DType::F32, {"forward", "backward_data", "backward_filter"}},
  };
  return cases;
}

Result<ClosedGraph> convGradGraph(const ConvCase& c) {
  auto f = [&](const std::vector<Array>& p) {
    return std::vector<Array>{convGeneralDilated(p[0], p[1], c.strides, ConvPadding(c.padding), {}, c.rhsDilation,
                                                 c.dims, c.groups)};
  };
  const Aval x{c.lhs, c.dtype}, w{c.rhs, c.dtype};
  TSR_ASSIGN(ClosedGraph forward, makeGraph(f, {x, w}, c.name));
  const Aval y = forward.graph.aval(forward.graph.outputs()[0]);
  TSR_ASSIGN(ClosedGraph cg, makeGraph(
                                 [&](const std::vector<Array>& in) {
                                   VjpOutput v = vjp(f, {in[0], in[1]});
                                   std::vector<Array> ct = v.pullback({in[2]});
                                   return std::vector<Array>{v.outputs[0], ct[0], ct[1]};
                                 },
                                 {x, w, y}, c.name));
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  TSR_TRY(pm.run(cg.graph, ctx));
  return cg;
}

ir::Graph hostKernelGraph() {
  const auto& reg = ops::registry();
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{Shape{4, 8}, DType::F32});
  ir::ValueId e = g.addNode(reg, ir::OpCode::Exp, {x}, ir::NoAttrs{}).value()[0];
  ir::ValueId p = g.addNode(reg, ir::OpCode::ReduceProd, {e}, ir::ReduceAttrs{{1}}).value()[0];
  g.setOutputs({p, e});
  return g;
}

}  // namespace tsr::test
