// CSE: identical nodes merge (chains in one walk), commutative operands match in either order, equal
// literals merge but 0.0 and -0.0 do not, different attrs or operands keep nodes apart, and nothing changes
// when nothing repeats.
#include "tests/check.h"

#include "engine/passes/cse.h"
#include "engine/passes/dce.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

// Runs CSE and checks verify and results; returns the decision messages.
std::vector<std::string> cse(ir::Graph& g, bool expectChange) {
  ir::Graph before = g;
  passes::CommonSubexpressionElimination pass;
  passes::PassContext ctx(reg());
  auto r = runPass(pass, g, ctx);
  if (!r.error.empty()) TSR_FATAL(r.error);
  if (r.changed != expectChange)
    TSR_FATAL("cse changed=" << r.changed << ", expected " << expectChange << ":\n" << printGraph(g));
  std::string diff = compareResults(before, g);
  if (!diff.empty()) TSR_FATAL(diff);
  std::vector<std::string> out;
  for (const auto& d : ctx.log().all()) out.push_back(d.message);
  return out;
}

}  // namespace

TEST_CASE("mergesChainsInOneWalk") {
  Builder b;
  auto x = b.input(f32({2, 3}));
  auto e1 = b.add(OpCode::Exp, {x});
  auto t1 = b.add(OpCode::Tanh, {e1});
  auto e2 = b.add(OpCode::Exp, {x});
  auto t2 = b.add(OpCode::Tanh, {e2});
  ir::Graph g = b.done({b.add(OpCode::Sub, {t1, t2})});
  auto log = cse(g, true);
  TSR_COMPARE(g.count(OpCode::Exp), 1);
  TSR_COMPARE(g.count(OpCode::Tanh), 1);
  TSR_COMPARE(log, (std::vector<std::string>{"exp: same as node 0", "tanh: same as node 1"}));
  const ir::Node& sub = g.nodes().back();
  TSR_COMPARE(sub.operands[0], sub.operands[1]);
}

TEST_CASE("commutativeOperandsMatchInEitherOrder") {
  Builder b;
  auto x = b.input(f32({3}));
  auto y = b.input(f32({3}));
  auto a1 = b.add(OpCode::Add, {x, y});
  auto a2 = b.add(OpCode::Add, {y, x});
  auto s1 = b.add(OpCode::Sub, {x, y});
  auto s2 = b.add(OpCode::Sub, {y, x});
  auto m1 = b.add(OpCode::Max, {x, y});
  auto m2 = b.add(OpCode::Max, {y, x});
  auto l1 = b.add(OpCode::Lt, {x, y});
  auto l2 = b.add(OpCode::Lt, {y, x});
  ir::Graph g = b.done({a1, a2, s1, s2, m1, m2, l1, l2});
  cse(g, true);
  TSR_COMPARE(g.count(OpCode::Add), 1);
  TSR_COMPARE(g.count(OpCode::Max), 1);
  TSR_COMPARE(g.count(OpCode::Sub), 2);  // not commutative
  TSR_COMPARE(g.count(OpCode::Lt), 2);
}

TEST_CASE("equalLiteralsMergeButSignedZerosDoNot") {
  Builder b;
  auto x = b.input(f32({}));
  auto c1 = b.scalar(0.5);
  auto c2 = b.scalar(0.5);
  auto c3 = b.scalar(0.25);
  auto z = b.scalar(0.0);
  auto nz = b.scalar(-0.0);
  auto ci = b.scalar(0.5, DType::F64);  // same value, other dtype
  auto s = b.add(OpCode::Add, {b.add(OpCode::Add, {x, c1}), b.add(OpCode::Add, {x, c2})});
  auto t = b.add(OpCode::Mul, {c3, b.add(OpCode::Add, {z, nz})});
  ir::Graph g = b.done({s, t, ci});
  cse(g, true);
  TSR_COMPARE(g.count(OpCode::Constant), 5);  // 0.5 merged; 0.25, 0.0, -0.0, f64 0.5 stay
  TSR_COMPARE(g.count(OpCode::Add), 3);       // x + 0.5 twice became once
}

TEST_CASE("differentAttrsOrOperandsStayApart") {
  Builder b;
  auto x = b.input(f32({2, 3}));
  auto y = b.input(f32({2, 3}));
  auto r1 = b.add(OpCode::Reshape, {x}, ir::ReshapeAttrs{{3, 2}});
  auto r2 = b.add(OpCode::Reshape, {x}, ir::ReshapeAttrs{{6}});
  auto r3 = b.add(OpCode::Reshape, {y}, ir::ReshapeAttrs{{3, 2}});
  auto s1 = b.add(OpCode::ReduceSum, {x}, ir::ReduceAttrs{{0}});
  auto s2 = b.add(OpCode::ReduceSum, {x}, ir::ReduceAttrs{{1}});
  auto c1 = b.add(OpCode::Convert, {x}, ir::ConvertAttrs{DType::I32});
  auto c2 = b.add(OpCode::Convert, {x}, ir::ConvertAttrs{DType::F64});
  ir::Graph g = b.done({r1, r2, r3, s1, s2, c1, c2});
  std::string text = printGraph(g);
  cse(g, false);
  TSR_COMPARE(printGraph(g), text);
}

TEST_CASE("iotaAndMultiResultNodesMerge") {
  Builder b;
  Aval u = Aval{Shape{4}, DType::U32};
  auto k0 = b.input(u), k1 = b.input(u), c0 = b.input(u), c1 = b.input(u);
  auto r1 = b.addMulti(OpCode::Threefry2x32, {k0, k1, c0, c1});
  auto r2 = b.addMulti(OpCode::Threefry2x32, {k0, k1, c0, c1});
  auto i1 = b.add(OpCode::Iota, {}, ir::IotaAttrs{{4}, DType::U32, 0});
  auto i2 = b.add(OpCode::Iota, {}, ir::IotaAttrs{{4}, DType::U32, 0});
  auto x1 = b.add(OpCode::Xor, {r1[0], i1});
  auto x2 = b.add(OpCode::Xor, {r2[0], i2});
  ir::Graph g = b.done({x1, x2, r2[1]});
  cse(g, true);
  TSR_COMPARE(g.count(OpCode::Threefry2x32), 1);
  TSR_COMPARE(g.count(OpCode::Iota), 1);
  TSR_COMPARE(g.count(OpCode::Xor), 1);
  TSR_COMPARE(g.outputs()[0], g.outputs()[1]);
}

TEST_CASE("leavesDeadDuplicatesForDce") {
  Builder b;
  auto x = b.input(f32({3}));
  ir::Graph g = b.done({b.add(OpCode::Mul, {b.add(OpCode::Exp, {x}), b.add(OpCode::Exp, {x})})});
  cse(g, true);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 2);  // the duplicate exp is erased by CSE itself
}

TEST_CASE("attrsHashAgreesWithEquality") {
  ir::Attrs a = ir::SliceAttrs{{0, 1}, {2, 3}, {1, 1}};
  ir::Attrs b = ir::SliceAttrs{{0, 1}, {2, 3}, {1, 1}};
  ir::Attrs c = ir::SliceAttrs{{0, 1}, {2, 3}, {1, 2}};
  TSR_COMPARE(passes::hashAttrs(a), passes::hashAttrs(b));
  REQUIRE(passes::hashAttrs(a) != passes::hashAttrs(c));
  ir::Attrs l1 = ir::ConstantAttrs{ir::Literal::scalar(DType::F32, 1.0)};
  ir::Attrs l2 = ir::ConstantAttrs{ir::Literal::scalar(DType::F32, 1.0)};  // other storage, same bytes
  TSR_COMPARE(passes::hashAttrs(l1), passes::hashAttrs(l2));
  REQUIRE(passes::hashAttrs(ir::Attrs{ir::NoAttrs{}}) != passes::hashAttrs(ir::Attrs{ir::ReduceAttrs{}}));
}
