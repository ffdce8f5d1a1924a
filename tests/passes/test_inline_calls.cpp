// InlineCalls: a custom_vjp_call becomes its primal graph's nodes (with their provenance), inside scan bodies
// and when a primal itself calls custom_vjp; a remat_call becomes its body, its recomputation (behind the
// barrier) kept; results are unchanged; a graph without calls is left alone.
#include "tests/check.h"

#include <string>
#include <vector>

#include "engine/ops/registry.h"
#include "engine/passes/inline_calls.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/custom_vjp.h"
#include "engine/transform/remat.h"
#include "engine/transform/trace.h"
#include "tests/passes/pass_test_util.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

// sin, whose fwd saves cos(x): after inlining only the sin is left.
Tree customSin(const Tree& x) {
  static auto f = customVjp([](const Tree& t) { return Tree(sin(t.leaf())); },
                            [](const Tree& t) { return std::make_pair(Tree(sin(t.leaf())), Tree(cos(t.leaf()))); },
                            [](const Tree& c, const Tree& g) { return Tree(c.leaf() * g.leaf()); });
  return f(x);
}

ir::Graph traced(const ArrayFn& f, std::vector<Aval> avals) {
  auto cg = makeGraph(f, avals);
  TSR_CHECK_MSG(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
  return cg->graph;
}

// Runs InlineCalls on g, which it must change without changing g's results; the messages it logged.
std::vector<std::string> inlineChecked(ir::Graph& g) {
  ir::Graph before = g;
  passes::InlineCalls pass;
  passes::PassContext ctx(reg());
  auto r = runPass(pass, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(r.changed);
  TSR_COMPARE(compareResults(before, g), std::string());
  std::vector<std::string> messages;
  for (const auto& d : ctx.log().all()) messages.push_back(d.message);
  return messages;
}

}  // namespace

TEST_CASE("inlinesTheCallAsItsPrimalNodes") {
  ir::Graph g = traced([](const std::vector<Array>& a) { return std::vector<Array>{customSin(Tree(a[0])).leaf() * 2.0}; },
                       {f32({4})});
  TSR_COMPARE(g.count(OpCode::CustomVjpCall), 1);
  const std::vector<std::string> log = inlineChecked(g);
  TSR_COMPARE(countOf(g, OpCode::CustomVjpCall), 0);
  TSR_COMPARE(g.count(OpCode::Sin), 1);
  TSR_COMPARE(g.count(OpCode::Cos), 0);  // fwd's residual is not computed
  const ir::Node& sinNode = *std::find_if(g.nodes().begin(), g.nodes().end(),
                                          [](const ir::Node& n) { return n.op == OpCode::Sin; });
  REQUIRE_MESSAGE(sinNode.prov.file.find("test_inline_calls.cpp") != std::string::npos, sinNode.prov.toString());
  TSR_COMPARE(log.size(), size_t(1));
  REQUIRE(log[0].find("inlined 1 custom_vjp_call") != std::string::npos);
}

TEST_CASE("inlinesInsideBodiesAndNestedCalls") {
  // A scan whose body calls custom sin, and a custom function whose primal calls custom sin again.
  auto outer = customVjp([](const Tree& t) { return Tree(customSin(t).leaf() + 1.0); },
                         [](const Tree& t) { return std::make_pair(Tree(customSin(t).leaf() + 1.0), t); },
                         [](const Tree& x, const Tree& g) { return Tree(cos(x.leaf()) * g.leaf()); });
  ir::Graph g = traced(
      [&](const std::vector<Array>& a) {
        auto step = [](const Tree& h, const Tree&) { return std::make_pair(customSin(h), Tree()); };
        Array h = scan(step, Tree(a[0]), Tree(), 3).first.leaf();
        return std::vector<Array>{outer(Tree(h)).leaf()};
      },
      {f32({2})});
  // The body's, the outer call, and the calls in its primal and in its fwd (which goes with it).
  TSR_COMPARE(countOf(g, OpCode::CustomVjpCall), 4);
  inlineChecked(g);
  TSR_COMPARE(countOf(g, OpCode::CustomVjpCall), 0);
  TSR_COMPARE(countOf(g, OpCode::Sin), 2);
}

TEST_CASE("inlinesRematCallsAndKeepsTheirRecomputation") {
  // grad of sum(tanh(remat(sin)(x)) ): the remat call runs sin in the forward pass; its vjp recomputed sin
  // behind an optimization_barrier. Inlined, both sins are there, and the results are the same.
  ir::Graph g = traced(
      [&](const std::vector<Array>& a) {
        auto f = remat([](const Tree& t) { return Tree(sin(t.leaf()) * t.leaf()); });
        return std::vector<Array>{
            grad([&](const Tree& t) { return sum(tanh(f(t).leaf())); })(Tree(a[0])).leaf()};
      },
      {f32({5})});
  TSR_COMPARE(countOf(g, OpCode::RematCall), 1);
  TSR_COMPARE(countOf(g, OpCode::OptimizationBarrier), 1);
  const std::vector<std::string> log = inlineChecked(g);
  TSR_COMPARE(countOf(g, OpCode::RematCall), 0);
  TSR_COMPARE(countOf(g, OpCode::Sin), 2);
  TSR_COMPARE(countOf(g, OpCode::OptimizationBarrier), 1);
  REQUIRE(log[0].find("1 remat_call") != std::string::npos);
}

TEST_CASE("leavesAGraphWithoutCallsAlone") {
  Builder b;
  auto x = b.input(f32({4}));
  ir::Graph g = b.done({b.add(OpCode::Sin, {x})});
  passes::InlineCalls pass;
  passes::PassContext ctx(reg());
  auto r = runPass(pass, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(!r.changed);
  TSR_COMPARE(ctx.log().size(), size_t(0));
}
