// remat (jax.checkpoint): values and gradients equal those of the function without remat (and finite
// differences); the compiled gradient recomputes the body behind an optimization_barrier that CSE cannot merge
// away (counted in the optimised graph); dots_saveable keeps the matmuls instead of recomputing them; a deep
// chain of blocks needs a smaller arena with remat; vmap of remat against a loop; a trainer step with
// [train] remat gives the same loss and parameters as one without.
#include "tests/check.h"

#include <cmath>
#include <map>

#include "engine/compile/compile.h"
#include "engine/compile/jit.h"
#include "engine/ir/graph.h"
#include "engine/nn/layers.h"
#include "engine/ops/registry.h"
#include "engine/passes/pipeline.h"
#include "engine/random/random.h"
#include "engine/runtime/executable.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/remat.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Array randn(uint64_t seed, Shape shape, DType dtype = DType::F64) {
  return astype(random::normal(random::key(seed), std::move(shape)), dtype);
}

// One block: x + tanh(x @ w1) @ w2, the weights closed over.
Array block(const Array& x, const Array& w1, const Array& w2) {
  return x + dotGeneral(tanh(dotGeneral(x, w1, {{1}, {0}, {}, {}})), w2, {{1}, {0}, {}, {}});
}

// `layers` blocks in a chain, each under `policy`, and a scalar loss.
Array chainLoss(const Tree& p, const Array& x, int layers, RematPolicy policy) {
  Array h = x;
  for (int i = 0; i < layers; ++i) {
    const Array w1 = p.find("w1")->child(static_cast<size_t>(i)).leaf();
    const Array w2 = p.find("w2")->child(static_cast<size_t>(i)).leaf();
    h = rematCall([&](const std::vector<Array>& in) { return std::vector<Array>{block(in[0], w1, w2)}; }, {h},
                  policy)[0];
  }
  return sum(h * h);
}

Tree chainParams(int layers, int64_t width, int64_t hidden, DType dtype) {
  Tree w1 = Tree::list(), w2 = Tree::list();
  for (int i = 0; i < layers; ++i) {
    w1.push(Tree(randn(10 + static_cast<uint64_t>(i), Shape{width, hidden}, dtype) * (1.0 / std::sqrt(double(width)))));
    w2.push(Tree(randn(50 + static_cast<uint64_t>(i), Shape{hidden, width}, dtype) * (1.0 / std::sqrt(double(hidden)))));
  }
  return Tree::dict({{"w1", w1}, {"w2", w2}});
}

// The optimised graph of grad(chainLoss) for these avals.
// The gradient of the chain after the standard pipeline; with recompute = false, its cleanup alone (the
// recompute pass also shrinks what the backward pass keeps, which would blur what the policies do).
ir::Graph optimisedGradGraph(int layers, RematPolicy policy, int64_t batch, int64_t width, int64_t hidden,
                             bool recompute = true) {
  Tree params = chainParams(layers, width, hidden, DType::F32);
  Array x = randn(1, Shape{batch, width}, DType::F32);
  auto traced = makeGraph(
      [&](const Tree& args) {
        return grad([&](const Tree& p) { return chainLoss(p, args.find("x")->leaf(), layers, policy); })(
            *args.find("p"));
      },
      Tree::dict({{"p", params}, {"x", Tree(x)}}).mapWithPath([](const std::string&, const Array& a) { return a.aval(); }),
      "grad_chain");
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  ir::Graph g = traced->graph;
  if (recompute) {
    auto st = compile::optimize(g);
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    return g;
  }
  passes::PassManager pm = passes::cleanupPipeline();
  passes::PassContext ctx(ops::registry());
  auto report = pm.run(g, ctx);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  return g;
}

void compareClose(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

}  // namespace

TEST_CASE("rematComputesTheFunction") {
  Array x = randn(1, Shape{4, 3}), w1 = randn(2, Shape{3, 5}), w2 = randn(3, Shape{5, 3});
  Array plain = block(x, w1, w2);
  for (RematPolicy policy : {RematPolicy::NothingSaveable, RematPolicy::DotsSaveable}) {
    CAPTURE(rematPolicyName(policy));
    auto f = remat([&](const Tree& t) { return Tree(block(t.leaf(), w1, w2)); }, policy);
    compareClose(f(Tree(x)).leaf().toDoubles(), plain.toDoubles(), 1e-12);
    // Under jit the call is inlined: the same values.
    Jit jitted([&](const Tree& args, const StaticArgs&) { return f(args); }, "remat");
    auto out = jitted.call(Tree(x));
    REQUIRE_MESSAGE(out.ok(), out.error().message);
    compareClose(out->leaf().toDoubles(), plain.toDoubles(), 1e-12);
  }
}

TEST_CASE("rematGradientsEqualThoseWithoutRemat") {
  Tree params = chainParams(3, 3, 5, DType::F64);
  Array x = randn(7, Shape{4, 3});
  auto gradsOf = [&](RematPolicy policy) {
    return grad([&](const Tree& p) { return chainLoss(p, x, 3, policy); })(params);
  };
  Tree plain = gradsOf(RematPolicy::None);
  for (RematPolicy policy : {RematPolicy::NothingSaveable, RematPolicy::DotsSaveable}) {
    CAPTURE(rematPolicyName(policy));
    Tree g = gradsOf(policy);
    for (const char* w : {"w1", "w2"})
      for (size_t i = 0; i < 3; ++i)
        compareClose(g.find(w)->child(i).leaf().toDoubles(), plain.find(w)->child(i).leaf().toDoubles(), 1e-10);
  }
  // And against central differences of the loss for a few weights (an independent reference).
  Tree g = gradsOf(RematPolicy::NothingSaveable);
  const double eps = 1e-6;
  for (int64_t e : {0, 7, 14}) {
    auto lossWith = [&](double delta) {
      std::vector<double> w = params.find("w1")->child(1).leaf().toDoubles();
      w[static_cast<size_t>(e)] += delta;
      Tree q = params;
      Tree w1 = Tree::list();
      for (size_t i = 0; i < 3; ++i)
        w1.push(i == 1 ? Tree(Array::fromVector(w, Shape{3, 5}, DType::F64)) : params.find("w1")->child(i));
      q = Tree::dict({{"w1", w1}, {"w2", *params.find("w2")}});
      return chainLoss(q, x, 3, RematPolicy::None).item();
    };
    const double fd = (lossWith(eps) - lossWith(-eps)) / (2 * eps);
    CHECK(std::abs(g.find("w1")->child(1).leaf().toDoubles()[static_cast<size_t>(e)] - fd) < 1e-6 * (1 + std::abs(fd)));
  }
}

TEST_CASE("nestedRematAndGradOfGrad") {
  Array x = randn(3, Shape{5});
  // f(x) = sum(sin(remat(remat(tanh)) (x))^2); grad of grad along a direction, with and without remat.
  auto inner = [](const Tree& t) { return Tree(tanh(t.leaf()) * t.leaf()); };
  auto outer = remat([&](const Tree& t) { return remat(inner)(Tree(sin(t.leaf()))); });
  auto loss = [&](const Array& v, bool useRemat) {
    Array y = useRemat ? outer(Tree(v)).leaf() : inner(Tree(sin(v))).leaf();
    return sum(y * y);
  };
  for (bool useRemat : {false, true}) {
    Array g1 = grad([&](const Tree& t) { return loss(t.leaf(), useRemat); })(Tree(x)).leaf();
    Array g2 = grad([&](const Tree& t) {
                 return sum(grad([&](const Tree& u) { return loss(u.leaf(), useRemat); })(t).leaf());
               })(Tree(x)).leaf();
    static std::vector<double> first, second;
    if (!useRemat) {
      first = g1.toDoubles();
      second = g2.toDoubles();
    } else {
      compareClose(g1.toDoubles(), first, 1e-12);
      compareClose(g2.toDoubles(), second, 1e-12);
    }
  }
}

TEST_CASE("compiledGradientRecomputesBehindABarrier") {
  const int layers = 4;
  ir::Graph plain = optimisedGradGraph(layers, RematPolicy::None, 8, 16, 32);
  ir::Graph nothing = optimisedGradGraph(layers, RematPolicy::NothingSaveable, 8, 16, 32);
  ir::Graph dots = optimisedGradGraph(layers, RematPolicy::DotsSaveable, 8, 16, 32);
  // Without remat each block's tanh runs once; with it, once more in the backward pass (CSE did not merge the
  // recomputation into the forward pass), behind one barrier per block.
  CHECK(plain.count(ir::OpCode::Tanh) == layers);
  CHECK(plain.count(ir::OpCode::OptimizationBarrier) == 0);
  CHECK(nothing.count(ir::OpCode::Tanh) == 2 * layers);
  CHECK(nothing.count(ir::OpCode::OptimizationBarrier) == layers);
  CHECK(nothing.count(ir::OpCode::RematCall) == 0);
  // Matmuls: 2 forward + 4 backward per block, less the first block's input gradient (x is no parameter);
  // nothing_saveable recomputes the first of each block (the second's result is the block's output, which the
  // backward pass has), dots_saveable recomputes none.
  CHECK(plain.count(ir::OpCode::DotGeneral) == 6 * layers - 1);
  CHECK(nothing.count(ir::OpCode::DotGeneral) == 7 * layers - 1);
  CHECK(dots.count(ir::OpCode::DotGeneral) == 6 * layers - 1);
  CHECK(dots.count(ir::OpCode::Tanh) == 2 * layers);
}

TEST_CASE("rematShrinksTheArenaOfADeepChain") {
  // 16 blocks whose hidden activations ([64, 1024] f32, 256 KiB each) dominate: without remat every block's
  // are alive from its forward to its backward pass; with it only the block inputs ([64, 64]) are.
  // The policies compared without the recompute pass, which copies cheap values into the backward pass's
  // kernels itself: measured on its own below.
  const int layers = 16;
  auto arenaOf = [&](RematPolicy policy, bool recompute) {
    ir::Graph g = optimisedGradGraph(layers, policy, 64, 64, 1024, recompute);
    compile::Options o;
    o.name = "grad_chain";
    o.native = false;
    auto exe = compile::compileForDevice(g, o);
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    const std::string label = std::string(rematPolicyName(policy)) + (recompute ? " (with recompute)" : "");
    MESSAGE(label << ": arena " << (*exe)->arenaBytes() / 1024 << " KiB");
    return (*exe)->arenaBytes();
  };
  std::map<RematPolicy, int64_t> arena;
  for (RematPolicy policy : {RematPolicy::None, RematPolicy::NothingSaveable, RematPolicy::DotsSaveable})
    arena[policy] = arenaOf(policy, false);
  CHECK(arena[RematPolicy::NothingSaveable] * 3 < arena[RematPolicy::None]);
  // Keeping the x @ w1 results keeps one [64, 1024] per block: more than nothing, less than everything.
  CHECK(arena[RematPolicy::DotsSaveable] < arena[RematPolicy::None]);
  CHECK(arena[RematPolicy::DotsSaveable] > arena[RematPolicy::NothingSaveable]);
  // Without remat, the recompute pass alone shrinks the arena by a third or more (8704 -> 4864 KiB seen): the
  // backward kernels recompute cheap values instead of keeping them, and what they read instead was kept anyway.
  CHECK(arenaOf(RematPolicy::None, true) * 3 < arena[RematPolicy::None] * 2);
}

TEST_CASE("vmapOfRematIsALoop") {
  Array w1 = randn(2, Shape{3, 5}), w2 = randn(3, Shape{5, 3});
  Array xs = randn(4, Shape{6, 2, 3});
  auto f = remat([&](const Tree& t) { return Tree(block(t.leaf(), w1, w2)); }, RematPolicy::DotsSaveable);
  auto batched = vmap([&](const std::vector<Array>& in) { return std::vector<Array>{f(Tree(in[0])).leaf()}; });
  std::vector<double> got = batched({xs})[0].toDoubles();
  std::vector<double> want;
  for (int64_t i = 0; i < 6; ++i) {
    std::vector<double> one = block(reshape(sliceAxis(xs, 0, i, i + 1), {2, 3}), w1, w2).toDoubles();
    want.insert(want.end(), one.begin(), one.end());
  }
  compareClose(got, want, 1e-12);
  // The gradient of the batched function as well.
  Array g = grad([&](const Tree& t) { return sum(batched({t.leaf()})[0] * batched({t.leaf()})[0]); })(Tree(xs)).leaf();
  Array gPlain = grad([&](const Tree& t) {
                   Array y = reshape(block(reshape(t.leaf(), {12, 3}), w1, w2), {6, 2, 3});
                   return sum(y * y);
                 })(Tree(xs)).leaf();
  compareClose(g.toDoubles(), gPlain.toDoubles(), 1e-10);
}

TEST_CASE("rematErrorsNameTheFunction") {
  Array x = randn(1, Shape{3});
  auto bad = remat([](const Tree& t) { return Tree(dotGeneral(t.leaf(), t.leaf(), {{0}, {1}, {}, {}})); });
  auto r = capture([&] { return bad(Tree(x)).leaf(); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("under remat") != std::string::npos);
  CHECK(!parseRematPolicy("sometimes").ok());
  CHECK(parseRematPolicy("sometimes").error().message.find("dots_saveable") != std::string::npos);
}

TEST_CASE("applyBlockFollowsTheContextPolicy") {
  Array x = randn(1, Shape{4, 3}), w1 = randn(2, Shape{3, 5}), w2 = randn(3, Shape{5, 3});
  for (RematPolicy policy : {RematPolicy::None, RematPolicy::NothingSaveable}) {
    auto traced = makeGraph(
        [&](const std::vector<Array>& in) {
          nn::Context ctx;
          ctx.setRemat(policy);
          return std::vector<Array>{nn::applyBlock(ctx, in[0], [&](const Array& h) { return block(h, w1, w2); })};
        },
        std::vector<Aval>{x.aval()}, "block");
    REQUIRE(traced.ok());
    CHECK(traced->graph.count(ir::OpCode::RematCall) == (policy == RematPolicy::None ? 0 : 1));
  }
}
