// DCE (after XLA's hlo_dce_test): dead nodes and chains go, outputs and inputs stay, a node with one live
// result stays whole, nothing changes when everything is live, and results are unchanged.
#include "tests/check.h"

#include "engine/ops/registry.h"
#include "engine/passes/dce.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

TEST_CASE("removesDeadNodesAndChains") {
  Builder b;
  auto x = b.input(f32({4}));
  auto e = b.add(OpCode::Exp, {x});  // dead chain: exp -> tanh
  b.add(OpCode::Tanh, {e});
  auto n = b.add(OpCode::Neg, {x}, ir::NoAttrs{}, ir::Provenance{"head", "m.cpp", 3});
  b.add(OpCode::Sin, {n});            // dead leaf reading a live value
  ir::Graph g = b.done({n});
  ir::Graph before = g;

  passes::DeadCodeElimination dce;
  passes::PassContext ctx(reg());
  auto r = runPass(dce, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(r.changed);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 1);
  TSR_COMPARE(g.nodes()[0].op, OpCode::Neg);
  TSR_COMPARE(g.nodes()[0].prov, (ir::Provenance{"head", "m.cpp", 3}));
  TSR_COMPARE(compareResults(before, g), std::string());
  TSR_COMPARE(ctx.log().size(), size_t(1));
  TSR_COMPARE(ctx.log().all()[0].nodes, (std::vector<ir::NodeId>{0, 1, 3}));
  REQUIRE(ctx.log().all()[0].message.find("removed 3 dead nodes") != std::string::npos);
}

TEST_CASE("keepsInputsAndOutputsThatAreInputs") {
  Builder b;
  auto x = b.input(f32({4}));
  auto unused = b.input(i32({2}));
  b.add(OpCode::Exp, {x});
  ir::Graph g = b.done({x});
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(reg());
  auto r = runPass(dce, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(r.changed);
  TSR_COMPARE(g.nodes().size(), size_t(0));
  TSR_COMPARE(g.inputs().size(), size_t(2));
  TSR_COMPARE(g.aval(g.inputs()[1]), g.aval(unused));
  TSR_COMPARE(g.outputs(), (std::vector<ir::ValueId>{g.inputs()[0]}));
}

TEST_CASE("multiResultNodeStaysWhenOneResultIsUsed") {
  Builder b;
  Aval u = Aval{Shape{4}, DType::U32};
  auto k0 = b.input(u), k1 = b.input(u), c0 = b.input(u), c1 = b.input(u);
  auto bits = b.addMulti(OpCode::Threefry2x32, {k0, k1, c0, c1});
  ir::Graph g = b.done({bits[1]});
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(reg());
  auto r = runPass(dce, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(!r.changed);
  TSR_COMPARE(g.count(OpCode::Threefry2x32), 1);
}

TEST_CASE("noChangeWhenEverythingIsLive") {
  Builder b;
  auto x = b.input(f32({2, 3}));
  auto y = b.input(f32({2, 3}));
  auto s = b.add(OpCode::Add, {x, y});
  auto m = b.add(OpCode::Mul, {s, x});
  ir::Graph g = b.done({m, s});
  std::string text = printGraph(g);
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(reg());
  auto r = runPass(dce, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(!r.changed);
  TSR_COMPARE(printGraph(g), text);
  TSR_COMPARE(ctx.log().size(), size_t(0));
}

TEST_CASE("opsOutsideTheCoreListAreKept") {
  // A plugin op is assumed to have side effects: DCE keeps it although nothing reads its result.
  ir::OpRegistry r2;
  ops::registerCoreOps(r2);
  ir::OpDef def;
  def.name = "debug_print";
  def.numOperands = 1;
  def.infer = [](std::span<const Aval> in, const ir::Attrs&) -> Result<std::vector<Aval>> {
    return std::vector<Aval>{in[0]};
  };
  auto code = r2.add(def);
  REQUIRE(code.ok());
  ir::Graph g;
  auto x = g.addInput(f32({3}));
  REQUIRE(g.addNode(r2, *code, {x}, ir::NoAttrs{}).ok());
  REQUIRE(g.addNode(r2, OpCode::Exp, {x}, ir::NoAttrs{}).ok());
  g.setOutputs({x});
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(r2);
  auto changed = dce.run(g, ctx);
  REQUIRE((changed.ok() && *changed));
  TSR_COMPARE(g.nodes().size(), size_t(1));
  TSR_COMPARE(g.nodes()[0].op, *code);
}

TEST_CASE("cleansNestedGraphsKeepingTheirOutputs") {
  if (!reg().find(OpCode::Scan)) TSR_SKIP("scan is not registered yet");
  Builder body("body");
  auto c = body.input(f32({4}));
  auto x = body.input(f32({4}));
  body.add(OpCode::Exp, {x});  // dead inside the body
  auto s = body.add(OpCode::Add, {c, x});
  auto m = body.add(OpCode::Mul, {c, x});
  auto bodyGraph = std::make_shared<const ir::Graph>(body.done({s, m}));
  Builder b;
  auto c0 = b.input(f32({4}));
  auto xs = b.input(f32({3, 4}));
  auto res = b.addMulti(OpCode::Scan, {c0, xs}, ir::ScanAttrs{3, 0, 1, false, bodyGraph});
  ir::Graph g = b.done({res[0], res[1]});
  ir::Graph before = g;
  passes::DeadCodeElimination dce;
  passes::PassContext ctx(reg());
  auto r = runPass(dce, g, ctx);
  REQUIRE_MESSAGE(r.error.empty(), r.error.c_str());
  REQUIRE(r.changed);
  const auto& newBody = std::get<ir::ScanAttrs>(g.nodes()[0].attrs).body;
  TSR_COMPARE(newBody->nodes().size(), size_t(2));
  TSR_COMPARE(newBody->outputs().size(), size_t(2));
  TSR_COMPARE(compareResults(before, g), std::string());
}
