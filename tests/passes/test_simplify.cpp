// Simplify: every rule of the table on a graph where it applies (the rule named in the decision log, the node
// count after DCE, results unchanged), a table of near misses where nothing may change (x * 0 for floats
// among them), chains that collapse in one walk, and a check that every rule in the table is exercised here.
#include "tests/check.h"

#include <functional>
#include <map>
#include <set>

#include "engine/passes/dce.h"
#include "engine/passes/simplify.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

const Aval kX = f32({2, 3});

struct Case {
  const char* rule;        // the one rule expected in the log
  std::function<ir::Graph()> build;
  int nodesAfter = -1;     // after simplify + DCE; -1: don't check
};

// x: f32[2,3] -> f(x)
Case unary(const char* rule, int nodesAfter, std::function<ir::ValueId(Builder&, ir::ValueId)> f, Aval in = kX) {
  return {rule, [f, in] {
            Builder b;
            auto x = b.input(in);
            return b.done({f(b, x)});
          },
          nodesAfter};
}

ir::ValueId bin(Builder& b, OpCode op, ir::ValueId l, ir::ValueId r) { return b.add(op, {l, r}); }

std::vector<Case> applyingCases() {
  const Aval ki = i32({2, 3});
  return {
      unary("add(x, 0) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Add, x, b.splat(0, kX)); }),
      unary("add(0, x) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Add, b.ramp(kX, 0, 0), x); }),
      // x at columns [0, 3) and -x at [3, 6) of [2, 6]: the concatenate covers the result.
      unary("add(pad(x, 0), pad(y, 0)) side by side -> pad(concatenate(x, y), 0)", 2, [](Builder& b, auto x) {
        auto z = b.scalar(0);
        auto pa = b.add(OpCode::Pad, {x, z}, ir::PadAttrs{{0, 0}, {0, 3}, {0, 0}});
        auto pb = b.add(OpCode::Pad, {b.add(OpCode::Neg, {x}), z}, ir::PadAttrs{{0, 3}, {0, 0}, {0, 0}});
        return bin(b, OpCode::Add, pa, pb);
      }),
      unary("sub(x, 0) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Sub, x, b.splat(-0.0, kX)); }),
      unary("mul(x, 1) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Mul, x, b.splat(1, kX)); }),
      unary("mul(1, x) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Mul, b.splat(1, kX), x); }),
      unary("mul(x, 0) -> 0 (integers)", 2,
            [ki](Builder& b, auto x) { return bin(b, OpCode::Mul, x, b.splat(0, ki)); }, ki),
      unary("mul(0, x) -> 0 (integers)", 1,
            [ki](Builder& b, auto x) { return bin(b, OpCode::Mul, b.ramp(ki, 0, 0), x); }, ki),
      unary("div(x, 1) -> x", 0, [](Builder& b, auto x) { return bin(b, OpCode::Div, x, b.splat(1, kX)); }),
      unary("neg(neg(x)) -> x", 0, [](Builder& b, auto x) { return b.add(OpCode::Neg, {b.add(OpCode::Neg, {x})}); }),
      unary("reshape(x) to x's shape -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::Reshape, {x}, ir::ReshapeAttrs{{2, 3}}); }),
      unary("reshape(reshape(x)) -> reshape(x)", 1, [](Builder& b, auto x) {
        return b.add(OpCode::Reshape, {b.add(OpCode::Reshape, {x}, ir::ReshapeAttrs{{6}})}, ir::ReshapeAttrs{{3, 2}});
      }),
      unary("transpose(x) by the identity -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::Transpose, {x}, ir::TransposeAttrs{{0, 1}}); }),
      unary("transpose(transpose(x)) -> transpose(x) by the composed perm", 1, [](Builder& b, auto x) {
        auto t = b.add(OpCode::Transpose, {x}, ir::TransposeAttrs{{1, 2, 0}});  // [3,4,2]
        return b.add(OpCode::Transpose, {t}, ir::TransposeAttrs{{0, 2, 1}});    // [3,2,4] = x by {1,0,2}
      }, f32({2, 3, 4})),
      unary("transpose(transpose(x)) -> transpose(x) by the composed perm", 0, [](Builder& b, auto x) {
        return b.add(OpCode::Transpose, {b.add(OpCode::Transpose, {x}, ir::TransposeAttrs{{1, 0}})},
                     ir::TransposeAttrs{{1, 0}});
      }),
      unary("transpose(dot_general(a, b)) swapping the free dims -> dot_general(b, a)", 2, [](Builder& b, auto x) {
        ir::DotGeneralAttrs mm{{1}, {0}, {}, {}};
        auto d = b.add(OpCode::DotGeneral, {x, b.ramp(f32({3, 4}), 0, 0.25)}, mm);  // [2,4]
        return b.add(OpCode::Transpose, {d}, ir::TransposeAttrs{{1, 0}});         // [4,2] = w^T x^T
      }),
      unary("broadcast_in_dim(x) to x's shape -> x", 0, [](Builder& b, auto x) {
        return b.add(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{{2, 3}, {0, 1}});
      }),
      unary("broadcast_in_dim(broadcast_in_dim(x)) -> broadcast_in_dim(x)", 1, [](Builder& b, auto x) {
        auto r = b.add(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{{5, 2, 3}, {1, 2}});
        return b.add(OpCode::BroadcastInDim, {r}, ir::BroadcastInDimAttrs{{5, 2, 4, 3}, {0, 1, 3}});
      }),
      unary("slice(x) of the full range -> x", 0, [](Builder& b, auto x) {
        return b.add(OpCode::Slice, {x}, ir::SliceAttrs{{0, 0}, {2, 3}, {1, 1}});
      }),
      unary("pad(x) by nothing -> x", 0, [](Builder& b, auto x) {
        return b.add(OpCode::Pad, {x, b.scalar(1)}, ir::PadAttrs{{0, 0}, {0, 0}, {0, 0}});
      }),
      unary("concatenate(x) -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::Concatenate, {x}, ir::ConcatenateAttrs{1}); }),
      unary("convert(x) to x's dtype -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::Convert, {x}, ir::ConvertAttrs{DType::F32}); }),
      {"select(p, x, x) -> x",
       [] {
         Builder b;
         auto p = b.input(Aval{Shape{2, 3}, DType::Bool});
         auto x = b.input(kX);
         return b.done({b.add(OpCode::Select, {p, x, x})});
       },
       0},
      unary("reduce_sum(x) over no axes -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::ReduceSum, {x}, ir::ReduceAttrs{{}}); }),
      unary("reduce_max(x) over no axes -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::ReduceMax, {x}, ir::ReduceAttrs{{}}); }),
      unary("reduce_min(x) over no axes -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::ReduceMin, {x}, ir::ReduceAttrs{{}}); }),
      unary("reduce_prod(x) over no axes -> x", 0,
            [](Builder& b, auto x) { return b.add(OpCode::ReduceProd, {x}, ir::ReduceAttrs{{}}); }),
  };
}

struct NearMiss {
  const char* label;
  std::function<ir::ValueId(Builder&, ir::ValueId)> f;  // x: f32[2,3] -> the graph's output
};

std::vector<NearMiss> nearMisses() {
  return {
      // x * 0 is NaN for x = ±inf or NaN and -0.0 for negative x, so floats keep it (as in XLA).
      {"mul(x, 0) float", [](Builder& b, auto x) { return bin(b, OpCode::Mul, x, b.splat(0, kX)); }},
      {"mul(0, x) float", [](Builder& b, auto x) { return bin(b, OpCode::Mul, b.splat(0, kX), x); }},
      {"add(x, 1)", [](Builder& b, auto x) { return bin(b, OpCode::Add, x, b.splat(1, kX)); }},
      {"sub(0, x)", [](Builder& b, auto x) { return bin(b, OpCode::Sub, b.splat(0, kX), x); }},
      {"mul(x, 2)", [](Builder& b, auto x) { return bin(b, OpCode::Mul, x, b.splat(2, kX)); }},
      {"div(1, x)", [](Builder& b, auto x) { return bin(b, OpCode::Div, b.splat(1, kX), x); }},
      {"add(x, ramp)", [](Builder& b, auto x) { return bin(b, OpCode::Add, x, b.ramp(kX, 0, 1)); }},
      {"neg(abs(x))", [](Builder& b, auto x) { return b.add(OpCode::Neg, {b.add(OpCode::Abs, {x})}); }},
      {"reshape to [3,2]", [](Builder& b, auto x) { return b.add(OpCode::Reshape, {x}, ir::ReshapeAttrs{{3, 2}}); }},
      {"transpose", [](Builder& b, auto x) { return b.add(OpCode::Transpose, {x}, ir::TransposeAttrs{{1, 0}}); }},
      {"broadcast up",
       [](Builder& b, auto x) {
         return b.add(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{{4, 2, 3}, {1, 2}});
       }},
      {"partial slice",
       [](Builder& b, auto x) { return b.add(OpCode::Slice, {x}, ir::SliceAttrs{{0, 1}, {2, 3}, {1, 1}}); }},
      {"strided slice",
       [](Builder& b, auto x) { return b.add(OpCode::Slice, {x}, ir::SliceAttrs{{0, 0}, {2, 3}, {1, 2}}); }},
      {"concatenate two",
       [](Builder& b, auto x) { return b.add(OpCode::Concatenate, {x, x}, ir::ConcatenateAttrs{0}); }},
      {"convert to f64", [](Builder& b, auto x) { return b.add(OpCode::Convert, {x}, ir::ConvertAttrs{DType::F64}); }},
      {"select(p, x, y)",
       [](Builder& b, auto x) {
         auto p = b.add(OpCode::Gt, {x, b.splat(0, kX)});
         return b.add(OpCode::Select, {p, x, b.add(OpCode::Neg, {x})});
       }},
      // The product is used twice: swapping would compute it twice.
      {"transpose of a shared dot_general",
       [](Builder& b, auto x) {
         ir::DotGeneralAttrs mm{{1}, {1}, {}, {}};
         auto d = b.add(OpCode::DotGeneral, {x, x}, mm);  // [2,2]
         return b.add(OpCode::Add, {d, b.add(OpCode::Transpose, {d}, ir::TransposeAttrs{{1, 0}})});
       }},
      // Batched: a transpose that moves the batch dim is not an operand swap.
      {"transpose moving a dot's batch dim",
       [](Builder& b, auto x) {
         ir::DotGeneralAttrs bmm{{}, {}, {0}, {0}};
         auto d = b.add(OpCode::DotGeneral, {x, x}, bmm);  // [2,3,3]
         return b.add(OpCode::Transpose, {d}, ir::TransposeAttrs{{1, 0, 2}});
       }},
      // Pads of x and -x into [2, 7] that leave column 3 empty, that overlap on column 2, that pad with 1, or
      // that pad along two dims: none is a concatenate.
      {"pads with a gap",
       [](Builder& b, auto x) {
         auto z = b.scalar(0);
         return bin(b, OpCode::Add, b.add(OpCode::Pad, {x, z}, ir::PadAttrs{{0, 0}, {0, 4}, {0, 0}}),
                    b.add(OpCode::Pad, {b.add(OpCode::Neg, {x}), z}, ir::PadAttrs{{0, 4}, {0, 0}, {0, 0}}));
       }},
      {"overlapping pads",
       [](Builder& b, auto x) {
         auto z = b.scalar(0);
         return bin(b, OpCode::Add, b.add(OpCode::Pad, {x, z}, ir::PadAttrs{{0, 0}, {0, 2}, {0, 0}}),
                    b.add(OpCode::Pad, {b.add(OpCode::Neg, {x}), z}, ir::PadAttrs{{0, 2}, {0, 0}, {0, 0}}));
       }},
      {"pads with 1",
       [](Builder& b, auto x) {
         auto one = b.scalar(1);
         return bin(b, OpCode::Add, b.add(OpCode::Pad, {x, one}, ir::PadAttrs{{0, 0}, {0, 3}, {0, 0}}),
                    b.add(OpCode::Pad, {b.add(OpCode::Neg, {x}), one}, ir::PadAttrs{{0, 3}, {0, 0}, {0, 0}}));
       }},
      {"pads along two dims",
       [](Builder& b, auto x) {
         auto z = b.scalar(0);
         auto sq = b.add(OpCode::Slice, {x}, ir::SliceAttrs{{0, 0}, {2, 2}, {1, 1}});  // [2,2]
         return bin(b, OpCode::Add, b.add(OpCode::Pad, {sq, z}, ir::PadAttrs{{1, 0}, {0, 1}, {0, 0}}),
                    b.add(OpCode::Pad, {sq, z}, ir::PadAttrs{{0, 1}, {1, 0}, {0, 0}}));
       }},
      {"reduce over an axis", [](Builder& b, auto x) { return b.add(OpCode::ReduceSum, {x}, ir::ReduceAttrs{{1}}); }},
  };
}

struct Outcome {
  bool changed = false;
  std::vector<std::string> rules;
  std::string error;
};

// simplify, then DCE; checks verify after each and results against the original graph.
Outcome simplify(ir::Graph& g) {
  ir::Graph before = g;
  Outcome o;
  passes::Simplify pass;
  passes::PassContext ctx(reg());
  auto r = runPass(pass, g, ctx);
  if (!r.error.empty()) return {false, {}, r.error};
  o.changed = r.changed;
  for (const auto& d : ctx.log().all()) o.rules.push_back(d.message);
  passes::DeadCodeElimination dce;
  auto d = runPass(dce, g, ctx);
  if (!d.error.empty()) return {false, {}, d.error};
  o.error = compareResults(before, g);
  return o;
}

}  // namespace

TEST_CASE("everyRuleApplies") {
  std::set<std::string> hit;
  for (const Case& c : applyingCases()) {
    ir::Graph g = c.build();
    Outcome o = simplify(g);
    REQUIRE_MESSAGE(o.error.empty(), (std::string(c.rule) + ": " + o.error).c_str());
    REQUIRE_MESSAGE(o.changed, c.rule);
    REQUIRE_MESSAGE(o.rules == std::vector<std::string>{c.rule},
                    (std::string(c.rule) + ": logged " + (o.rules.empty() ? "nothing" : o.rules[0])).c_str());
    REQUIRE_MESSAGE(static_cast<int>(g.nodes().size()) == c.nodesAfter,
                    (std::string(c.rule) + "\n" + printGraph(g)).c_str());
    hit.insert(c.rule);
  }
  for (const auto& rule : passes::simplifyRules())
    REQUIRE_MESSAGE(hit.count(rule.name), (std::string("no test case for rule ") + rule.name).c_str());
}

TEST_CASE("nearMissesChangeNothing") {
  for (const NearMiss& m : nearMisses()) {
    Builder b;
    auto x = b.input(kX);
    ir::Graph g = b.done({m.f(b, x)});
    std::string text = printGraph(g);
    Outcome o = simplify(g);
    REQUIRE_MESSAGE(o.error.empty(), (std::string(m.label) + ": " + o.error).c_str());
    REQUIRE_MESSAGE(!o.changed, (std::string(m.label) + ": " + (o.rules.empty() ? "" : o.rules[0])).c_str());
    TSR_COMPARE(printGraph(g), text);
  }
}

// The gradient of three slices of one tensor (attention's q, k, v split): three pads and two adds become one
// concatenate of the three and one pad (the slices here leave a column free on each side).
TEST_CASE("slicesGradientIsOneConcatenate") {
  Builder b;
  auto x = b.input(kX);
  auto z = b.scalar(0);
  auto pad = [&](ir::ValueId v, int64_t lo, int64_t hi) {
    return b.add(OpCode::Pad, {v, z}, ir::PadAttrs{{0, lo}, {0, hi}, {0, 0}});
  };
  auto sum = bin(b, OpCode::Add, bin(b, OpCode::Add, pad(x, 1, 7), pad(b.add(OpCode::Neg, {x}), 4, 4)),
                 pad(b.add(OpCode::Abs, {x}), 7, 1));  // [2, 11]
  ir::Graph g = b.done({sum});
  Outcome o = simplify(g);
  REQUIRE_MESSAGE(o.error.empty(), o.error.c_str());
  TSR_COMPARE(o.rules.size(), size_t{2});
  std::map<OpCode, int> count;
  const ir::Node* cat = nullptr;
  for (const auto& n : g.nodes()) {
    ++count[n.op];
    if (n.op == OpCode::Concatenate) cat = &n;
  }
  TSR_COMPARE(count[OpCode::Add], 0);
  TSR_COMPARE(count[OpCode::Pad], 1);
  TSR_COMPARE(count[OpCode::Concatenate], 1);
  TSR_COMPARE(cat->operands.size(), size_t{3});
}

TEST_CASE("composedTransposeHasTheRightPerm") {
  Builder b;
  auto x = b.input(f32({2, 3, 4}));
  auto t = b.add(OpCode::Transpose, {x}, ir::TransposeAttrs{{1, 2, 0}});  // [3,4,2]
  ir::Graph g = b.done({b.add(OpCode::Transpose, {t}, ir::TransposeAttrs{{0, 2, 1}})});
  REQUIRE(simplify(g).error.empty());
  TSR_COMPARE(g.count(OpCode::Transpose), 1);
  TSR_COMPARE(std::get<ir::TransposeAttrs>(g.nodes()[0].attrs).perm, (ir::Ints{1, 0, 2}));
}

TEST_CASE("composedBroadcastHasTheRightDims") {
  // x: [2,1] -> [3,2,4] by {1,2} -> [3,5,2,4] by {0,2,3}: x dims land on 2 and 3.
  Builder b;
  auto x = b.input(f32({2, 1}));
  auto r = b.add(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{{3, 2, 4}, {1, 2}});
  ir::Graph g = b.done({b.add(OpCode::BroadcastInDim, {r}, ir::BroadcastInDimAttrs{{3, 5, 2, 4}, {0, 2, 3}})});
  Outcome o = simplify(g);
  REQUIRE_MESSAGE(o.error.empty(), o.error.c_str());
  TSR_COMPARE(g.count(OpCode::BroadcastInDim), 1);
  TSR_COMPARE(std::get<ir::BroadcastInDimAttrs>(g.nodes()[0].attrs).broadcastDims, (ir::Ints{2, 3}));
}

TEST_CASE("chainsCollapseInOneWalk") {
  Builder b;
  auto x = b.input(kX);
  auto n = b.add(OpCode::Neg, {b.add(OpCode::Neg, {b.add(OpCode::Neg, {b.add(OpCode::Neg, {x})})})});
  auto r = b.add(OpCode::Reshape, {b.add(OpCode::Reshape, {b.add(OpCode::Reshape, {n}, ir::ReshapeAttrs{{6}})},
                                        ir::ReshapeAttrs{{3, 2}})},
                 ir::ReshapeAttrs{{2, 3}});
  auto s = b.add(OpCode::Mul, {b.add(OpCode::Add, {r, b.splat(0, kX)}), b.splat(1, kX)});
  ir::Graph g = b.done({s});
  Outcome o = simplify(g);
  REQUIRE_MESSAGE(o.error.empty(), o.error.c_str());
  TSR_COMPARE(static_cast<int>(g.nodes().size()), 0);  // everything was the identity
  TSR_COMPARE(g.outputs()[0], g.inputs()[0]);
}

TEST_CASE("rewritesInsideNestedGraphs") {
  if (!reg().find(OpCode::Scan)) TSR_SKIP("scan is not registered yet");
  // body(c, x) = (c + x * 1, neg(neg(x))): both simplify away inside the scan.
  Builder body("body");
  auto c = body.input(f32({4}));
  auto x = body.input(f32({4}));
  auto s = body.add(OpCode::Add, {c, body.add(OpCode::Mul, {x, body.splat(1, f32({4}))})});
  auto y = body.add(OpCode::Neg, {body.add(OpCode::Neg, {x})});
  auto bodyGraph = std::make_shared<const ir::Graph>(body.done({s, y}));
  Builder b;
  auto c0 = b.input(f32({4}));
  auto xs = b.input(f32({3, 4}));
  auto res = b.addMulti(OpCode::Scan, {c0, xs}, ir::ScanAttrs{3, 0, 1, false, bodyGraph});
  ir::Graph g = b.done({res[0], res[1]});
  std::string text = printGraph(g);

  ir::Graph untouched = g;
  passes::PassOptions flat;
  flat.rewriteRegions = false;
  passes::Simplify pass;
  passes::PassContext off(reg(), flat);
  REQUIRE(!runPass(pass, untouched, off).changed);
  TSR_COMPARE(printGraph(untouched), text);

  Outcome o = simplify(g);
  REQUIRE_MESSAGE(o.error.empty(), o.error.c_str());
  TSR_COMPARE(o.rules, (std::vector<std::string>{"mul(x, 1) -> x", "neg(neg(x)) -> x"}));
  const auto& newBody = std::get<ir::ScanAttrs>(g.nodes()[0].attrs).body;
  TSR_COMPARE(newBody->nodes().size(), size_t(1));  // the add; DCE cleaned the body too
  TSR_COMPARE(newBody->outputs()[1], newBody->inputs()[1]);

  passes::PassContext ctx(reg());
  ir::Graph again = b.g;
  REQUIRE(pass.run(again, ctx).ok());
  TSR_COMPARE(ctx.log().all()[0].region, (std::vector<ir::NodeId>{0}));
  REQUIRE(ctx.log().all()[0].toString().find("node 0/2: mul(x, 1) -> x") != std::string::npos);
}

TEST_CASE("decisionsCarryNodeAndProvenance") {
  Builder b;
  auto x = b.input(kX);
  auto z = b.splat(0, kX);
  auto s = b.add(OpCode::Add, {x, z}, ir::NoAttrs{}, ir::Provenance{"blocks.2.mlp", "model.cpp", 40});
  ir::Graph g = b.done({s});
  passes::Simplify pass;
  passes::PassContext ctx(reg());
  ctx.enterPass("simplify", 4);
  REQUIRE(pass.run(g, ctx).ok());
  TSR_COMPARE(ctx.log().size(), size_t(1));
  const passes::Decision& d = ctx.log().all()[0];
  TSR_COMPARE(d.pass, std::string("simplify"));
  TSR_COMPARE(d.nodes, (std::vector<ir::NodeId>{2}));
  TSR_COMPARE(d.prov.modulePath, std::string("blocks.2.mlp"));
  TSR_COMPARE(d.toString(), std::string("[4 simplify] node 2 @ blocks.2.mlp @ model.cpp:40: add(x, 0) -> x"));
}
