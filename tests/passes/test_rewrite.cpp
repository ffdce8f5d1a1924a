// GraphRewriter: replacements resolve through chains, inserted nodes land before their anchor, erased nodes
// vanish, the committed graph is compact with provenance kept; the matchers find splats through broadcasts;
// liveness and use counts; nested graphs are rewritten on a private copy.
#include "tests/check.h"

#include "engine/passes/rewrite.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

TEST_CASE("replaceAllUsesResolvesChainsAndOutputs") {
  Builder b;
  auto x = b.input(f32({4}));
  auto e = b.add(OpCode::Exp, {x});
  auto n1 = b.add(OpCode::Neg, {e});
  auto n2 = b.add(OpCode::Neg, {n1});
  auto t = b.add(OpCode::Tanh, {n2});
  ir::Graph g = b.done({t, n2});
  ir::Graph before = g;

  passes::GraphRewriter rw(g);
  rw.replaceNode(2, e);   // neg(neg(e)) -> e; node 1 now dead
  rw.eraseNode(1);
  TSR_COMPARE(rw.resolve(n2), e);
  REQUIRE(rw.commit());
  REQUIRE_MESSAGE(ir::verify(g, reg()).ok(), printGraph(g).c_str());
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 2);
  TSR_COMPARE(g.nodes()[1].op, OpCode::Tanh);
  TSR_COMPARE(g.nodes()[1].operands[0], g.nodes()[0].results[0]);
  TSR_COMPARE(g.outputs()[1], g.nodes()[0].results[0]);
  TSR_COMPARE(compareResults(before, g), std::string());
}

TEST_CASE("insertedNodesLandBeforeTheirAnchorAndKeepProvenance") {
  Builder b;
  auto x = b.input(f32({2, 3}));
  auto r = b.add(OpCode::Relu, {x}, ir::NoAttrs{}, ir::Provenance{"blocks.0", "m.cpp", 7});
  auto s = b.add(OpCode::Sin, {r}, ir::NoAttrs{}, ir::Provenance{"blocks.1", "m.cpp", 9});
  ir::Graph g = b.done({s});
  ir::Graph before = g;

  passes::GraphRewriter rw(g);
  // sin(relu(x)) -> sin(relu(neg(neg(x)))): two nodes before relu, the second reading the first.
  auto a = rw.insertBefore(0, reg(), OpCode::Neg, {x}, ir::NoAttrs{}, ir::Provenance{"new", "", 0});
  REQUIRE(a.ok());
  auto c = rw.insertBefore(0, reg(), OpCode::Neg, {(*a)[0]}, ir::NoAttrs{}, {});
  REQUIRE(c.ok());
  rw.forEachNode([&](ir::NodeId n) {
    if (rw.node(n).op == OpCode::Relu) rw.setOperand(n, 0, (*c)[0]);
  });
  rw.commit();
  REQUIRE_MESSAGE(ir::verify(g, reg()).ok(), printGraph(g).c_str());
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 4);
  TSR_COMPARE(g.nodes()[0].op, OpCode::Neg);
  TSR_COMPARE(g.nodes()[0].prov.modulePath, std::string("new"));
  TSR_COMPARE(g.nodes()[1].op, OpCode::Neg);
  TSR_COMPARE(g.nodes()[2].op, OpCode::Relu);
  TSR_COMPARE(g.nodes()[2].prov, (ir::Provenance{"blocks.0", "m.cpp", 7}));
  TSR_COMPARE(g.nodes()[3].prov, (ir::Provenance{"blocks.1", "m.cpp", 9}));
  // Values are dense in definition order after a commit: input %0, then one per node.
  for (size_t i = 0; i < g.nodes().size(); ++i) TSR_COMPARE(g.nodes()[i].results[0], static_cast<ir::ValueId>(i + 1));
  TSR_COMPARE(compareResults(before, g), std::string());
}

TEST_CASE("insertAtEndAndInvalidInsert") {
  Builder b;
  auto x = b.input(f32({3}));
  auto e = b.add(OpCode::Exp, {x});
  ir::Graph g = b.done({e});
  passes::GraphRewriter rw(g);
  auto bad = rw.insertBefore(ir::kNone, reg(), OpCode::Reshape, {e}, ir::ReshapeAttrs{{2}}, {});
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().message.find("reshape") != std::string::npos);
  auto t = rw.insertBefore(ir::kNone, reg(), OpCode::Tanh, {x}, ir::NoAttrs{}, {});
  REQUIRE(t.ok());
  rw.replaceNode(0, (*t)[0]);  // exp(x) -> tanh(x), the new node placed at the end
  REQUIRE(rw.commit());
  REQUIRE_MESSAGE(ir::verify(g, reg()).ok(), printGraph(g).c_str());
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 1);
  TSR_COMPARE(g.nodes()[0].op, OpCode::Tanh);
  TSR_COMPARE(g.outputs()[0], g.nodes()[0].results[0]);
}

TEST_CASE("wrapAValueByRewiringItsUses") {
  Builder b;
  auto x = b.input(f32({3}));
  auto e = b.add(OpCode::Exp, {x});
  auto s = b.add(OpCode::Sin, {e});
  ir::Graph g = b.done({e, s});
  ir::Graph before = g;
  passes::GraphRewriter rw(g);
  // exp -> neg(neg(exp)) for the sin and for output 0; replaceAllUses would make the neg read itself.
  auto n1 = rw.insertBefore(1, reg(), OpCode::Neg, {e}, ir::NoAttrs{}, {});
  auto n2 = rw.insertBefore(1, reg(), OpCode::Neg, {(*n1)[0]}, ir::NoAttrs{}, {});
  rw.setOperand(1, 0, (*n2)[0]);
  rw.setOutput(0, (*n2)[0]);
  REQUIRE(rw.commit());
  REQUIRE_MESSAGE(ir::verify(g, reg()).ok(), printGraph(g).c_str());
  TSR_COMPARE(g.count(OpCode::Neg), 2);
  TSR_COMPARE(g.nodes()[3].operands[0], g.nodes()[2].results[0]);
  TSR_COMPARE(g.outputs()[0], g.nodes()[2].results[0]);
  TSR_COMPARE(compareResults(before, g), std::string());
}

TEST_CASE("noEditsIsNoChange") {
  Builder b;
  auto x = b.input(f32({3}));
  ir::Graph g = b.done({b.add(OpCode::Exp, {x})});
  std::string text = printGraph(g);
  passes::GraphRewriter rw(g);
  rw.forEachNode([](ir::NodeId) {});
  REQUIRE(!rw.commit());
  TSR_COMPARE(printGraph(g), text);
}

TEST_CASE("compactRenumbersDensely") {
  ir::Graph g;
  auto x = g.addInput(f32({2}));
  auto e = g.addNode(reg(), OpCode::Exp, {x}, ir::NoAttrs{});
  auto y = g.addInput(f32({2}));  // an input defined after a node: ids not in definition order
  auto s = g.addNode(reg(), OpCode::Add, {(*e)[0], y}, ir::NoAttrs{});
  g.setOutputs({(*s)[0]});
  ir::Graph before = g;
  passes::compact(g);
  TSR_COMPARE(g.inputs(), (std::vector<ir::ValueId>{0, 1}));
  TSR_COMPARE(g.nodes()[0].results[0], 2);
  TSR_COMPARE(g.nodes()[1].operands, (std::vector<ir::ValueId>{2, 1}));
  TSR_COMPARE(printGraph(g), printGraph(before));
}

TEST_CASE("splatMatchersSeeThroughBroadcasts") {
  Builder b;
  auto s = b.splat(2.0, f32({3, 4}));
  auto ss = b.add(OpCode::BroadcastInDim, {s}, ir::BroadcastInDimAttrs{{5, 3, 4}, {1, 2}});
  auto lit = b.constant(ir::Literal::fromBytes(f32({2}), std::vector<float>{7, 7}.data()));
  auto mixed = b.constant(ir::Literal::fromBytes(f32({2}), std::vector<float>{0.0f, -0.0f}.data()));
  auto ramp = b.ramp(f32({3}), 1, 1);
  auto x = b.input(f32({3}));
  const ir::Graph& g = b.g;
  TSR_COMPARE(passes::splatValue(g, s).value_or(-1), 2.0);
  TSR_COMPARE(passes::splatValue(g, ss).value_or(-1), 2.0);
  TSR_COMPARE(passes::splatValue(g, lit).value_or(-1), 7.0);
  REQUIRE(!passes::splatValue(g, mixed));  // equal as numbers but not the same bits
  REQUIRE(!passes::splatValue(g, ramp));
  REQUIRE(!passes::splatValue(g, x));
  REQUIRE(passes::isSplatOf(g, ss, 2.0));
  REQUIRE(!passes::isSplatOf(g, ss, 3.0));
  auto scalar = passes::splatScalar(g, lit);
  REQUIRE(scalar);
  TSR_COMPARE(scalar->aval, f32({}));
  REQUIRE(passes::constantLiteral(g, lit) != nullptr);
  REQUIRE(passes::constantLiteral(g, s) == nullptr);
}

TEST_CASE("livenessAndUseCounts") {
  Builder b;
  auto x = b.input(f32({3}));
  auto e = b.add(OpCode::Exp, {x});
  auto dead = b.add(OpCode::Sin, {e});
  b.add(OpCode::Cos, {dead});
  auto m = b.add(OpCode::Mul, {e, e});
  ir::Graph g = b.done({m, x});
  auto live = passes::liveNodes(g);
  TSR_COMPARE(live, (std::vector<bool>{true, false, false, true}));
  auto uses = passes::useCounts(g);
  TSR_COMPARE(uses[static_cast<size_t>(x)], 2);  // exp and the output
  TSR_COMPARE(uses[static_cast<size_t>(e)], 3);  // sin, and both mul slots
  TSR_COMPARE(uses[static_cast<size_t>(m)], 1);
  REQUIRE(passes::isPureOp(OpCode::Threefry2x32));
  REQUIRE(!passes::isPureOp(static_cast<ir::OpCode>(ir::kNumCoreOps + 3)));
}

TEST_CASE("nestedGraphsAreRewrittenOnACopy") {
  Builder body("body");
  auto c = body.input(f32({4}));
  auto x = body.input(f32({4}));
  body.add(OpCode::Exp, {x});  // dead
  auto s = body.add(OpCode::Add, {c, x});
  auto bodyGraph = std::make_shared<const ir::Graph>(body.done({s, s}));

  ir::Graph g;
  auto c0 = g.addInput(f32({4}));
  auto xs = g.addInput(f32({3, 4}));
  g.addNodeWithAvals(OpCode::Scan, {c0, xs}, ir::ScanAttrs{3, 0, 1, false, bodyGraph}, {f32({4}), f32({3, 4})});
  g.setOutputs({g.nodes()[0].results[0]});

  TSR_COMPARE(passes::nestedGraphsOf(g.nodes()[0].attrs).size(), size_t(1));
  auto changed = passes::rewriteNestedGraphs(g, [](ir::Graph& inner, ir::NodeId owner) -> Result<bool> {
    if (owner != 0) return makeError("wrong owner");
    auto live = passes::liveNodes(inner);
    passes::GraphRewriter rw(inner);
    for (ir::NodeId n = 0; n < rw.numOriginalNodes(); ++n)
      if (!live[static_cast<size_t>(n)]) rw.eraseNode(n);
    return rw.commit();
  });
  REQUIRE((changed.ok() && *changed));
  auto now = passes::nestedGraphsOf(g.nodes()[0].attrs);
  TSR_COMPARE(now[0]->nodes().size(), size_t(1));
  TSR_COMPARE(bodyGraph->nodes().size(), size_t(2));  // the original body is shared and untouched

  auto unchanged = passes::rewriteNestedGraphs(g, [](ir::Graph&, ir::NodeId) -> Result<bool> { return false; });
  REQUIRE((unchanged.ok() && !*unchanged));
  TSR_COMPARE(passes::nestedGraphsOf(g.nodes()[0].attrs)[0], now[0]);
  auto failed =
      passes::rewriteNestedGraphs(g, [](ir::Graph&, ir::NodeId) -> Result<bool> { return makeError("boom"); });
  REQUIRE(!failed.ok());
}
