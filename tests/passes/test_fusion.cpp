// Fusion and the CPU executable: each kind of group forms where it should and not where it should not (with
// the reason recorded), and the compiled program gives the reference interpreter's results, with the memory
// planner's freed bytes poisoned so that any overlap of live values shows up.
#include "tests/check.h"

#include <atomic>
#include <cmath>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/backends/cpu/vmath.h"
#include "engine/passes/fusion.h"
#include "engine/runtime/interpreter.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;
using passes::GroupKind;

namespace {

struct Planned {
  passes::FusionPlan plan;
  std::vector<std::string> decisions;
};

Planned plan(const ir::Graph& g, const passes::FusionOptions& o = {}) {
  passes::PassContext ctx(reg());
  auto p = passes::planFusion(g, reg(), &ctx, o);
  if (!p.ok()) TSR_FATAL("planFusion: " << p.error().message);
  Planned out{std::move(*p), {}};
  for (const auto& d : ctx.log().all()) out.decisions.push_back(d.message);
  return out;
}

int countKind(const passes::FusionPlan& p, GroupKind k) {
  int n = 0;
  for (const auto& g : p.groups) n += g.kind == k;
  return n;
}

bool anyDecision(const Planned& p, const std::string& part) {
  for (const auto& d : p.decisions)
    if (d.find(part) != std::string::npos) return true;
  return false;
}

// Compiles g (poisoning freed memory) and compares every output with the interpreter on random inputs.
// Tolerance: exp/log/tanh/logistic are vectorised polynomials (a few ulp), sums run in another order.
std::string compiledMatches(const ir::Graph& g, double tol = 1e-5, const passes::FusionOptions& o = {},
                            cpu::CompileOptions co = {}) {
  auto p = passes::planFusion(g, reg(), nullptr, o);
  if (!p.ok()) return p.error().message;
  co.poisonFreed = true;
  auto exe = cpu::Executable::compile(g, reg(), *p, co);
  if (!exe.ok()) return exe.error().message;
  std::string overlap = (*exe)->memory().findOverlap();
  if (!overlap.empty()) return overlap;
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    auto inputs = randomInputs(g, seed);
    auto want = runtime::interpret(g, reg(), inputs);
    if (!want.ok()) return want.error().message;
    auto got = (*exe)->run(inputs);
    if (!got.ok()) return got.error().message;
    for (size_t i = 0; i < want->size(); ++i) {
      const Aval& a = g.aval(g.outputs()[i]);
      auto x = toDoubles((*want)[i], a), y = toDoubles((*got)[i], a);
      for (size_t j = 0; j < x.size(); ++j) {
        bool bothNan = std::isnan(x[j]) && std::isnan(y[j]);
        if (!bothNan && !(std::fabs(x[j] - y[j]) <= tol * (1 + std::fabs(x[j]))))
          return fmt::format("output {} element {}: interpreter {} compiled {}", i, j, x[j], y[j]);
      }
    }
  }
  return "";
}

ir::DotGeneralAttrs matmulAttrs() {
  ir::DotGeneralAttrs a;
  a.lhsContracting = {1};
  a.rhsContracting = {0};
  return a;
}

}  // namespace

TEST_CASE("elementwiseChainIsOneLoop") {
  Builder b;
  auto x = b.input(f32({64, 300}));
  auto a = b.input(f32({300}));
  auto ab = b.add(OpCode::BroadcastInDim, {a}, bcast({64, 300}, {1}));
  auto y = b.add(OpCode::Mul, {x, ab});
  auto z = b.add(OpCode::Add, {y, b.splat(1.5, f32({64, 300}))});
  auto t = b.add(OpCode::Tanh, {z});
  ir::Graph g = b.done({b.add(OpCode::Mul, {t, x})});
  Planned p = plan(g);
  TSR_COMPARE(countKind(p.plan, GroupKind::Loop), 1);
  // The broadcasts are read through, not materialised.
  for (const auto& gr : p.plan.groups)
    if (gr.kind == GroupKind::Loop) {
      TSR_COMPARE(int(gr.nodes.size()), 4);
      TSR_COMPARE(int(gr.outputs.size()), 1);
    }
  REQUIRE(anyDecision(p, "fused into fusion."));
  TSR_COMPARE(compiledMatches(g), std::string());
}

// bf16 values fuse as f32 ones do. With each bf16 result rounded where it is computed (no excess precision),
// the fused loop gives the interpreter's op-by-op results exactly (mul, add and max are exact in f32 before the
// rounding). Under excess precision (the default) the chain stays f32 to its end: a bf16 output is the f32
// chain's value rounded once, a convert to f32 of it that value itself (computed here by hand). A bf16 reduction
// takes its prologue (accumulated in f32, rounded once: within bf16's precision of the op's).
TEST_CASE("bf16ChainsFuseAndRoundWhereTheyLeave") {
  auto bf16 = [](Shape s) { return Aval{std::move(s), DType::BF16}; };
  Builder b;
  auto x = b.input(bf16({64, 300}));
  auto a = b.input(f32({300}));
  auto ah = b.add(OpCode::Convert, {a}, ir::ConvertAttrs{DType::BF16});
  auto ab = b.add(OpCode::BroadcastInDim, {ah}, bcast({64, 300}, {1}));
  auto y = b.add(OpCode::Mul, {x, ab});
  auto z = b.add(OpCode::Add, {y, b.splat(1.5, bf16({64, 300}))});
  auto w = b.add(OpCode::Max, {z, x});
  ir::Graph g = b.done({w, b.add(OpCode::Convert, {w}, ir::ConvertAttrs{DType::F32})});
  Planned p = plan(g);
  TSR_COMPARE(countKind(p.plan, GroupKind::Loop), 2);  // a's convert over [300], the chain over [64, 300]
  TSR_COMPARE(countKind(p.plan, GroupKind::Opaque), 0);
  cpu::CompileOptions exact;
  exact.bf16ExcessPrecision = false;
  TSR_COMPARE(compiledMatches(g, 0.0, {}, exact), std::string());
  auto exe = cpu::Executable::compile(g, reg(), p.plan, cpu::CompileOptions{});
  REQUIRE(exe.ok());
  auto inputs = randomInputs(g, 3);
  auto got = (*exe)->run(inputs);
  REQUIRE(got.ok());
  const auto xs = toDoubles(inputs[0], g.aval(g.inputs()[0])), as = toDoubles(inputs[1], g.aval(g.inputs()[1]));
  const auto out0 = toDoubles((*got)[0], g.aval(g.outputs()[0])), out1 = toDoubles((*got)[1], g.aval(g.outputs()[1]));
  int rounded = 0;
  for (size_t e = 0; e < xs.size(); ++e) {
    const float xe = static_cast<float>(xs[e]);
    const float ae = static_cast<float>(tsr::bf16(static_cast<float>(as[e % 300])));
    const float chain = std::max(xe * ae + 1.5f, xe);
    REQUIRE_MESSAGE(out1[e] == chain, "element " << e << ": convert(w) " << out1[e] << ", the f32 chain " << chain);
    REQUIRE_MESSAGE(out0[e] == static_cast<float>(tsr::bf16(chain)), "element " << e << ": w " << out0[e]);
    rounded += static_cast<float>(tsr::bf16(xe * ae)) + 1.5f != xe * ae + 1.5f;  // where op by op differs
  }
  REQUIRE(rounded > 1000);

  Builder r;
  auto xr = r.input(bf16({48, 700}));
  auto sq = r.add(OpCode::Mul, {xr, xr});
  ir::Graph gr = r.done({r.add(OpCode::ReduceSum, {sq}, axes({1}))});
  Planned pr = plan(gr);
  TSR_COMPARE(countKind(pr.plan, GroupKind::Reduction), 1);
  TSR_COMPARE(countKind(pr.plan, GroupKind::Opaque), 0);
  TSR_COMPARE(compiledMatches(gr, 1.0 / 128), std::string());
}

TEST_CASE("differentShapesAndIntegersStayApart") {
  Builder b;
  auto x = b.input(f32({8, 16}));
  auto s = b.add(OpCode::ReduceSum, {x}, axes({1}));
  auto e = b.add(OpCode::Exp, {s});  // [8]: another space
  auto i = b.input(i32({8}));
  auto j = b.add(OpCode::Add, {i, i});  // integers: own kernel
  ir::Graph g = b.done({e, j});
  Planned p = plan(g);
  REQUIRE(anyDecision(p, "not fused with reduce_sum: a reduction's result is complete only after its kernel"));
  REQUIRE(anyDecision(p, "not fused: add works on i32"));
  TSR_COMPARE(countKind(p.plan, GroupKind::Opaque), 1);
  TSR_COMPARE(compiledMatches(g), std::string());
}

// Every fusion decision is a value: a reason code and the nodes it concerns (the consumer, then the producers);
// whyNotFused answers for any two nodes from those values and the plan.
TEST_CASE("decisionsCarryReasonsAndWhyNotFusedReadsThem") {
  Builder b;
  auto x = b.input(f32({8, 16}));
  auto e = b.add(OpCode::Exp, {x});
  auto n = b.add(OpCode::Neg, {e});                    // fuses with exp
  auto s = b.add(OpCode::ReduceSum, {n}, axes({1}));   // takes exp and neg as its prologue
  auto l = b.add(OpCode::Log, {s});                    // [8]: after the reduction
  auto lb = b.add(OpCode::BroadcastInDim, {l}, bcast({8, 16}, {0}));
  auto m = b.add(OpCode::Mul, {lb, x});                // [8, 16]: another space than log's
  auto v = b.add(OpCode::ErfInv, {l});                 // no loop lowering
  auto i = b.input(i32({8}));
  auto j = b.add(OpCode::Add, {i, i});                 // integers
  ir::Graph g = b.done({m, v, j});
  auto node = [&](ir::ValueId val) { return g.value(val).producer; };
  passes::PassContext ctx(reg());
  auto p = passes::planFusion(g, reg(), &ctx);
  REQUIRE(p.ok());
  const auto& ds = ctx.log().all();
  using R = passes::FusionReason;
  auto verdict = [&](ir::ValueId a, ir::ValueId c) { return passes::whyNotFused(g, *p, ds, node(a), node(c)); };

  auto fused = verdict(e, n);
  REQUIRE(fused.fused);
  TSR_COMPARE(fused.reason, R::Fused);
  REQUIRE(verdict(n, s).fused);  // the prologue

  auto afterSum = verdict(l, s);
  REQUIRE(!afterSum.fused);
  TSR_COMPARE(afterSum.reason, R::AfterReduction);
  REQUIRE(afterSum.detail.find("reduce_sum") != std::string::npos);
  REQUIRE(!afterSum.hint.empty());

  auto spaces = verdict(m, l);
  TSR_COMPARE(spaces.reason, R::DifferentSpaces);
  REQUIRE_MESSAGE(spaces.detail.find("f32[8]") != std::string::npos, spaces.detail.c_str());

  auto noLowering = verdict(v, l);
  TSR_COMPARE(noLowering.reason, R::NoLoopLowering);
  REQUIRE(noLowering.hint.find("TSR_LOOP_LOWERING") != std::string::npos);

  TSR_COMPARE(verdict(j, e).reason, R::Unrelated);

  // The integer add's own decision, and the text form of a decision carries its code.
  bool sawDType = false, sawCode = false;
  for (const auto& d : ds) {
    sawDType |= d.reason == R::UnsupportedDType && d.nodes == std::vector<ir::NodeId>{node(j)};
    sawCode |= d.toString().find("[after_reduction]") != std::string::npos;
    if (d.reason == R::Fused || d.reason == R::DifferentSpaces || d.reason == R::AfterReduction)
      REQUIRE_MESSAGE(d.nodes.size() >= 2, d.toString().c_str());  // a pair decision names both sides
  }
  REQUIRE(sawDType);
  REQUIRE(sawCode);
}

// softmax over the last axis of f32[32, 100]: max, then exp(x - max) with its sum in one pass, then the division.
struct Softmax {
  ir::Graph g;
  ir::ValueId max, exp, sum, out;
};
Softmax softmax() {
  Builder b;
  auto x = b.input(f32({32, 100}));
  auto m = b.add(OpCode::ReduceMax, {x}, axes({1}));
  auto mb = b.add(OpCode::BroadcastInDim, {m}, bcast({32, 100}, {0}));
  auto e = b.add(OpCode::Exp, {b.add(OpCode::Sub, {x, mb})});
  auto s = b.add(OpCode::ReduceSum, {e}, axes({1}));
  auto sb = b.add(OpCode::BroadcastInDim, {s}, bcast({32, 100}, {0}));
  auto y = b.add(OpCode::Div, {e, sb});
  return {b.done({y}), m, e, s, y};
}

TEST_CASE("softmaxIsThreeKernels") {
  ir::Graph g = softmax().g;
  Planned p = plan(g);
  TSR_COMPARE(p.plan.numKernels(), 3);
  TSR_COMPARE(countKind(p.plan, GroupKind::Reduction), 2);
  REQUIRE(anyDecision(p, "fused with its prologue"));
  TSR_COMPARE(compiledMatches(g), std::string());
}

// The boundaries fusion leaves in softmax, worked out by hand: three kernels (max; exp with its sum; the
// division) hand on exp's [32, 100] result (12,800 bytes, written and read: 25,600) and the two [32] reductions
// (128 bytes each, 256 moved). The input is no boundary.
TEST_CASE("costliestUnfusedBoundariesOfSoftmax") {
  auto [g, m, e, s, y] = softmax();
  passes::PassContext ctx(reg());
  auto p = passes::planFusion(g, reg(), &ctx);
  REQUIRE(p.ok());
  auto all = passes::costliestUnfusedBoundaries(g, *p, ctx.log().all(), 10);
  TSR_COMPARE(all.size(), size_t(3));
  TSR_COMPARE(all[0].value, e);
  TSR_COMPARE(all[0].bytes, int64_t(25600));
  TSR_COMPARE(all[0].producer, g.value(e).producer);
  TSR_COMPARE(all[0].consumer, g.value(y).producer);
  REQUIRE(!all[0].verdict.fused);
  REQUIRE(all[0].verdict.reason != passes::FusionReason::None);
  std::vector<ir::ValueId> small = {all[1].value, all[2].value};
  std::sort(small.begin(), small.end());
  std::vector<ir::ValueId> want = {m, s};
  std::sort(want.begin(), want.end());
  TSR_COMPARE(small, want);
  TSR_COMPARE(all[1].bytes, int64_t(256));
  TSR_COMPARE(all[2].bytes, int64_t(256));
  TSR_COMPARE(passes::costliestUnfusedBoundaries(g, *p, ctx.log().all(), 1).size(), size_t(1));
}

TEST_CASE("layerNormSiblingReductionsShareAPass") {
  // mean and mean of squares of the same input: one kernel reads x once for both sums.
  Builder b;
  auto x = b.input(f32({16, 64}));
  auto s1 = b.add(OpCode::ReduceSum, {x}, axes({1}));
  auto sq = b.add(OpCode::Mul, {x, x});
  auto s2 = b.add(OpCode::ReduceSum, {sq}, axes({1}));
  ir::Graph g = b.done({s1, s2});
  Planned p = plan(g);
  TSR_COMPARE(p.plan.numKernels(), 1);
  TSR_COMPARE(int(p.plan.groups[0].outputs.size()), 2);
  TSR_COMPARE(compiledMatches(g), std::string());
}

TEST_CASE("siblingReductionsThroughATransposeStayApart") {
  // sum(t, 1) and sum(transpose(t), 1) of a square t: the same shapes and axes, but different dims of t.
  // (Regression: they were merged into one kernel that computed the first sum twice.)
  Builder b;
  auto x = b.input(f32({8, 8}));
  auto t = b.add(OpCode::Tanh, {x});
  auto s1 = b.add(OpCode::ReduceSum, {t}, axes({1}));
  ir::TransposeAttrs perm;
  perm.perm = {1, 0};
  auto tt = b.add(OpCode::Transpose, {t}, perm);
  auto s2 = b.add(OpCode::ReduceSum, {tt}, axes({1}));
  ir::Graph g = b.done({s1, s2});
  TSR_COMPARE(compiledMatches(g), std::string());
}

TEST_CASE("reductionLayouts") {
  // Rows, columns, the middle axis, everything, and two non-adjacent axes (the generic path), each with a
  // prologue.
  for (auto ax : std::vector<std::vector<int64_t>>{{2}, {0}, {1}, {0, 1}, {1, 2}, {0, 1, 2}}) {
    Builder b;
    auto x = b.input(f32({6, 70, 530}));
    auto y = b.add(OpCode::Mul, {x, b.splat(0.5, f32({6, 70, 530}))});
    ir::Graph g = b.done({b.add(OpCode::ReduceSum, {y}, axes(ax)), b.add(OpCode::ReduceMax, {x}, axes(ax))});
    TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
  }
  // A reduction through a transpose: the generic path.
  Builder b;
  auto x = b.input(f32({40, 30}));
  ir::TransposeAttrs t;
  t.perm = {1, 0};
  auto xt = b.add(OpCode::Transpose, {x}, t);
  auto e = b.add(OpCode::Exp, {xt});
  ir::Graph g = b.done({b.add(OpCode::ReduceSum, {e}, axes({1}))});
  TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
}

TEST_CASE("gemmTakesItsEpilogue") {
  Builder b;
  auto x = b.input(f32({32, 48}));
  auto w = b.input(f32({48, 80}));
  auto bias = b.input(f32({80}));
  auto y = b.add(OpCode::DotGeneral, {x, w}, matmulAttrs());
  auto yb = b.add(OpCode::Add, {y, b.add(OpCode::BroadcastInDim, {bias}, bcast({32, 80}, {1}))});
  ir::Graph g = b.done({b.add(OpCode::Relu, {yb})});
  Planned p = plan(g);
  TSR_COMPARE(p.plan.numKernels(), 1);
  TSR_COMPARE(countKind(p.plan, GroupKind::Gemm), 1);
  TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
}

TEST_CASE("noFusionThatWouldCreateACycle") {
  // a = exp(x); d = dot(a, w) (its own kernel, no epilogues here); c = a + d: fusing c into a's loop would
  // make that loop wait for the dot, which waits for the loop.
  Builder b;
  auto x = b.input(f32({16, 16}));
  auto w = b.input(f32({16, 16}));
  auto a = b.add(OpCode::Exp, {x});
  auto d = b.add(OpCode::DotGeneral, {a, w}, matmulAttrs());
  auto c = b.add(OpCode::Add, {a, d});
  ir::Graph g = b.done({c});
  passes::FusionOptions noEpilogues;
  noEpilogues.gemmEpilogues = false;
  Planned p = plan(g, noEpilogues);
  REQUIRE(anyDecision(p, "would depend on its output"));
  TSR_COMPARE(p.plan.numKernels(), 3);
  // With epilogues, c joins the gemm (after the product) and exp stays before it.
  Planned q = plan(g);
  TSR_COMPARE(q.plan.numKernels(), 2);
  TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
}

TEST_CASE("readingAMemberThroughATransposeIsRejected") {
  Builder b;
  auto x = b.input(f32({24, 24}));
  auto e = b.add(OpCode::Exp, {x});
  ir::TransposeAttrs t;
  t.perm = {1, 0};
  auto et = b.add(OpCode::Transpose, {e}, t);
  ir::Graph g = b.done({b.add(OpCode::Add, {e, et})});
  Planned p = plan(g);
  REQUIRE(anyDecision(p, "through a view"));
  TSR_COMPARE(compiledMatches(g), std::string());
}

// Nearest upsampling's pattern (and its gradient's): [4, 3] -> broadcast [4, 3, 2] -> reshape [4, 6] -> transpose
// [6, 4], the graph's output. The reshape is no strided read of the source (each value's copies sit side by
// side), so the transpose cannot be read through the chain: the reshape (an alias of the broadcast, which is
// materialised) and the transpose each become a copy of their own operand.
TEST_CASE("aTransposeOfAReshapedBroadcastIsMaterialisedStepByStep") {
  Builder b;
  auto x = b.input(f32({4, 3}));
  auto e = b.add(OpCode::Exp, {x});
  auto wide = b.add(OpCode::BroadcastInDim, {e}, bcast({4, 3, 2}, {0, 1}));
  ir::ReshapeAttrs r;
  r.shape = {4, 6};
  auto flat = b.add(OpCode::Reshape, {wide}, r);
  ir::TransposeAttrs t;
  t.perm = {1, 0};
  ir::Graph g = b.done({b.add(OpCode::Transpose, {flat}, t)});
  TSR_COMPARE(compiledMatches(g), std::string());
}

TEST_CASE("multiOutputUpdateIsOnePass") {
  // An Adam-like update: m, v and p from one loop (three outputs), with scalars broadcast.
  Builder b;
  Aval a = f32({1000, 37});
  auto p0 = b.input(a), g0 = b.input(a), m0 = b.input(a), v0 = b.input(a);
  auto m1 = b.add(OpCode::Add, {b.add(OpCode::Mul, {m0, b.splat(0.9, a)}), b.add(OpCode::Mul, {g0, b.splat(0.1, a)})});
  auto v1 = b.add(OpCode::Add, {b.add(OpCode::Mul, {v0, b.splat(0.999, a)}),
                                b.add(OpCode::Mul, {b.add(OpCode::Mul, {g0, g0}), b.splat(0.001, a)})});
  auto upd = b.add(OpCode::Div, {m1, b.add(OpCode::Add, {b.add(OpCode::Sqrt, {v1}), b.splat(1e-8, a)})});
  auto p1 = b.add(OpCode::Sub, {p0, b.add(OpCode::Mul, {upd, b.splat(1e-3, a)})});
  ir::Graph g = b.done({p1, m1, v1});
  Planned p = plan(g);
  TSR_COMPARE(p.plan.numKernels(), 1);
  TSR_COMPARE(int(p.plan.groups.back().outputs.size()), 3);
  TSR_COMPARE(compiledMatches(g), std::string());

  // Donation: the outputs are written into the inputs' buffers, with the same results.
  cpu::CompileOptions co;
  co.donatable = {true, false, true, true};
  auto exe = cpu::Executable::compile(g, reg(), p.plan, co);
  REQUIRE(exe.ok());
  TSR_COMPARE((*exe)->memory().donationPairs, 3);
  auto inputs = randomInputs(g, 7);
  auto want = runtime::interpret(g, reg(), inputs);
  REQUIRE(want.ok());
  std::vector<runtime::BufferPtr> copies;
  for (const auto& in : inputs) {
    auto c = runtime::Buffer::allocate(in->size());
    std::memcpy((*c)->data(), in->data(), static_cast<size_t>(in->size()));
    copies.push_back(*c);
  }
  auto got = (*exe)->run(copies, {true, false, true, true});
  REQUIRE(got.ok());
  TSR_COMPARE((*got)[0]->data(), copies[0]->data());  // p updated in place
  TSR_COMPARE((*got)[1]->data(), copies[2]->data());
  TSR_COMPARE((*got)[2]->data(), copies[3]->data());
  for (size_t i = 0; i < 3; ++i) {
    auto x = toDoubles((*want)[i], a), y = toDoubles((*got)[i], a);
    for (size_t j = 0; j < x.size(); ++j)
      REQUIRE(((std::isnan(x[j]) && std::isnan(y[j])) || std::fabs(x[j] - y[j]) <= 1e-6 * (1 + std::fabs(x[j]))));
  }
  // Not donated (the caller keeps its buffers): fresh outputs, inputs untouched.
  auto again = (*exe)->run(inputs, {false, false, false, false});
  REQUIRE(again.ok());
  REQUIRE((*again)[0]->data() != inputs[0]->data());
}

TEST_CASE("plannerNeverOverlapsLiveValues") {
  // A long graph with many intermediates of mixed sizes, each used at different distances.
  Builder b;
  auto x = b.input(f32({128, 64}));
  auto w = b.input(f32({64, 64}));
  std::vector<ir::ValueId> vals{x};
  for (int i = 0; i < 12; ++i) {
    // Scaled so that the layers do not amplify rounding differences (the gain of dot is about 9).
    auto d = b.add(OpCode::Mul, {b.add(OpCode::DotGeneral, {vals.back(), w}, matmulAttrs()), b.splat(1.0 / 16, f32({128, 64}))});
    auto t = b.add(OpCode::Tanh, {d});
    auto s = b.add(OpCode::ReduceSum, {t}, axes({1}));
    auto sb = b.add(OpCode::BroadcastInDim, {s}, bcast({128, 64}, {0}));
    auto mean = b.add(OpCode::Mul, {sb, b.splat(1.0 / 64, f32({128, 64}))});
    vals.push_back(b.add(OpCode::Add, {t, b.add(OpCode::Mul, {mean, vals[vals.size() / 2]})}));
  }
  ir::Graph g = b.done({vals.back(), vals[3]});
  auto p = passes::planFusion(g, reg());
  REQUIRE(p.ok());
  auto exe = cpu::Executable::compile(g, reg(), *p, {});
  REQUIRE(exe.ok());
  TSR_COMPARE((*exe)->memory().findOverlap(), std::string());
  REQUIRE((*exe)->memory().arenaBytes < (*exe)->memory().intermediateBytes);  // reuse happened
  passes::FusionOptions off;
  off.fuse = false;
  TSR_COMPARE(compiledMatches(g, 1e-4, off), std::string());
  TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
}

TEST_CASE("arenaPlacementSeesEveryLifetime") {
  // Unfused, in the traced order: a small value a that lives to the end, b (L bytes) read by c (L), then d
  // (2L) made from c. Walking the kernels, b's block is free when d comes but too small for it, so d goes past
  // c: a + b + c + d = S + 4L. Placed largest first, d and b share, and the arena is the peak: a + c + d.
  Builder b;
  auto x = b.input(f32({64}));
  auto y = b.input(f32({256, 64}));
  auto a = b.add(OpCode::Tanh, {x});
  auto big = b.add(OpCode::Tanh, {y});
  auto c = b.add(OpCode::Tanh, {big});
  auto d = b.add(OpCode::Concatenate, {c, c}, ir::ConcatenateAttrs{0});
  auto sumD = b.add(OpCode::ReduceSum, {d}, axes({0, 1}));
  auto sumA = b.add(OpCode::ReduceSum, {a}, axes({0}));
  ir::Graph g = b.done({b.add(OpCode::Add, {sumD, sumA})});
  passes::FusionOptions off;
  off.fuse = false;
  auto p = passes::planFusion(g, reg(), nullptr, off);
  REQUIRE(p.ok());
  cpu::CompileOptions traced;
  traced.schedule = false;
  auto exe = cpu::Executable::compile(g, reg(), *p, traced);
  REQUIRE(exe.ok());
  const int64_t small = 64 * 4, large = 256 * 64 * 4;
  TSR_COMPARE((*exe)->memory().findOverlap(), std::string());
  TSR_COMPARE((*exe)->memory().arenaBytes, small + large + 2 * large);
  TSR_COMPARE(compiledMatches(g, 1e-5, off), std::string());
}

TEST_CASE("schedulingKeepsFewerValuesAlive") {
  // Traced order: eight products first, then their sums; the memory-aware order interleaves them so one
  // product is alive at a time.
  Builder b;
  auto x = b.input(f32({256, 64}));
  std::vector<ir::ValueId> products, sums;
  for (int i = 0; i < 8; ++i) products.push_back(b.add(OpCode::DotGeneral, {x, b.input(f32({64, 256}))}, matmulAttrs()));
  for (auto p : products) sums.push_back(b.add(OpCode::ReduceSum, {p}, axes({0, 1})));
  ir::Graph g = b.done(sums);
  auto p = passes::planFusion(g, reg());
  REQUIRE(p.ok());
  cpu::CompileOptions traced;
  traced.schedule = false;
  auto a = cpu::Executable::compile(g, reg(), *p, traced);
  auto s = cpu::Executable::compile(g, reg(), *p, {});
  REQUIRE((a.ok() && s.ok()));
  const int64_t product = 256 * 256 * 4;
  REQUIRE((*a)->memory().arenaBytes >= 8 * product);
  REQUIRE((*s)->memory().scheduled);
  TSR_COMPARE((*s)->memory().tracedOrderArenaBytes, (*a)->memory().arenaBytes);
  REQUIRE_MESSAGE((*s)->memory().arenaBytes <= 2 * product, (*s)->memory().arenaBytes);
  TSR_COMPARE(compiledMatches(g, 1e-4), std::string());
}

TEST_CASE("vectorMathIsWithinAFewUlp") {
  std::vector<float> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(static_cast<float>(i) * 0.0047f);
  for (float v : {0.0f, -0.0f, 1e-30f, 88.0f, 89.0f, -104.0f, -200.0f, 1e30f}) x.push_back(v);
  std::vector<float> y(x.size());
  auto ulps = [](float a, float b) {
    if (a == b || (std::isnan(a) && std::isnan(b))) return 0.0;
    return std::fabs(double(a) - double(b)) / std::max(std::fabs(double(b)) * 1.2e-7, 1.5e-45);
  };
  cpu::vmath::exp(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE_MESSAGE(ulps(y[i], std::exp(x[i])) <= 4, x[i]);
  cpu::vmath::tanh(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE_MESSAGE(ulps(y[i], std::tanh(x[i])) <= 6, x[i]);
  for (auto& v : x) v = std::fabs(v);
  cpu::vmath::log(x.data(), y.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) REQUIRE_MESSAGE(ulps(y[i], std::log(x[i])) <= 4, x[i]);
  float special[] = {-1.0f, std::nanf("")};
  float out[2];
  cpu::vmath::log(special, out, 2);
  REQUIRE((std::isnan(out[0]) && std::isnan(out[1])));
}

TEST_CASE("threadPoolCoversEveryIndexOnce") {
  std::vector<std::atomic<int>> hits(10007);
  cpu::ThreadPool::instance().parallelFor(10007, 3, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
  });
  for (auto& h : hits) TSR_COMPARE(h.load(), 1);
}
