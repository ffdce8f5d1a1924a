// customVjp: grad and vjp use the user's fwd and bwd instead of differentiating the function (checked against
// gradients worked out by hand, where they differ from autodiff of the function), eagerly, under jit (where the call
// is inlined away) and under vmap; pytrees of primals and residuals; errors that name the leaf; the IR text form.
#include "tests/check.h"

#include <cmath>

#include "engine/compile/jit.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/passes/pipeline.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/custom_vjp.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Array f64(std::vector<double> v) {
  auto n = static_cast<int64_t>(v.size());
  return Array::fromVector(v, Shape{n}, DType::F64);
}

// The identity whose gradient is clipped to [-1, 1] (JAX's clip_gradient example).
std::function<Tree(const Tree&)> clipGradient() {
  return customVjp([](const Tree& x) { return x; }, [](const Tree& x) { return std::make_pair(x, Tree()); },
                   [](const Tree&, const Tree& g) { return Tree(clamp(g.leaf(), fullLike(g.leaf(), -1.0), fullLike(g.leaf(), 1.0))); });
}

// log(1 + exp(x)), whose autodiff gradient exp(x) / (1 + exp(x)) is nan for large x in f32 (inf / inf); the
// user's bwd writes it as 1 - 1 / (1 + exp(x)), which is 1 there (JAX's log1pexp example).
std::function<Tree(const Tree&)> log1pexp() {
  auto f = [](const Tree& x) { return Tree(log(1.0 + exp(x.leaf()))); };
  return customVjp(f, [f](const Tree& x) { return std::make_pair(f(x), x); },
                   [](const Tree& x, const Tree& g) { return Tree(g.leaf() * (1.0 - 1.0 / (1.0 + exp(x.leaf())))); });
}

// sin with fwd saving cos(x) and bwd returning cos(x) * g (JAX's first custom_vjp example).
std::function<Tree(const Tree&)> customSin() {
  return customVjp([](const Tree& x) { return Tree(sin(x.leaf())); },
                   [](const Tree& x) { return std::make_pair(Tree(sin(x.leaf())), Tree(cos(x.leaf()))); },
                   [](const Tree& c, const Tree& g) { return Tree(c.leaf() * g.leaf()); });
}

Array gradOfSum(const std::function<Tree(const Tree&)>& f, const Array& x, const Array& weights) {
  return grad([&](const Tree& t) { return sum(f(t).leaf() * weights); })(Tree(x)).leaf();
}

}  // namespace

TEST_CASE("gradUsesTheUsersBwd") {
  // clip_gradient: the value is x, the gradient the cotangent clipped.
  Array x = f64({0.5, -2.0, 3.0});
  auto clipped = clipGradient();
  TSR_COMPARE(clipped(Tree(x)).leaf().toDoubles(), x.toDoubles());
  TSR_COMPARE(gradOfSum(clipped, x, f64({0.25, -3.0, 7.0})).toDoubles(), (std::vector<double>{0.25, -1.0, 1.0}));

  // log1pexp at 100 in f32: 1 where autodiff of the function gives nan.
  Array big = Array::fromVector({0.0, 100.0}, Shape{2}, DType::F32);
  auto plain = [](const Tree& t) { return sum(log(1.0 + exp(t.leaf()))); };
  std::vector<double> autodiff = grad(plain)(Tree(big)).leaf().toDoubles();
  REQUIRE(std::isnan(autodiff[1]));
  std::vector<double> custom = gradOfSum(log1pexp(), big, Array::full(Shape{2}, 1.0)).toDoubles();
  TSR_COMPARE(custom, (std::vector<double>{0.5, 1.0}));

  // sin: the user's cos(x) * g, and grad of grad differentiates the bwd (-sin).
  auto s = customSin();
  Array at = f64({0.3, 1.2});
  EXPECT_CLOSE(gradOfSum(s, at, Array::full(Shape{2}, 1.0, DType::F64)), cos(at), 1e-15);
  ScalarFn d = gradOf([&](const Array& v) { return sum(s(Tree(v)).leaf()); });
  EXPECT_CLOSE(gradOf([&](const Array& v) { return sum(d(v)); })(at), -sin(at), 1e-15);
}

TEST_CASE("fwdMayCallTheFunctionItself") {
  // As in JAX's examples, fwd computes the output by calling the decorated function.
  std::function<Tree(const Tree&)> square;
  square = customVjp([](const Tree& x) { return Tree(x.leaf() * x.leaf()); },
                     [&](const Tree& x) { return std::make_pair(square(x), x); },
                     [](const Tree& x, const Tree& g) { return Tree(g.leaf() * x.leaf() * 3.0); });  // not 2x: seen
  Array x = f64({1.5, -2.0});
  TSR_COMPARE(square(Tree(x)).leaf().toDoubles(), (std::vector<double>{2.25, 4.0}));
  TSR_COMPARE(gradOfSum(square, x, Array::full(Shape{2}, 1.0, DType::F64)).toDoubles(),
              (std::vector<double>{4.5, -6.0}));
}

TEST_CASE("pytreesOfPrimalsAndResiduals") {
  // f({a, b}) = {"p": a * b, "s": a + b}; bwd is autodiff's written by hand, scaled by 10 so that it is seen.
  auto f = [](const Tree& t) {
    Array a = t.find("a")->leaf(), b = t.find("b")->leaf();
    return Tree::dict({{"p", Tree(a * b)}, {"s", Tree(a + b)}});
  };
  auto fwd = [f](const Tree& t) { return std::make_pair(f(t), Tree::list({*t.find("a"), *t.find("b")})); };
  auto bwd = [](const Tree& res, const Tree& g) {
    Array a = res.child(0).leaf(), b = res.child(1).leaf();
    Array gp = g.find("p")->leaf(), gs = g.find("s")->leaf();
    return Tree::dict({{"a", Tree((gp * b + gs) * 10.0)}, {"b", Tree((gp * a + gs) * 10.0)}});
  };
  auto h = customVjp(f, fwd, bwd);
  Tree x = Tree::dict({{"a", Tree(f64({2.0}))}, {"b", Tree(f64({5.0}))}});
  Tree g = grad([&](const Tree& t) {
    Tree y = h(t);
    return sum(y.find("p")->leaf() * 3.0 + y.find("s")->leaf());
  })(x);
  TSR_COMPARE(g.find("a")->leaf().item(), (3.0 * 5.0 + 1.0) * 10.0);
  TSR_COMPARE(g.find("b")->leaf().item(), (3.0 * 2.0 + 1.0) * 10.0);
  // An empty Array in bwd's result is a zero cotangent.
  auto onlyA = customVjp(f, fwd, [&](const Tree& res, const Tree& ct) {
    Tree full = bwd(res, ct);
    return Tree::dict({{"a", *full.find("a")}, {"b", Tree(Array())}});
  });
  Tree g2 = grad([&](const Tree& t) { return sum(onlyA(t).find("p")->leaf()); })(x);
  TSR_COMPARE(g2.find("b")->leaf().item(), 0.0);
}

TEST_CASE("valuesTheFunctionClosesOverGetNoCotangent") {
  Array scale = f64({3.0});
  auto f = customVjp([&](const Tree& x) { return Tree(x.leaf() * scale); },
                     [&](const Tree& x) { return std::make_pair(Tree(x.leaf() * scale), Tree()); },
                     [&](const Tree&, const Tree& g) { return Tree(g.leaf() * scale * 2.0); });
  auto loss = [&](const Tree& t) { return sum(f(t).leaf()); };
  TSR_COMPARE(grad(loss)(Tree(f64({1.0}))).leaf().item(), 6.0);
  Jit j = jit([&](const Tree& t, const StaticArgs&) { return grad(loss)(t); }, "closed_over");
  auto r = j.call(Tree(f64({1.0})));
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE(r->leaf().item(), 6.0);
}

TEST_CASE("vmapOfCustomVjp") {
  Array xs = Array::fromVector({0.5, -2.0, 3.0, 0.25, 1.5, -0.75}, Shape{3, 2}, DType::F64);
  auto clipped = clipGradient();
  ArrayFn perExampleGrad = [&](const std::vector<Array>& a) {
    // Example k's weights are k-dependent through a[0], so each row clips differently.
    return std::vector<Array>{gradOfSum(clipped, a[0], a[0] * 2.0)};
  };
  std::vector<Array> got = vmap(perExampleGrad)({xs});
  std::vector<double> want;
  for (double v : xs.toDoubles()) want.push_back(std::clamp(v * 2.0, -1.0, 1.0));
  TSR_COMPARE(got[0].toDoubles(), want);
  // grad of a sum over vmap: the batched bwd, with an unbatched weight summed back over the examples.
  Array w = f64({4.0, -0.5});
  Array g = grad([&](const Tree& t) {
              ArrayFn batched = vmap([&](const std::vector<Array>& a) {
                return std::vector<Array>{clipped(Tree(a[0])).leaf() * a[1]};
              }, {0, -1});
              return sum(batched({xs, t.leaf()})[0]);
            })(Tree(w)).leaf();
  // d/dw of sum_k clip_identity(x_k) * w: the primal x_k is what multiplies w (clipping acts on x's cotangent).
  std::vector<double> colSums = {0.5 + 3.0 + 1.5, -2.0 + 0.25 - 0.75};
  TSR_COMPARE(g.toDoubles(), colSums);
}

TEST_CASE("jitOfGradOfCustomVjpInlinesTheCall") {
  Array x = Array::fromVector({0.0, 100.0}, Shape{2}, DType::F32);
  auto lse = log1pexp();
  auto loss = [&](const Tree& t) { return sum(lse(t).leaf()); };
  Jit j = jit([&](const Tree& t, const StaticArgs&) { return Tree::list({Tree(loss(t)), grad(loss)(t)}); }, "lse");
  auto r = j.call(Tree(x));
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE(r->child(1).leaf().toDoubles(), (std::vector<double>{0.5, 1.0}));
  // Where exp does not overflow, the value too: log(2) + log(1 + e^10).
  r = j.call(Tree(Array::fromVector({0.0, 10.0}, Shape{2}, DType::F32)));
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  EXPECT_CLOSE(r->child(0).leaf(), Array::scalar(std::log(2.0) + std::log1p(std::exp(10.0)), DType::F32), 1e-6);
  EXPECT_CLOSE(r->child(1).leaf(), Array::fromVector({0.5, 1.0 / (1.0 + std::exp(-10.0))}, Shape{2}, DType::F32), 1e-6);
  // Traced, the forward pass holds one custom_vjp_call; the compile pipeline inlines it.
  auto lowered = j.lower(Tree(x).map([](const Array& a) { return a.aval(); }));
  REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
  TSR_COMPARE(lowered->graph.count(ir::OpCode::CustomVjpCall), 2);  // the value, and grad's forward replay
  ir::Graph g = lowered->graph;
  passes::PassContext ctx(ops::registry());
  auto report = passes::compilerPipeline().run(g, ctx);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  TSR_COMPARE(g.count(ir::OpCode::CustomVjpCall), 0);
}

TEST_CASE("customVjpErrorsNameTheLeaf") {
  auto f = [](const Tree& t) { return Tree(t.find("w")->leaf() * 2.0); };
  auto fwd = [f](const Tree& t) { return std::make_pair(f(t), Tree()); };
  auto wrongShape = customVjp(f, fwd, [](const Tree&, const Tree& g) {
    return Tree::dict({{"w", Tree(concatenate({g.leaf(), g.leaf()}, 0))}});
  });
  Tree x = Tree::dict({{"w", Tree(f64({1.0, 2.0}))}});
  std::string e = errorOf([&] { wrongShape(x); });
  REQUIRE_MESSAGE(e.find("custom_vjp: bwd returns a cotangent f64[4] for primal 'w', which is f64[2]") !=
                      std::string::npos,
                  e.c_str());
  auto wrongTree = customVjp(f, fwd, [](const Tree&, const Tree& g) { return g; });
  e = errorOf([&] { wrongTree(x); });
  REQUIRE_MESSAGE(e.find("custom_vjp: bwd returns cotangents of structure") != std::string::npos, e.c_str());
  auto wrongFwd = customVjp(f, [](const Tree& t) { return std::make_pair(t, Tree()); },
                            [](const Tree&, const Tree& g) { return g; });
  e = errorOf([&] { wrongFwd(x); });
  REQUIRE_MESSAGE(e.find("custom_vjp: fwd returns outputs of structure") != std::string::npos, e.c_str());
}

TEST_CASE("customVjpIrTextRoundTripsAndVerifies") {
  const auto& reg = ops::registry();
  auto traced = makeGraph(
      [](const std::vector<Array>& a) { return std::vector<Array>{customSin()(Tree(a[0])).leaf()}; },
      {Aval{Shape{3}, DType::F32}});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  REQUIRE(ir::verify(traced->graph, reg).ok());
  std::string text = ir::print(traced->graph, reg);
  REQUIRE_MESSAGE(text.find("= custom_vjp_call(%0) {num_primals=1, primal={\n    func @primal(") != std::string::npos,
                  text.c_str());
  REQUIRE_MESSAGE(text.find("bwd={\n    func @bwd(%0: f32[3], %1: f32[3], %2: f32[3]) -> (f32[3])") !=
                      std::string::npos,
                  text.c_str());
  auto parsed = ir::parse(text, reg);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  TSR_COMPARE(ir::print(*parsed, reg), text);
}
