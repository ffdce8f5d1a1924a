// Constant folding: scalar and small-array chains fold (with the ops' own kernels, so bit-identical),
// elementwise ops on splats stay splats at any size, iota and broadcasts are never expanded, the size limit
// holds (with a logged reason), and nothing changes when an operand is not constant.
#include "tests/check.h"

#include <cmath>

#include "engine/passes/constant_folding.h"
#include "engine/passes/dce.h"
#include "engine/passes/rewrite.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

struct Folded {
  bool changed = false;
  std::vector<passes::Decision> log;
};

// Constant folding then DCE (folding leaves the replaced operands for DCE), checking verify and results.
Folded fold(ir::Graph& g, passes::PassOptions options = {}) {
  ir::Graph before = g;
  passes::ConstantFolding pass;
  passes::PassContext ctx(reg(), options);
  auto r = runPass(pass, g, ctx);
  if (!r.error.empty()) TSR_FATAL(r.error);
  passes::DeadCodeElimination dce;
  passes::PassContext quiet(reg());
  auto d = runPass(dce, g, quiet);
  if (!d.error.empty()) TSR_FATAL(d.error);
  std::string diff = compareResults(before, g);
  if (!diff.empty()) TSR_FATAL(diff << "\n" << printGraph(g));
  return {r.changed, ctx.log().all()};
}

const ir::Literal& onlyLiteral(const ir::Graph& g, ir::ValueId v) {
  const ir::Node& n = g.nodes()[static_cast<size_t>(g.value(v).producer)];
  return std::get<ir::ConstantAttrs>(n.attrs).value;
}

}  // namespace

TEST_CASE("foldsScalarArithmetic") {
  Builder b;
  auto x = b.input(f32({}));
  auto c = b.add(OpCode::Mul, {b.add(OpCode::Add, {b.scalar(2), b.scalar(3)}), b.scalar(0.5)});  // 2.5
  auto e = b.add(OpCode::Exp, {c});
  ir::Graph g = b.done({b.add(OpCode::Add, {x, e}), e});
  auto r = fold(g);
  REQUIRE(r.changed);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 2);  // one constant, the add of x
  double folded = onlyLiteral(g, g.outputs()[1]).elementAsDouble(0);
  REQUIRE(std::fabs(folded - std::exp(2.5)) < 1e-5);
  TSR_COMPARE(r.log.size(), size_t(3));
  TSR_COMPARE(r.log[0].message, std::string("add folded to a constant f32[]"));
}

TEST_CASE("foldsSmallArraysThroughLayoutOps") {
  Builder b;
  auto r = b.ramp(f32({6}), -1, 0.5);
  auto m = b.add(OpCode::Reshape, {r}, ir::ReshapeAttrs{{2, 3}});
  auto t = b.add(OpCode::Transpose, {m}, ir::TransposeAttrs{{1, 0}});
  auto s = b.add(OpCode::ReduceSum, {b.add(OpCode::Tanh, {t})}, ir::ReduceAttrs{{1}});
  auto i = b.add(OpCode::Convert, {b.ramp(i32({3}), 1, 1)}, ir::ConvertAttrs{DType::F32});
  ir::Graph g = b.done({b.add(OpCode::Mul, {s, i})});
  REQUIRE(fold(g).changed);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 1);
  TSR_COMPARE(g.nodes()[0].op, OpCode::Constant);
}

TEST_CASE("foldsMultiResultOps") {
  Builder b;
  Aval u = Aval{Shape{2}, DType::U32};
  auto k = b.ramp(u, 1, 1);
  auto bits = b.addMulti(OpCode::Threefry2x32, {k, k, b.ramp(u, 0, 1), b.ramp(u, 7, 1)});
  ir::Graph g = b.done({bits[0], bits[1]});
  REQUIRE(fold(g).changed);
  TSR_COMPARE(g.count(OpCode::Threefry2x32), 0);
  TSR_COMPARE(g.count(OpCode::Constant), 2);
}

TEST_CASE("neverExpandsIotaOrBroadcasts") {
  Builder b;
  auto i = b.add(OpCode::Iota, {}, ir::IotaAttrs{{8, 4}, DType::I32, 1});
  auto s = b.splat(3, f32({8, 4}));
  auto bc = b.add(OpCode::BroadcastInDim, {b.ramp(f32({4}), 0, 1)}, ir::BroadcastInDimAttrs{{8, 4}, {1}});
  auto ci = b.add(OpCode::Convert, {i}, ir::ConvertAttrs{DType::F32});  // iota is not a constant operand
  ir::Graph g = b.done({ci, s, bc});
  std::string text = printGraph(g);
  REQUIRE(!fold(g).changed);
  TSR_COMPARE(printGraph(g), text);
}

TEST_CASE("elementwiseOnSplatsStaysASplatAtAnySize") {
  Builder b;
  Aval big = f32({512, 512});  // 1 MiB: far over the limit, but splats never materialise
  auto a = b.add(OpCode::Add, {b.splat(2, big), b.splat(3, big)});
  auto m = b.add(OpCode::Mul, {a, b.splat(0.5, big)});
  auto n = b.add(OpCode::Neg, {m});
  auto x = b.input(big);
  ir::Graph g = b.done({b.add(OpCode::Add, {x, n})});
  auto r = fold(g);
  REQUIRE(r.changed);
  // add(x, broadcast(-2.5)): one constant, one broadcast, one add.
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 3);
  const ir::Node& add = g.nodes().back();
  TSR_COMPARE(passes::splatValue(g, add.operands[1]).value_or(0), -2.5);
  REQUIRE(r.log[0].message.rfind("add of splats -> broadcast of 5", 0) == 0);
}

TEST_CASE("respectsTheSizeLimitAndSaysWhy") {
  Builder b;
  Aval a = f32({128, 128});  // 64 KiB exactly: folds; 128 x 129 would not
  auto big = b.ramp(f32({128, 129}), 0, 0.001);
  auto ok = b.add(OpCode::Exp, {b.ramp(a, 0, 0.001)});
  auto tooBig = b.add(OpCode::Exp, {big});
  ir::Graph g = b.done({ok, tooBig});
  auto r = fold(g);
  REQUIRE(r.changed);
  TSR_COMPARE(g.count(OpCode::Exp), 1);
  bool rejected = false;
  for (const auto& d : r.log)
    rejected |= d.kind == passes::Decision::Kind::Rejected &&
                d.message == "not folded: exp result of 64.5 KiB exceeds the 64.0 KiB limit";
  REQUIRE(rejected);

  passes::PassOptions generous;
  generous.maxFoldBytes = 1 << 20;
  REQUIRE(fold(g, generous).changed);
  TSR_COMPARE(g.count(OpCode::Exp), 0);
}

TEST_CASE("broadcastOperandsMaterialiseWhenSmall") {
  Builder b;
  auto row = b.add(OpCode::BroadcastInDim, {b.ramp(f32({3}), 1, 1)}, ir::BroadcastInDimAttrs{{2, 3}, {1}});
  auto sum = b.add(OpCode::Add, {row, b.ramp(f32({2, 3}), 0, 10)});
  ir::Graph g = b.done({sum});
  REQUIRE(fold(g).changed);
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 1);
  auto values = onlyLiteral(g, g.outputs()[0]);
  TSR_COMPARE(values.elementAsDouble(4), 42.0);  // row[1] = 2, ramp[4] = 40
}

TEST_CASE("noChangeWithNonConstantOperands") {
  Builder b;
  auto x = b.input(f32({4}));
  auto y = b.add(OpCode::Add, {x, b.splat(1, f32({4}))});
  auto z = b.add(OpCode::Mul, {y, b.ramp(f32({4}), 0, 1)});
  ir::Graph g = b.done({z});
  std::string text = printGraph(g);
  auto r = fold(g);
  REQUIRE(!r.changed);
  REQUIRE(r.log.empty());
  TSR_COMPARE(printGraph(g), text);
}
