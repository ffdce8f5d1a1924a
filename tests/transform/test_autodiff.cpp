// Autodiff through the user-facing API: the gradient of a small MLP loss against backpropagation written out
// with loops in this file; trees of parameters and aux outputs keep their paths; second derivatives; jit of
// grad; non-differentiable ops in the path give zero cotangents; errors come back as values.
#include "tests/check.h"

#include <cmath>
#include <iomanip>
#include <numbers>
#include <random>

#include <fmt/format.h>

#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"

using namespace tsr;

namespace {

// ---- A two-layer MLP and its gradient by hand ------------------------------------------------------------------

constexpr int64_t kN = 5, kIn = 3, kHidden = 4, kOut = 2;

struct Mat {
  int64_t rows, cols;
  std::vector<double> v;
  double& operator()(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double operator()(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

Mat randomMat(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  Mat m{rows, cols, std::vector<double>(static_cast<size_t>(rows * cols))};
  for (auto& x : m.v) x = d(rng);
  return m;
}

Array toArray(const Mat& m, bool vector = false) {
  return Array::fromVector(m.v, vector ? Shape{m.cols} : Shape{m.rows, m.cols}, DType::F64);
}

// params = {layers: [{kernel: [3,4], bias: [4]}, {kernel: [4,2], bias: [2]}]}
Tree mlpParams(const Mat& w1, const Mat& b1, const Mat& w2, const Mat& b2) {
  auto layer = [](const Mat& w, const Mat& b) {
    return Tree::dict({{"kernel", Tree(toArray(w))}, {"bias", Tree(toArray(b, true))}});
  };
  return Tree::dict({{"layers", Tree::list({layer(w1, b1), layer(w2, b2)})}});
}

const Array& param(const Tree& t, const std::string& path) {
  const Tree* node = t.findPath(path);
  if (!node || !node->isLeaf()) raise(makeError("no leaf at path '{}'", path));
  return node->leaf();
}

// x: [N, In], y: [N, Out]. out = tanh(x @ W1 + b1) @ W2 + b2; loss = mean((out - y)^2).
Array mlpForward(const Tree& p, const Array& x) {
  Array h = tanh(matmul(x, param(p, "layers.0.kernel")) + param(p, "layers.0.bias"));
  return matmul(h, param(p, "layers.1.kernel")) + param(p, "layers.1.bias");
}
Array mlpLoss(const Tree& p, const Array& x, const Array& y) { return mean(square(mlpForward(p, x) - y)); }

struct MlpGrads {
  Mat w1, b1, w2, b2;
  double loss = 0;
};

// Backpropagation written out (shapes in the comments), independent of the engine.
MlpGrads handGradients(const Mat& x, const Mat& y, const Mat& w1, const Mat& b1, const Mat& w2, const Mat& b2) {
  Mat h{kN, kHidden, std::vector<double>(kN * kHidden)};  // h = tanh(x W1 + b1): [N, H]
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < kHidden; ++j) {
      double z = b1(0, j);
      for (int64_t i = 0; i < kIn; ++i) z += x(n, i) * w1(i, j);
      h(n, j) = std::tanh(z);
    }
  MlpGrads g{{kIn, kHidden, std::vector<double>(kIn * kHidden)}, {1, kHidden, std::vector<double>(kHidden)},
             {kHidden, kOut, std::vector<double>(kHidden * kOut)}, {1, kOut, std::vector<double>(kOut)}};
  Mat dOut{kN, kOut, std::vector<double>(kN * kOut)};  // dL/dout = 2 (out - y) / (N * Out): [N, Out]
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t k = 0; k < kOut; ++k) {
      double o = b2(0, k);
      for (int64_t j = 0; j < kHidden; ++j) o += h(n, j) * w2(j, k);
      g.loss += (o - y(n, k)) * (o - y(n, k)) / (kN * kOut);
      dOut(n, k) = 2 * (o - y(n, k)) / (kN * kOut);
    }
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t k = 0; k < kOut; ++k) {
      g.b2(0, k) += dOut(n, k);
      for (int64_t j = 0; j < kHidden; ++j) g.w2(j, k) += h(n, j) * dOut(n, k);
    }
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < kHidden; ++j) {
      double dh = 0;  // dL/dh: [N, H]
      for (int64_t k = 0; k < kOut; ++k) dh += dOut(n, k) * w2(j, k);
      double dz = dh * (1 - h(n, j) * h(n, j));  // through tanh
      g.b1(0, j) += dz;
      for (int64_t i = 0; i < kIn; ++i) g.w1(i, j) += x(n, i) * dz;
    }
  return g;
}

std::string compareValues(const Array& got, const std::vector<double>& want, double tol = 1e-12) {
  auto g = got.toDoubles();
  if (g.size() != want.size()) return fmt::format("{} values, expected {}", g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - want[i]) <= tol * (1 + std::fabs(want[i]))))
      return fmt::format("element {}: got {:.15g}, expected {:.15g}", i, g[i], want[i]);
  return "";
}

struct MlpFixture {
  Mat x, y, w1, b1, w2, b2;
  Tree params;
  Array xa, ya;
  MlpFixture() {
    std::mt19937 rng(11);
    x = randomMat(kN, kIn, rng);
    y = randomMat(kN, kOut, rng);
    w1 = randomMat(kIn, kHidden, rng);
    b1 = randomMat(1, kHidden, rng);
    w2 = randomMat(kHidden, kOut, rng);
    b2 = randomMat(1, kOut, rng);
    params = mlpParams(w1, b1, w2, b2);
    xa = toArray(x);
    ya = toArray(y);
  }
};

// Checks a gradient tree against the hand-derived gradients, path by path.
std::string checkMlpGrads(const Tree& grads, const MlpGrads& want) {
  const std::pair<const char*, const Mat*> expected[] = {{"layers.0.kernel", &want.w1},
                                                          {"layers.0.bias", &want.b1},
                                                          {"layers.1.kernel", &want.w2},
                                                          {"layers.1.bias", &want.b2}};
  for (const auto& [path, mat] : expected) {
    const Tree* node = grads.findPath(path);
    if (!node || !node->isLeaf()) return fmt::format("no gradient at '{}'", path);
    std::string d = compareValues(node->leaf(), mat->v);
    if (!d.empty()) return fmt::format("{}: {}", path, d);
  }
  return "";
}

std::string err(const Error& e) { return e.message; }

}  // namespace

TEST_CASE("mlpGradientMatchesHandBackprop") {
  MlpFixture f;
  MlpGrads want = handGradients(f.x, f.y, f.w1, f.b1, f.w2, f.b2);
  auto vg = capture([&] {
    return valueAndGrad([&](const Tree& p) { return mlpLoss(p, f.xa, f.ya); })(f.params);
  });
  REQUIRE_MESSAGE(vg.ok(), vg.error().message);
  REQUIRE(std::fabs(vg->value.item() - want.loss) <= 1e-12 * (1 + want.loss));
  std::string d = checkMlpGrads(vg->grads, want);
  REQUIRE_MESSAGE(d.empty(), d.c_str());
}

// The gradient tree has the parameter tree's structure and paths, leaf avals included.
TEST_CASE("gradientTreeKeepsPaths") {
  MlpFixture f;
  auto g = capture([&] { return grad([&](const Tree& p) { return mlpLoss(p, f.xa, f.ya); })(f.params); });
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  TSR_COMPARE(g->def(), f.params.def());
  std::vector<std::string> want = {"layers.0.kernel", "layers.0.bias", "layers.1.kernel", "layers.1.bias"};
  TSR_COMPARE(g->paths(), want);
  auto gl = g->leaves(), pl = f.params.leaves();
  for (size_t i = 0; i < gl.size(); ++i) TSR_COMPARE(gl[i].aval(), pl[i].aval());
}

TEST_CASE("valueAndGradWithAuxReturnsTheAuxTree") {
  MlpFixture f;
  MlpGrads want = handGradients(f.x, f.y, f.w1, f.b1, f.w2, f.b2);
  auto vg = capture([&] {
    return valueAndGradWithAux([&](const Tree& p) {
      Array out = mlpForward(p, f.xa);
      Array loss = mean(square(out - f.ya));
      Tree aux = Tree::dict({{"pred", Tree(out)}, {"stats", Tree::list({Tree(sum(out)), Tree(max(out))})}});
      return std::make_pair(loss, aux);
    })(f.params);
  });
  REQUIRE_MESSAGE(vg.ok(), vg.error().message);
  std::vector<std::string> paths = {"pred", "stats.0", "stats.1"};
  TSR_COMPARE(vg->aux.paths(), paths);
  Array pred = mlpForward(f.params, f.xa);
  REQUIRE(vg->aux.findPath("pred")->leaf().isConcrete());
  std::string d = compareValues(vg->aux.findPath("pred")->leaf(), pred.toDoubles());
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  d = compareValues(vg->aux.findPath("stats.0")->leaf(), {sum(pred).item()});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  d = compareValues(vg->aux.findPath("stats.1")->leaf(), {max(pred).item()});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  REQUIRE(std::fabs(vg->value.item() - want.loss) <= 1e-12);
  d = checkMlpGrads(vg->grads, want);
  REQUIRE_MESSAGE(d.empty(), d.c_str());
}

// grad(grad(f)) against second derivatives worked out by hand, and a third derivative.
TEST_CASE("secondDerivatives") {
  const char* const rows[] = {
      "x^3 + sin x -> 6x - sin x",
      "x exp(x) -> (x + 2) exp(x)",
      "tanh x -> -2 tanh x (1 - tanh^2 x)",
      "log(1 + x^2) -> 2 (1 - x^2) / (1 + x^2)^2",
      "sqrt(x) / x via rsqrt -> 3/4 x^-5/2",
  };
  for (int which = 0; which < static_cast<int>(std::size(rows)); ++which) {
    SUBCASE(rows[which]) {
      const ScalarFn fs[] = {
          [](const Array& x) { return x * x * x + sin(x); },
          [](const Array& x) { return x * exp(x); },
          [](const Array& x) { return tanh(x); },
          [](const Array& x) { return log(1.0 + x * x); },
          [](const Array& x) { return rsqrt(x); },
      };
      const std::function<double(double)> second[] = {
          [](double x) { return 6 * x - std::sin(x); },
          [](double x) { return (x + 2) * std::exp(x); },
          [](double x) { double t = std::tanh(x); return -2 * t * (1 - t * t); },
          [](double x) { return 2 * (1 - x * x) / ((1 + x * x) * (1 + x * x)); },
          [](double x) { return 0.75 * std::pow(x, -2.5); },
      };
      ScalarFn d2 = gradOf(gradOf(fs[which]));
      for (double x : {0.3, 0.9, 1.7, 2.5}) {
        auto got = capture([&] { return d2(Array::scalar(x, DType::F64)).item(); });
        REQUIRE_MESSAGE(got.ok(), got.error().message);
        double want = second[which](x);
        REQUIRE_MESSAGE(std::fabs(*got - want) <= 1e-10 * (1 + std::fabs(want)),
                        "x = " << x << ": grad(grad(f)) " << std::setprecision(15) << *got << ", expected "
                               << std::setprecision(15) << want);
      }
    }
  }
}

TEST_CASE("thirdDerivative") {
  ScalarFn d3 = gradOf(gradOf(gradOf([](const Array& x) { return x * x * x * x + cos(x); })));
  for (double x : {-1.0, 0.5, 2.0}) {
    auto got = capture([&] { return d3(Array::scalar(x, DType::F64)).item(); });
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    double want = 24 * x + std::sin(x);
    REQUIRE_MESSAGE(std::fabs(*got - want) <= 1e-10 * (1 + std::fabs(want)),
                    "x = " << x << ": " << *got << ", expected " << want);
  }
}

// Gradients of functions of vectors, and a Hessian-vector-like composition: grad of (grad f . v).
TEST_CASE("gradOfGradOnVectors") {
  Array x = Array::fromVector(std::vector<double>{0.2, -0.7, 1.1}, Shape{3}, DType::F64);
  ScalarFn f = [](const Array& a) { return sum(a * a * a) + sum(a) * sum(a); };  // f = sum x^3 + (sum x)^2
  ScalarFn g = gradOf(f);                                                          // 3 x^2 + 2 sum x
  ScalarFn h = gradOf([g](const Array& a) { return sum(g(a)); });                  // 6 x + 2 * 3
  auto got = capture([&] { return h(x).toDoubles(); });
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  const double want[] = {6 * 0.2 + 6, 6 * -0.7 + 6, 6 * 1.1 + 6};
  for (size_t i = 0; i < 3; ++i) REQUIRE_MESSAGE(std::fabs((*got)[i] - want[i]) < 1e-12, (*got)[i]);
}

TEST_CASE("jitOfGradEqualsGrad") {
  MlpFixture f;
  auto lossGrad = grad([&](const Tree& p) { return mlpLoss(p, f.xa, f.ya); });
  Jit jitted = jit([lossGrad](const Tree& p, const StaticArgs&) { return lossGrad(p); }, "grad_mlp");
  auto viaJit = jitted.call(f.params);
  REQUIRE_MESSAGE(viaJit.ok(), viaJit.error().message);
  TSR_COMPARE(viaJit->paths(), f.params.paths());
  auto eager = capture([&] { return lossGrad(f.params); });
  REQUIRE_MESSAGE(eager.ok(), eager.error().message);
  auto a = viaJit->leaves(), b = eager->leaves();
  for (size_t i = 0; i < a.size(); ++i) {
    std::string d = compareValues(a[i], b[i].toDoubles());
    REQUIRE_MESSAGE(d.empty(), (viaJit->paths()[i] + ": " + d));
  }
  // A second call hits the cache.
  auto again = jitted.call(f.params);
  REQUIRE(again.ok());
  TSR_COMPARE(jitted.stats().hits, 1);
  // And jit of grad of grad on a scalar.
  Jit d2 = jit([](const std::vector<Array>& xs) {
    return std::vector<Array>{gradOf(gradOf([](const Array& x) { return x * x * x + sin(x); }))(xs[0])};
  }, "d2");
  auto r = d2({Array::scalar(0.8, DType::F64)});
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  REQUIRE(std::fabs((*r)[0].item() - (6 * 0.8 - std::sin(0.8))) < 1e-12);
}

// Non-differentiable ops on the path (argmax, comparisons, integer ops, conversions to integers, random
// bits) contribute nothing: the gradient is that of the differentiable paths alone, and nothing crashes.
TEST_CASE("nonDifferentiableOpsGiveZeroCotangents") {
  std::vector<double> xv = {0.1, 0.9, -0.4, 0.7, 1.3, -1.2};
  Array x = Array::fromVector(xv, Shape{2, 3}, DType::F64);
  auto vg = capture([&] {
    return valueAndGrad([](const Tree& p) {
      const Array& a = p.leaf();
      Array am = astype(argmax(a, 1), DType::F64);                   // [2]: an index, constant
      Array cmp = astype(a > 0.5, DType::F64);                        // comparison: constant
      Array ints = astype(bitwiseAnd(astype(a * 10.0, DType::I32), Array::full({2, 3}, 6, DType::I32)),
                          DType::F64);                                // integer ops: constant
      Array k = Array::full({2, 3}, 7, DType::U32);
      Array bits = threefry2x32(k, k, astype(abs(a) * 1000.0, DType::U32), k).first;
      Array rnd = astype(shiftRightLogical(bits, Array::full({2, 3}, 24, DType::U32)), DType::F64);  // [0, 256)
      return sum(a * expandDims(am, 1)) + sum(a * cmp) + sum(a * ints) + sum(a * rnd) + sum(am) + sum(rnd);
    })(Tree(x));
  });
  REQUIRE_MESSAGE(vg.ok(), vg.error().message);
  // The expected gradient: the constants themselves, computed eagerly.
  Array am = astype(argmax(x, 1), DType::F64);
  Array want = expandDims(am, 1) + astype(x > 0.5, DType::F64) +
               astype(bitwiseAnd(astype(x * 10.0, DType::I32), Array::full({2, 3}, 6, DType::I32)), DType::F64);
  Array k = Array::full({2, 3}, 7, DType::U32);
  Array bits = threefry2x32(k, k, astype(abs(x) * 1000.0, DType::U32), k).first;
  want = want + astype(shiftRightLogical(bits, Array::full({2, 3}, 24, DType::U32)), DType::F64);
  std::string d = compareValues(vg->grads.leaf(), want.toDoubles());
  REQUIRE_MESSAGE(d.empty(), d.c_str());
}

// A loss that depends on x only through non-differentiable ops has a zero gradient (not an error).
TEST_CASE("onlyNonDifferentiablePathGivesZeros") {
  Array x = Array::fromVector(std::vector<double>{0.3, -2.0, 5.0}, Shape{3}, DType::F64);
  auto g = capture([&] {
    return gradOf([](const Array& a) {
      return astype(argmax(a, 0), DType::F64) + sum(astype(a > 0.0, DType::F64)) + sum(floor(a)) + sum(sign(a));
    })(x);
  });
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  TSR_COMPARE(g->aval(), x.aval());
  for (double v : g->toDoubles()) TSR_COMPARE(v, 0.0);
}

// stop_gradient: the value passes, the gradient does not. f(x) = x * stop_gradient(x)^2 has f'(x) = x^2 (the
// stopped factor is a constant), eagerly and under jit; grad of grad sees the constant too.
TEST_CASE("stopGradientCutsTheGradient") {
  ScalarFn f = [](const Array& x) { return x * square(stopGradient(x)); };
  for (double x : {-1.5, 0.5, 2.0}) {
    auto got = capture([&] {
      Array v = Array::scalar(x, DType::F64);
      return std::vector<double>{f(v).item(), gradOf(f)(v).item(), gradOf(gradOf(f))(v).item()};
    });
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    TSR_COMPARE((*got)[0], x * x * x);
    TSR_COMPARE((*got)[1], x * x);
    TSR_COMPARE((*got)[2], 0.0);
  }
  Jit jitted = jit([](const std::vector<Array>& xs) {
    return std::vector<Array>{gradOf([](const Array& a) { return sum(a * stopGradient(a)); })(xs[0])};
  }, "stop_gradient");
  auto got = jitted({Array::fromVector(std::vector<double>{0.25, -3.0}, Shape{2}, DType::F64)});
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  std::vector<double> g = (*got)[0].toDoubles();
  TSR_COMPARE(g[0], 0.25);
  TSR_COMPARE(g[1], -3.0);
}

// Second derivatives of the new special functions, against closed forms: lgamma'' = trigamma, with
// trigamma(1) = pi^2/6, trigamma(1/2) = pi^2/2 and trigamma(x + 1) = trigamma(x) - 1/x^2, and reflection below
// 1/2 (trigamma(-1/2) = pi^2/2 + 4); digamma' = trigamma; (x^-3)'' = 12 x^-5.
TEST_CASE("specialFunctionSecondDerivatives") {
  const double pi2 = std::numbers::pi * std::numbers::pi;
  struct Row {
    double x, trigamma;
  };
  const Row rows[] = {{1, pi2 / 6}, {0.5, pi2 / 2}, {2, pi2 / 6 - 1}, {3.5, pi2 / 2 - 4 - 4.0 / 9 - 4.0 / 25},
                      {-0.5, pi2 / 2 + 4}, {12, pi2 / 6 - 1 - 1.0 / 4 - 1.0 / 9 - 1.0 / 16 - 1.0 / 25 - 1.0 / 36 - 1.0 / 49 -
                                                 1.0 / 64 - 1.0 / 81 - 1.0 / 100 - 1.0 / 121}};
  for (const Row& r : rows) {
    auto got = capture([&] {
      Array v = Array::scalar(r.x, DType::F64);
      return std::vector<double>{gradOf(gradOf([](const Array& a) { return lgamma(a); }))(v).item(),
                                 gradOf([](const Array& a) { return digamma(a); })(v).item(),
                                 gradOf(gradOf([](const Array& a) { return integerPow(a, -3); }))(v).item()};
    });
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    REQUIRE_MESSAGE(std::fabs((*got)[0] - r.trigamma) <= 1e-10 * r.trigamma, "lgamma'' at " << r.x << ": " << (*got)[0]);
    REQUIRE_MESSAGE(std::fabs((*got)[1] - r.trigamma) <= 1e-10 * r.trigamma, "digamma' at " << r.x << ": " << (*got)[1]);
    const double want = 12 * std::pow(r.x, -5);
    REQUIRE_MESSAGE(std::fabs((*got)[2] - want) <= 1e-12 * std::fabs(want), "(x^-3)'' at " << r.x << ": " << (*got)[2]);
  }
}

// Every op the backward pass emits carries the module path of the forward op it differentiates, with none of
// the modules open while the gradient is taken: the vjp rules' ops and the sums that accumulate the cotangents of
// a value used twice (x below feeds exp, the product and the reduction's input).
TEST_CASE("backwardOpsKeepTheirForwardsModulePath") {
  auto traced = makeGraph(
      [](const std::vector<Array>& xs) {
        auto f = [](const Array& x) {
          ModuleScope block("block");
          Array y;
          {
            ModuleScope inner("inner");
            y = exp(x) * x;  // x used twice
          }
          return sum(y * x);  // and a third time
        };
        return std::vector<Array>{gradOf(f)(xs[0])};
      },
      {Aval{Shape{4}, DType::F64}});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  const ir::Graph& g = traced->graph;
  // The forward ops are recorded in the scopes that were open (block, block.inner); the rest is the backward
  // pass, which runs outside them. Each backward op lies in one of the forward's modules.
  int ops = 0, sums = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::OpCode::Constant) continue;
    const std::string& path = n.prov.modulePath;
    INFO(ir::coreOpName(n.op) << " at " << n.prov.toString());
    CHECK((path == "block" || path == "block.inner"));
    ++ops;
    sums += n.op == ir::OpCode::Add;
  }
  CHECK(ops > 8);    // four forward ops and the backward's
  CHECK(sums >= 2);  // the cotangents of x from its three uses
}

// Errors a user can cause come back as Errors, never as crashes.
TEST_CASE("errorsComeBackAsValues") {
  Array v = Array::fromVector(std::vector<double>{1, 2, 3}, Shape{3}, DType::F64);
  auto nonScalar = capture([&] { return gradOf([](const Array& a) { return a * 2.0; })(v); });
  REQUIRE(!nonScalar.ok());
  REQUIRE_MESSAGE(nonScalar.error().message.find("scalar") != std::string::npos, err(nonScalar.error()).c_str());

  auto intLoss = capture([&] {
    return grad([](const Tree& p) { return sum(astype(p.leaf(), DType::I32)); })(Tree(v));
  });
  REQUIRE(!intLoss.ok());
  REQUIRE_MESSAGE(intLoss.error().message.find("floating") != std::string::npos, err(intLoss.error()).c_str());

  Array w = Array::fromVector(std::vector<double>{1, 2, 3, 4}, Shape{4}, DType::F64);
  auto shapes = capture([&] { return gradOf([w](const Array& a) { return sum(a + w); })(v); });
  REQUIRE(!shapes.ok());
  REQUIRE_MESSAGE((shapes.error().message.find("[3]") != std::string::npos &&
                   shapes.error().message.find("[4]") != std::string::npos),
                  err(shapes.error()).c_str());
  REQUIRE_MESSAGE(shapes.error().message.find("test_autodiff.cpp") != std::string::npos, err(shapes.error()).c_str());

  auto inner = capture([&] {
    return gradOf(gradOf([](const Array& a) { return sum(matmul(a, a)); }))(Array::scalar(1.0, DType::F64));
  });
  REQUIRE(!inner.ok());

  // Inside jit the same errors are Results of the call.
  Jit j = jit([w](const std::vector<Array>& xs) {
    return std::vector<Array>{gradOf([w](const Array& a) { return sum(a * w); })(xs[0])};
  }, "bad_grad");
  auto r = j({v});
  REQUIRE(!r.ok());

  // vjp with a wrongly shaped cotangent.
  auto ct = capture([&] {
    VjpOutput o = vjp([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] * 2.0}; }, {v});
    return o.pullback({w});
  });
  REQUIRE(!ct.ok());
}

// vjp with several outputs and cotangents, one of them absent (zero).
TEST_CASE("vjpWithSeveralOutputs") {
  Array a = Array::fromVector(std::vector<double>{0.5, -1.0}, Shape{2}, DType::F64);
  Array b = Array::fromVector(std::vector<double>{2.0, 3.0}, Shape{2}, DType::F64);
  auto r = capture([&] {
    VjpOutput o = vjp([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] * xs[1], sin(xs[0])}; },
                      {a, b});
    Array ct0 = Array::fromVector(std::vector<double>{1, 10}, Shape{2}, DType::F64);
    auto both = o.pullback({ct0, Array::fromVector(std::vector<double>{1, 1}, Shape{2}, DType::F64)});
    auto first = o.pullback({ct0, Array()});
    return std::vector<Array>{both[0], both[1], first[0], first[1]};
  });
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  std::string d = compareValues((*r)[0], {2 + std::cos(0.5), 30 + std::cos(-1.0)});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  d = compareValues((*r)[1], {0.5, -10});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  d = compareValues((*r)[2], {2, 30});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
  d = compareValues((*r)[3], {0.5, -10});
  REQUIRE_MESSAGE(d.empty(), d.c_str());
}
