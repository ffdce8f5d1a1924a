// The recompute pass: cheap values that one kernel stores and another reads back are copied into the reader,
// the program's results do not change (the interpreter on the graph before and after), and the kernels then
// move fewer bytes, counted from the fusion plan.
#include "tests/check.h"

#include <set>

#include "engine/backends/cpu/executable.h"
#include "engine/project/project.h"
#include "engine/train/setup.h"
#include "engine/train/trainer.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/passes/recompute.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;
using passes::GroupKind;

namespace {

passes::FusionPlan planOf(const ir::Graph& g) {
  auto p = passes::planFusion(g, reg());
  if (!p.ok()) TSR_FATAL("planFusion: " << p.error().message);
  return std::move(*p);
}

// Elements of values of at least `minElements` that kernels write for other kernels, and that kernels read
// from other kernels or the inputs (the plan's own accounting, independent of the pass's).
struct Traffic {
  int64_t written = 0, read = 0;
};
Traffic traffic(const ir::Graph& g, const passes::FusionPlan& p, int64_t minElements) {
  Traffic t;
  for (const auto& gr : p.groups) {
    if (gr.kind == GroupKind::Alias || gr.kind == GroupKind::Constant) continue;
    for (ir::ValueId v : gr.outputs)
      if (g.aval(v).shape.numel() >= minElements) t.written += g.aval(v).shape.numel();
    for (ir::ValueId v : gr.inputs)
      if (g.aval(v).shape.numel() >= minElements) t.read += g.aval(v).shape.numel();
  }
  return t;
}

}  // namespace

// s = x^2 and u = s * x are computed in the reduction's kernel (beside tanh(x), which it sums) and read by the
// next kernel, which then reads x instead: two reads and two writes of [64, 256] become one read.
TEST_CASE("cheapValuesAreRecomputedWhereTheyAreRead") {
  Builder b;
  auto x = b.input(f32({64, 256}));
  auto t = b.add(OpCode::Tanh, {x});
  auto s = b.add(OpCode::Square, {x});
  auto u = b.add(OpCode::Mul, {s, x});
  auto r = b.add(OpCode::ReduceSum, {b.add(OpCode::Add, {t, u})}, axes({1}));
  auto rb = b.add(OpCode::BroadcastInDim, {r}, bcast({64, 256}, {0}));
  auto w = b.add(OpCode::Mul, {rb, u});
  ir::Graph g = b.done({b.add(OpCode::Add, {w, s})});
  const ir::Graph before = g;
  const Traffic t0 = traffic(before, planOf(before), 4096);
  // Before: the reduction kernel writes s and u, the last kernel reads them (and writes the result).
  TSR_COMPARE(t0.written, int64_t{3 * 64 * 256});

  passes::Recompute pass;
  passes::PassContext ctx(reg());
  PassRun run = runPass(pass, g, ctx);
  REQUIRE_MESSAGE(run.error.empty(), run.error);
  REQUIRE(run.changed);
  TSR_COMPARE(compareResults(before, g), std::string());
  // x^2 copied once, and shared by the copy of x^2 * x.
  TSR_COMPARE(countOp(g, OpCode::Square), 2);
  TSR_COMPARE(countOp(g, OpCode::Mul), 3);
  bool recorded = false;
  for (const auto& d : ctx.log().all()) recorded |= d.reason == passes::FusionReason::Recomputed;
  REQUIRE(recorded);

  // After: nothing full-size crosses between the kernels (the result alone is written); the last one reads x.
  const passes::FusionPlan p = planOf(g);
  const Traffic t1 = traffic(g, p, 4096);
  TSR_COMPARE(t1.written, int64_t{64 * 256});
  TSR_COMPARE(p.numKernels(), 2);
  const auto& last = p.groups.back();
  REQUIRE(std::find(last.inputs.begin(), last.inputs.end(), x) != last.inputs.end());
  // The copies joined the reading kernel, not the kernel that computes the originals.
  for (const auto& gr : p.groups)
    if (gr.kind == GroupKind::Reduction) TSR_COMPARE(int(gr.outputs.size()), 1);
}

// Values that are not cheap (tanh) or small ones are not copied; nor is anything when it would not pay: a
// value read by the next kernel but computed from another kernel's result that is not stored.
TEST_CASE("expensiveValuesAreReadNotRecomputed") {
  Builder b;
  auto x = b.input(f32({64, 256}));
  auto t = b.add(OpCode::Tanh, {x});
  auto r = b.add(OpCode::ReduceSum, {t}, axes({1}));
  auto rb = b.add(OpCode::BroadcastInDim, {r}, bcast({64, 256}, {0}));
  ir::Graph g = b.done({b.add(OpCode::Mul, {rb, t})});
  const ir::Graph before = g;
  passes::Recompute pass;
  passes::PassContext ctx(reg());
  PassRun run = runPass(pass, g, ctx);
  REQUIRE_MESSAGE(run.error.empty(), run.error);
  REQUIRE(!run.changed);
  TSR_COMPARE(countOp(g, OpCode::Tanh), 1);
}

// GPT-2's MLP: gelu(x W + b), then its gradient. The vjp reads x^2, 1 + tanh, x / 2, 1 - tanh^2 and more from
// the forward kernel; after the pass the backward kernel reads x W + b and tanh(...) and recomputes the rest,
// the forward kernel stores fewer values, and every gradient is unchanged.
TEST_CASE("geluGradientReadsTwoForwardValues") {
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        auto loss = [](const std::vector<Array>& p) {
          Array h = gelu(matmul(p[0], p[1]) + p[2]);  // [64, 256]
          return std::vector<Array>{sum(matmul(h, p[3]) * 0.5)};
        };
        VjpOutput out = vjp(loss, in);
        return out.pullback({onesLike(out.outputs[0])});
      },
      {f32({64, 32}), f32({32, 256}), f32({256}), f32({256, 16})});
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  // The standard pipeline's cleanup alone, then the pass, so that the traffic can be compared.
  ir::Graph cleaned = cg->graph;
  {
    passes::PassContext ctx(reg());
    auto r = passes::cleanupPipeline().run(cleaned, ctx);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
  }
  ir::Graph g = cleaned;
  passes::Recompute pass;
  passes::PassContext ctx(reg());
  PassRun run = runPass(pass, g, ctx);
  REQUIRE_MESSAGE(run.error.empty(), run.error);
  REQUIRE(run.changed);
  TSR_COMPARE(compareResults(cg->graph, g), std::string());

  // The forward product's epilogue: the values it writes for later kernels, before and after.
  auto forwardEpilogue = [](const ir::Graph& graph, const passes::FusionPlan& p) -> const passes::FusionGroup* {
    for (const auto& gr : p.groups)
      if (gr.kind == GroupKind::Gemm && graph.aval(graph.nodes()[size_t(gr.nodes[0])].results[0]).shape == Shape({64, 256}))
        for (ir::NodeId n : gr.nodes)
          if (graph.nodes()[size_t(n)].op == OpCode::Tanh) return &gr;
    return nullptr;
  };
  const passes::FusionPlan p0 = planOf(cleaned), p1 = planOf(g);
  const passes::FusionGroup* f0 = forwardEpilogue(cleaned, p0);
  const passes::FusionGroup* f1 = forwardEpilogue(g, p1);
  REQUIRE(f0 != nullptr);
  REQUIRE(f1 != nullptr);
  MESSAGE("gelu's forward kernel stores " << f0->outputs.size() << " values before the pass, " << f1->outputs.size()
                                          << " after");
  REQUIRE(f0->outputs.size() >= 6);
  REQUIRE(f1->outputs.size() <= 3);
  const Traffic t0 = traffic(cleaned, p0, 64 * 256), t1 = traffic(g, p1, 64 * 256);
  MESSAGE("[64, 256] values written " << t0.written / (64 * 256) << " -> " << t1.written / (64 * 256) << ", read "
                                      << t0.read / (64 * 256) << " -> " << t1.read / (64 * 256));
  REQUIRE(t1.written + t1.read < t0.written + t0.read);
  REQUIRE(t1.written <= t0.written - 3 * 64 * 256);
}

// resnet_cifar's training step (convolutions, batch norm as reductions and elementwise ops, residual adds): the
// pass may not keep a value alive longer than it was, nor store more, so the step's arena does not grow (without
// the first rule it grew from 43.5 to 48.8 MiB: forward kernels read, for their copies, values that were done with).
TEST_CASE("recomputingNeverGrowsTheArena") {
  auto p = project::loadProject(std::string(TSR_SOURCE_DIR) + "/sample_projects/resnet_cifar");
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::SetupOverrides o;  // the step from avals, as `tessera compile` traces it
  o.data = false;
  o.materialize = false;
  o.mesh = false;
  auto setup = train::makeTrainingSetup(*p, o);
  REQUIRE_MESSAGE(setup.ok(), setup.error().message);
  const project::BatchSignature& b = setup->model.batch;
  auto cg = setup->trainer->lowerStep(*setup->avals->find("params"), *setup->avals->find("opt"), b.inputs, b.targets,
                                      *setup->avals->find("batch_stats"));
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  int recomputed = 0;
  auto arenaAfter = [&](passes::PassManager pm) {
    ir::Graph g = cg->graph;
    passes::PassContext ctx(reg());
    auto r = pm.run(g, ctx);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    for (const auto& d : ctx.log().all()) recomputed += d.reason == passes::FusionReason::Recomputed;
    auto plan = passes::planFusion(g, reg());
    REQUIRE(plan.ok());
    cpu::CompileOptions co;
    co.native = false;
    auto exe = cpu::Executable::compile(g, reg(), *plan, co);
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    return (*exe)->memory().arenaBytes;
  };
  const int64_t without = arenaAfter(passes::cleanupPipeline()), with = arenaAfter(passes::standardPipeline());
  MESSAGE("resnet_cifar's arena " << without / 1024 << " KiB without the pass, " << with / 1024 << " KiB with it ("
                                  << recomputed << " values recomputed)");
  REQUIRE(recomputed > 0);
  REQUIRE(with <= without);
}
