// The reference interpreter under the profiler: one event per node, each linked through its fusion id to the
// node and op it ran, with the work of the op's cost rule; a profiled MLP training step does exactly the
// matmul flops counted by hand; nothing is recorded without a profiler, nor inside a scan's body.
#include "tests/check.h"

#include <algorithm>
#include <map>
#include <random>

#include "engine/ops/registry.h"
#include "engine/passes/dce.h"
#include "engine/runtime/profiler.h"
#include "engine/runtime/trace_export.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/compile/eval.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"

using namespace tsr;
using runtime::Profiler;
using runtime::ProfilerScope;

namespace {

Array randomArray(Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, std::move(s), DType::F32);
}

// Every event's fusion id is in the profiler's table, names one node of `g`, and the node's op is the one
// the table names. Returns a message, empty when all resolve.
std::string checkEventsResolve(const Profiler& p, const ir::Graph& g) {
  std::map<int64_t, runtime::FusionInfo> table;
  for (const auto& k : p.fusions()) table[k.id] = k;
  for (const auto& e : p.events()) {
    auto it = table.find(e.fusion);
    if (it == table.end()) return "event " + e.name + " has no kernel";
    const runtime::FusionInfo& k = it->second;
    if (k.nodes.size() != k.ops.size()) return "kernel " + k.name + ": nodes and ops differ in length";
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      if (k.nodes[i] < 0 || k.nodes[i] >= static_cast<int>(g.nodes().size())) return "node id out of range";
      const ir::OpDef* def = ops::registry().find(g.nodes()[static_cast<size_t>(k.nodes[i])].op);
      if (!def || def->name != k.ops[i]) return "kernel " + k.name + ": node is not a " + k.ops[i];
    }
    if (k.executable != g.name) return "kernel " + k.name + " belongs to " + k.executable;
  }
  return {};
}

// Events on one thread never overlap (end <= next start).
bool threadsDoNotOverlap(const std::vector<runtime::ProfileEvent>& events) {
  std::map<std::pair<std::string, int64_t>, std::vector<std::pair<int64_t, int64_t>>> spans;
  for (const auto& e : events) spans[{e.device, e.stream}].push_back({e.startNs, e.startNs + e.durationNs});
  for (auto& [thread, s] : spans) {
    std::sort(s.begin(), s.end());
    for (size_t i = 1; i < s.size(); ++i)
      if (s[i].first < s[i - 1].second) return false;
  }
  return true;
}

double dotFlops(const Profiler& p) {
  std::map<int64_t, runtime::FusionInfo> table;
  for (const auto& k : p.fusions()) table[k.id] = k;
  double total = 0;
  for (const auto& e : p.events())
    if (table[e.fusion].ops == std::vector<std::string>{"dot_general"}) total += e.flops;
  return total;
}

}  // namespace

TEST_CASE("oneEventPerNodeLinkedToItsNode") {
  // y = relu(x @ w + b): x [8,16], w [16,32], b [32].
  auto cg = makeGraph([](const std::vector<Array>& xs) { return std::vector<Array>{relu(matmul(xs[0], xs[1]) + xs[2])}; },
                      {Aval{Shape{8, 16}, DType::F32}, Aval{Shape{16, 32}, DType::F32}, Aval{Shape{32}, DType::F32}},
                      "dense");
  REQUIRE(cg.ok());
  std::vector<Array> args = {randomArray(Shape{8, 16}, 1), randomArray(Shape{16, 32}, 2), randomArray(Shape{32}, 3)};
  Profiler p;
  {
    ProfilerScope scope(p);
    TSR_COMPARE(Profiler::active(), &p);
    REQUIRE(evalGraph(*cg, args).ok());
    REQUIRE(evalGraph(*cg, args).ok());
  }
  REQUIRE(Profiler::active() == nullptr);
  const ir::Graph& g = cg->graph;
  auto events = p.events();
  TSR_COMPARE(events.size(), 2 * g.nodes().size());
  TSR_COMPARE(checkEventsResolve(p, g), std::string());
  // One kernel per node, registered once however often the graph runs.
  TSR_COMPARE(p.fusions().size(), g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) TSR_COMPARE(events[i].fusion, events[i + g.nodes().size()].fusion);
  REQUIRE(threadsDoNotOverlap(events));
  for (const auto& e : events) {
    TSR_COMPARE(e.device, std::string("cpu:0"));
    TSR_COMPARE(e.stream, int64_t(0));
    REQUIRE(e.durationNs >= 0);
  }
  // In order: each node starts after the previous one ended.
  for (size_t i = 1; i < events.size(); ++i)
    REQUIRE(events[i].startNs >= events[i - 1].startNs + events[i - 1].durationNs);
  // The matmul: 2 * 8 * 32 * 16 flops; reads x and w, writes [8,32] (bytes of f32).
  auto dot = std::find_if(events.begin(), events.end(), [](const auto& e) { return e.name.rfind("dot_general", 0) == 0; });
  REQUIRE(dot != events.end());
  TSR_COMPARE(dot->name, std::string("dot_general f32[8,16],f32[16,32]"));
  TSR_COMPARE(dot->flops, 2.0 * 8 * 32 * 16);
  TSR_COMPARE(dot->bytes, 4.0 * (8 * 16 + 16 * 32 + 8 * 32));
  auto kernels = p.fusions();
  auto gemm = std::find_if(kernels.begin(), kernels.end(), [&](const auto& k) { return k.id == dot->fusion; });
  TSR_COMPARE(gemm->kind, std::string("gemm"));
}

TEST_CASE("nothingIsRecordedWithoutAProfiler") {
  auto f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{tanh(xs[0]) * 2.0}; }, "idle");
  Array x = randomArray(Shape{4}, 4);
  Profiler p;
  REQUIRE(f({x}).ok());
  TSR_COMPARE(p.events().size(), size_t(0));
  {
    ProfilerScope scope(p);
    REQUIRE(f({x}).ok());
  }
  size_t recorded = p.events().size();
  REQUIRE(recorded > 0);
  REQUIRE(f({x}).ok());
  TSR_COMPARE(p.events().size(), recorded);
}

TEST_CASE("scopesNest") {
  Profiler outer, inner;
  {
    ProfilerScope a(outer);
    {
      ProfilerScope b(inner);
      TSR_COMPARE(Profiler::active(), &inner);
    }
    TSR_COMPARE(Profiler::active(), &outer);
  }
  REQUIRE(Profiler::active() == nullptr);
}

TEST_CASE("aScanIsOneKernelWhoseCostCountsItsBody") {
  // 5 iterations of h = h @ w: [4,6] @ [6,6].
  auto cg = makeGraph([](const std::vector<Array>& xs) {
    Array w = xs[1];
    Tree h = foriLoop(0, 5, [w](const Array&, const Tree& c) { return Tree(matmul(c.leaf(), w)); }, Tree(xs[0]));
    return std::vector<Array>{h.leaf()};
  }, {Aval{Shape{4, 6}, DType::F32}, Aval{Shape{6, 6}, DType::F32}}, "loop");
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  Profiler p;
  {
    ProfilerScope scope(p);
    REQUIRE(evalGraph(*cg, {randomArray(Shape{4, 6}, 5), randomArray(Shape{6, 6}, 6)}).ok());
  }
  TSR_COMPARE(p.events().size(), cg->graph.nodes().size());
  TSR_COMPARE(checkEventsResolve(p, cg->graph), std::string());
  double flops = 0;
  for (const auto& e : p.events()) flops += e.flops;
  REQUIRE(flops >= 5 * 2.0 * 4 * 6 * 6);
  REQUIRE(threadsDoNotOverlap(p.events()));
}

TEST_CASE("mlpTrainingStepDoesTheMatmulFlopsCountedByHand") {
  // A 3-layer MLP 32-64-48-10 on a batch of 16, MSE loss, one SGD step.
  const int64_t B = 16;
  const std::vector<int64_t> sizes = {32, 64, 48, 10};
  std::vector<Aval> avals = {Aval{Shape{B, sizes[0]}, DType::F32}, Aval{Shape{B, sizes[3]}, DType::F32}};
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    avals.push_back(Aval{Shape{sizes[l], sizes[l + 1]}, DType::F32});
    avals.push_back(Aval{Shape{sizes[l + 1]}, DType::F32});
  }
  auto step = [&](const std::vector<Array>& xs) {
    std::vector<std::pair<std::string, Tree>> items;
    for (size_t i = 2; i < xs.size(); ++i) items.push_back({"p" + std::to_string(i), Tree(xs[i])});
    Tree params = Tree::dict(items);
    auto vg = valueAndGrad([&](const Tree& p) {
      Array h = xs[0];
      for (size_t l = 0; l + 1 < sizes.size(); ++l) {
        h = matmul(h, p.find("p" + std::to_string(2 + 2 * l))->leaf()) + p.find("p" + std::to_string(3 + 2 * l))->leaf();
        if (l + 2 < sizes.size()) h = relu(h);
      }
      return mean(square(h - xs[1]));
    })(params);
    std::vector<Array> out = {vg.value};
    for (const auto& [name, leaf] : items) out.push_back(leaf.leaf() - vg.grads.find(name)->leaf() * 0.1);
    return out;
  };
  auto cg = makeGraph(step, avals, "mlp_step");
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  // Without the first layer's input gradient, which nothing uses.
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(ops::registry());
  REQUIRE(dce.run(cg->graph, ctx).ok());

  std::vector<Array> args;
  for (size_t i = 0; i < avals.size(); ++i) args.push_back(randomArray(avals[i].shape, 10 + static_cast<uint32_t>(i)));
  Profiler p;
  {
    ProfilerScope scope(p);
    auto out = evalGraph(*cg, args);
    REQUIRE_MESSAGE(out.ok(), out.error().message);
  }
  TSR_COMPARE(checkEventsResolve(p, cg->graph), std::string());
  // Forward: x @ W is 2 B in out per layer; backward: dW = x^T g is 2 B in out per layer, dx = g W^T is
  // 2 B in out for every layer but the first.
  double expected = 0;
  for (size_t l = 0; l + 1 < sizes.size(); ++l) {
    double layer = 2.0 * static_cast<double>(B * sizes[l] * sizes[l + 1]);
    expected += (l == 0 ? 2 : 3) * layer;
  }
  TSR_COMPARE(dotFlops(p), expected);
  TSR_COMPARE(cg->graph.count(ir::OpCode::DotGeneral), 8);

  // The same step written out as a trace parses back with every event linked to its node.
  auto back = runtime::parseChromeTrace(runtime::toChromeTrace(runtime::Trace::from(p)));
  REQUIRE(back.ok());
  TSR_COMPARE(back->events.size(), p.events().size());
  for (const auto& e : back->events) {
    const runtime::FusionInfo* k = back->kernel(e.fusion);
    REQUIRE(k);
    TSR_COMPARE(ops::registry().find(cg->graph.nodes()[static_cast<size_t>(k->nodes[0])].op)->name, k->ops[0]);
  }
}
