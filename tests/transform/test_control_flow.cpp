// scan, foriLoop and cond: each is compared with the same computation written as a plain C++ loop or branch over
// the Array API (the "unrolled" reference), in value and in gradient, eagerly and under jit and vmap; a 12-layer
// stack written with scan traces to one body whatever its depth; and the IR text form of nested graphs.
#include "tests/check.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <random>

#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Array randomArray(Shape s, std::mt19937& rng, DType t = DType::F64, double scale = 1.0) {
  std::uniform_real_distribution<double> d(-scale, scale);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, std::move(s), t);
}

// Row t of xs: [T, ...] -> [...].
Array row(const Array& xs, int64_t t) {
  auto dims = xs.shape().dims();
  dims.erase(dims.begin());
  return reshape(sliceAxis(xs, 0, t, t + 1), dims);
}

// ---- a small RNN: h: [B, H], x_t: [B, D]; W: [H, H], U: [D, H], b: [H] ----

constexpr int64_t kT = 5, kB = 3, kD = 4, kH = 6;

Array cell(const Array& h, const Array& x, const Tree& p) {
  return tanh(matmul(h, p.find("W")->leaf()) + matmul(x, p.find("U")->leaf()) + p.find("b")->leaf());
}

Tree rnnParams(std::mt19937& rng) {
  return Tree::dict({{"W", Tree(randomArray(Shape{kH, kH}, rng, DType::F64, 0.5))},
                     {"U", Tree(randomArray(Shape{kD, kH}, rng, DType::F64, 0.5))},
                     {"b", Tree(randomArray(Shape{kH}, rng))},
                     {"h0", Tree(randomArray(Shape{kB, kH}, rng))},
                     {"xs", Tree(randomArray(Shape{kT, kB, kD}, rng))}});
}

// Returns (final h, ys) with ys[t] = h_t * h_t computed by scan.
std::pair<Array, Array> rnnScan(const Tree& p, bool reverse) {
  auto step = [&](const Tree& h, const Tree& x) {
    Array n = cell(h.leaf(), x.leaf(), p);
    return std::make_pair(Tree(n), Tree(n * n));
  };
  auto [hT, ys] = scan(step, *p.find("h0"), *p.find("xs"), -1, reverse);
  return {hT.leaf(), ys.leaf()};
}

// The same written as a loop: the reference.
std::pair<Array, Array> rnnLoop(const Tree& p, bool reverse) {
  Array h = p.find("h0")->leaf();
  const Array& xs = p.find("xs")->leaf();
  std::vector<Array> ys(kT);
  for (int64_t s = 0; s < kT; ++s) {
    int64_t t = reverse ? kT - 1 - s : s;
    h = cell(h, row(xs, t), p);
    ys[static_cast<size_t>(t)] = h * h;
  }
  return {h, stack(ys, 0)};
}

// A loss that weighs every output differently, so that every gradient entry matters.
Array rnnLoss(const std::pair<Array, Array>& out) {
  Array wy = iota(out.second.shape(), 0, DType::F64) * 0.1 + 0.3;
  return sum(out.first * out.first) + sum(out.second * wy);
}

// ---- 12 identical Dense + ReLU layers ----

constexpr int64_t kWidth = 16;

Array mlpUnrolled(const Array& x, const Array& kernels, const Array& biases) {
  Array h = x;
  for (int64_t i = 0; i < kernels.dim(0); ++i) h = relu(matmul(h, row(kernels, i)) + row(biases, i));
  return h;
}

Array mlpScanned(const Array& x, const Array& kernels, const Array& biases) {
  auto layer = [](const Tree& h, const Tree& p) {
    return std::make_pair(Tree(relu(matmul(h.leaf(), p.child(0).leaf()) + p.child(1).leaf())), Tree());
  };
  return scan(layer, Tree(x), Tree::list({Tree(kernels), Tree(biases)})).first.leaf();
}

int totalNodes(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes()) {
    ++n;
    for (const ir::GraphPtr& body : ir::nestedGraphs(node.attrs)) n += totalNodes(*body);
  }
  return n;
}

ClosedGraph traceMlp(bool scanned, int64_t depth) {
  std::vector<Aval> avals = {Aval{Shape{8, kWidth}, DType::F32}, Aval{Shape{depth, kWidth, kWidth}, DType::F32},
                             Aval{Shape{depth, kWidth}, DType::F32}};
  auto cg = makeGraph(
      [&](const std::vector<Array>& a) {
        return std::vector<Array>{scanned ? mlpScanned(a[0], a[1], a[2]) : mlpUnrolled(a[0], a[1], a[2])};
      },
      avals, scanned ? "mlp_scan" : "mlp");
  TSR_CHECK_MSG(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
  return std::move(cg).value();
}

}  // namespace

// ---- scan ----

TEST_CASE("scanEqualsTheLoopInValue") {
  std::mt19937 rng(1);
  Tree p = rnnParams(rng);
  for (bool reverse : {false, true}) {
    auto [h, ys] = rnnScan(p, reverse);
    auto [hRef, ysRef] = rnnLoop(p, reverse);
    EXPECT_CLOSE(h, hRef, 1e-13);
    EXPECT_CLOSE(ys, ysRef, 1e-13);
  }
}

// grad through scan (its vjp rule: a reverse scan of the body's pullback) against grad through the loop
// (each op's own vjp rule), for every input: weights the body closes over, the initial carry and the xs.
TEST_CASE("scanEqualsTheLoopInGradient") {
  std::mt19937 rng(2);
  Tree p = rnnParams(rng);
  for (bool reverse : {false, true}) {
    auto viaScan = valueAndGrad([&](const Tree& q) { return rnnLoss(rnnScan(q, reverse)); })(p);
    auto viaLoop = valueAndGrad([&](const Tree& q) { return rnnLoss(rnnLoop(q, reverse)); })(p);
    EXPECT_CLOSE(viaScan.value, viaLoop.value, 1e-13);
    EXPECT_TREE_CLOSE(viaScan.grads, viaLoop.grads, 1e-12);
    MESSAGE((reverse ? "reverse" : "forward")
            << ": grad through scan vs loop: max relative difference " << std::scientific << std::setprecision(2)
            << maxRelDiff(viaScan.grads, viaLoop.grads) << " over W, U, b, h0, xs");
  }
}

// And against central finite differences, independently of any vjp rule.
TEST_CASE("scanGradientMatchesFiniteDifferences") {
  std::mt19937 rng(3);
  Tree p = rnnParams(rng);
  auto loss = [](const Tree& q) { return rnnLoss(rnnScan(q, false)); };
  Tree g = grad(loss)(p);
  for (const char* name : {"W", "h0", "xs"}) {
    std::vector<double> base = p.find(name)->leaf().toDoubles();
    std::vector<double> analytic = g.find(name)->leaf().toDoubles();
    for (size_t i = 0; i < base.size(); i += 5) {
      auto at = [&](double delta) {
        std::vector<double> v = base;
        v[i] += delta;
        Tree q = p;
        q.set(name, Tree(Array::fromVector(v, p.find(name)->leaf().shape(), DType::F64)));
        return loss(q).item();
      };
      double eps = 1e-6, fd = (at(eps) - at(-eps)) / (2 * eps);
      REQUIRE_MESSAGE(std::fabs(fd - analytic[i]) <= 1e-6 * (1 + std::fabs(fd)),
                      name << "[" << i << "]: fd " << fd << " vs grad " << analytic[i]);
    }
  }
}

// d2/dx2 of h0 * x^3 written as a scan: the vjp rule's own scans are differentiated again.
TEST_CASE("scanSecondDerivative") {
  auto cube = [](const Array& x) {
    auto step = [&](const Tree& h, const Tree&) { return std::make_pair(Tree(h.leaf() * x), Tree()); };
    return scan(step, Tree(Array::scalar(2.0, DType::F64)), Tree(), 3).first.leaf();
  };
  Array x = Array::scalar(1.5, DType::F64);
  TSR_COMPARE(cube(x).item(), 2 * 1.5 * 1.5 * 1.5);
  REQUIRE(std::fabs(gradOf(cube)(x).item() - 6 * 1.5 * 1.5) < 1e-12);
  REQUIRE(std::fabs(gradOf(gradOf(cube))(x).item() - 12 * 1.5) < 1e-12);
}

TEST_CASE("vmapOfScanEqualsTheLoopPerExample") {
  std::mt19937 rng(4);
  Tree p = rnnParams(rng);
  const int64_t n = 3;
  Array h0s = randomArray(Shape{n, kB, kH}, rng);        // batched on dim 0
  Array xss = randomArray(Shape{kT, n, kB, kD}, rng);    // batched on dim 1
  auto f = [&](const std::vector<Array>& a) {
    Tree q = p;
    q.set("h0", Tree(a[0]));
    q.set("xs", Tree(a[1]));
    auto [h, ys] = rnnScan(q, false);
    return std::vector<Array>{h, ys};
  };
  std::vector<Array> out = vmap(f, {0, 1})({h0s, xss});
  TSR_COMPARE(out[0].shape(), (Shape{n, kB, kH}));
  TSR_COMPARE(out[1].shape(), (Shape{n, kT, kB, kH}));
  for (int64_t i = 0; i < n; ++i) {
    Tree q = p;
    q.set("h0", Tree(row(h0s, i)));
    q.set("xs", Tree(reshape(sliceAxis(xss, 1, i, i + 1), {kT, kB, kD})));
    auto [hRef, ysRef] = rnnLoop(q, false);
    EXPECT_CLOSE(row(out[0], i), hRef, 1e-13);
    EXPECT_CLOSE(row(out[1], i), ysRef, 1e-13);
  }
  // Only the weights batched (an unbatched carry that the body makes batched).
  Array ws = randomArray(Shape{n, kH, kH}, rng, DType::F64, 0.5);
  auto g = [&](const std::vector<Array>& a) {
    Tree q = p;
    q.set("W", Tree(a[0]));
    return std::vector<Array>{rnnScan(q, true).first};
  };
  std::vector<Array> hw = vmap(g)({ws});
  for (int64_t i = 0; i < n; ++i) {
    Tree q = p;
    q.set("W", Tree(row(ws, i)));
    EXPECT_CLOSE(row(hw[0], i), rnnLoop(q, true).first, 1e-13);
  }
}

TEST_CASE("jitOfScanAndOfItsGradient") {
  std::mt19937 rng(5);
  Tree p = rnnParams(rng);
  auto f = [](const Tree& q, const StaticArgs&) {
    auto [h, ys] = rnnScan(q, false);
    return Tree::list({Tree(h), Tree(ys)});
  };
  Jit jf = jit(f, "rnn");
  auto out = jf.call(p);
  REQUIRE_MESSAGE(out.ok(), out.error().message);
  auto [hRef, ysRef] = rnnLoop(p, false);
  EXPECT_CLOSE(out->child(0).leaf(), hRef, 1e-13);
  EXPECT_CLOSE(out->child(1).leaf(), ysRef, 1e-13);
  auto lowered = jf.lower(p.map([](const Array& a) { return a.aval(); }));
  REQUIRE(lowered.ok());
  TSR_COMPARE(lowered->graph.count(ir::OpCode::Scan), 1);
  TSR_COMPARE(lowered->graph.count(ir::OpCode::DotGeneral), 0);  // both matmuls are in the body

  auto gradFn = grad([](const Tree& q) { return rnnLoss(rnnScan(q, false)); });
  Jit jg = jit([&](const Tree& q, const StaticArgs&) { return gradFn(q); }, "rnn_grad");
  auto g = jg.call(p);
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  Tree want = grad([](const Tree& q) { return rnnLoss(rnnLoop(q, false)); })(p);
  EXPECT_TREE_CLOSE(*g, want, 1e-12);
}

// Per-example gradients: vmap of grad of scan, under jit, against grad of the loop example by example.
TEST_CASE("vmapOfGradOfScanUnderJit") {
  std::mt19937 rng(8);
  Tree p = rnnParams(rng);
  const int64_t n = 2;
  Array xss = randomArray(Shape{n, kT, kB, kD}, rng);
  auto perExample = [&](bool scanned) {
    return [&, scanned](const std::vector<Array>& a) {
      auto loss = [&](const Tree& w) {
        Tree q = p;
        q.set("W", w);
        q.set("xs", Tree(a[0]));
        return rnnLoss(scanned ? rnnScan(q, false) : rnnLoop(q, false));
      };
      return std::vector<Array>{grad(loss)(*p.find("W")).leaf()};
    };
  };
  Jit j = jit([&](const std::vector<Array>& a) { return vmap(perExample(true))(a); }, "per_example_grads");
  auto got = j({xss});
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  TSR_COMPARE((*got)[0].shape(), (Shape{n, kH, kH}));
  for (int64_t i = 0; i < n; ++i) EXPECT_CLOSE(row((*got)[0], i), perExample(false)({row(xss, i)})[0], 1e-12);
}

TEST_CASE("integerCarriesAndLengthZero") {
  // A counter next to a float carry: grad flows through the float one only.
  auto f = [](const Array& x) {
    auto step = [](const Tree& c, const Tree& xt) {
      Array k = c.child(0).leaf();
      Array acc = c.child(1).leaf() * xt.leaf() + astype(k, DType::F64);
      return std::make_pair(Tree::list({Tree(k + 1.0), Tree(acc)}), Tree(k));
    };
    Tree init = Tree::list({Tree(Array::scalar(0, DType::I32)), Tree(Array::scalar(1, DType::F64))});
    auto [c, ks] = scan(step, init, Tree(x));
    return c.child(1).leaf();
  };
  Array x = Array::fromVector({0.5, 2.0, -1.0}, Shape{3}, DType::F64);
  // acc: 1*0.5+0 = 0.5; 0.5*2+1 = 2; 2*-1+2 = 0
  TSR_COMPARE(f(x).item(), 0.0);
  // d/dx: acc3 = (x0*x1 + 1)*x2 + 2 -> (x1*x2, x0*x2, x0*x1 + 1)
  Array g = grad([&](const Tree& t) { return f(t.leaf()); })(Tree(x)).leaf();
  TSR_COMPARE(g.toDoubles(), (std::vector<double>{-2.0, -0.5, 2.0}));

  auto [c0, ys0] = scan([](const Tree& h, const Tree& xt) { return std::make_pair(Tree(h.leaf() + xt.leaf()), xt); },
                        Tree(Array::full(Shape{2}, 3.0)), Tree(Array::zeros(Shape{0, 2})));
  TSR_COMPARE(c0.leaf().toDoubles(), (std::vector<double>{3.0, 3.0}));
  TSR_COMPARE(ys0.leaf().shape(), (Shape{0, 2}));
}

// ---- foriLoop ----

TEST_CASE("foriLoopEqualsTheLoop") {
  // carry = carry * 0.5 + i for i in [2, 7)
  auto f = [](const Array& x) {
    return foriLoop(2, 7, [](const Array& i, const Tree& c) { return Tree(c.leaf() * 0.5 + astype(i, DType::F64)); },
                    Tree(x)).leaf();
  };
  Array x = Array::fromVector({1.0, -4.0}, Shape{2}, DType::F64);
  std::vector<double> want = {1.0, -4.0};
  for (int i = 2; i < 7; ++i)
    for (double& w : want) w = w * 0.5 + i;
  TSR_COMPARE(f(x).toDoubles(), want);
  TSR_COMPARE(grad([&](const Tree& t) { return sum(f(t.leaf())); })(Tree(x)).leaf().toDoubles(),
              (std::vector<double>{1.0 / 32, 1.0 / 32}));
  // An empty range returns the initial carry.
  auto increment = [](const Array&, const Tree& c) { return Tree(c.leaf() + 1.0); };
  TSR_COMPARE(foriLoop(5, 5, increment, Tree(x)).leaf().toDoubles(), x.toDoubles());
  // Under jit: one scan, and the same values.
  Jit j = jit([&](const std::vector<Array>& a) { return std::vector<Array>{f(a[0])}; }, "fori");
  auto r = j({x});
  REQUIRE(r.ok());
  TSR_COMPARE((*r)[0].toDoubles(), want);
}

// ---- cond ----

TEST_CASE("condValueAndGradientInBothBranches") {
  auto f = [](const Array& pred, const Array& x) {
    return cond(
               pred, [](const Tree& t) { return Tree(sin(t.leaf()) * t.leaf()); },
               [](const Tree& t) { return Tree(exp(t.leaf()) - 1.0); }, Tree(x))
        .leaf();
  };
  Array x = Array::fromVector({0.3, -1.2}, Shape{2}, DType::F64);
  for (bool taken : {true, false}) {
    Array pred = Array::scalar(taken ? 1 : 0, DType::Bool);
    auto branch = [&](const Array& v) { return taken ? sin(v) * v : exp(v) - 1.0; };
    EXPECT_CLOSE(f(pred, x), branch(x), 0);
    Tree g = grad([&](const Tree& t) { return sum(f(pred, t.leaf())); })(Tree(x));
    Tree want = grad([&](const Tree& t) { return sum(branch(t.leaf())); })(Tree(x));
    EXPECT_TREE_CLOSE(g, want, 1e-15);
    // Under jit, with the predicate traced.
    Jit j = jit([&](const std::vector<Array>& a) { return std::vector<Array>{f(a[0], a[1])}; }, "cond");
    auto r = j({pred, x});
    REQUIRE(r.ok());
    EXPECT_CLOSE((*r)[0], branch(x), 0);
  }
  // An integer predicate: nonzero is true.
  EXPECT_CLOSE(f(Array::scalar(-3, DType::I32), x), sin(x) * x, 0);
}

TEST_CASE("vmapOfCond") {
  std::mt19937 rng(6);
  Array xs = randomArray(Shape{4, 3}, rng);
  Array preds = Array::fromVector({1, 0, 0, 1}, Shape{4}, DType::Bool);
  auto f = [](const std::vector<Array>& a) {
    return cond(
               a[0], [](const Tree& t) { return Tree(t.leaf() * 2.0); },
               [](const Tree& t) { return Tree(-t.leaf()); }, Tree(a[1]))
        .leaves();
  };
  // Batched predicate: both branches run and each example selects its own.
  Array r = vmap(f)({preds, xs})[0];
  for (int64_t i = 0; i < 4; ++i) {
    Array x = row(xs, i);
    EXPECT_CLOSE(row(r, i), i == 0 || i == 3 ? x * 2.0 : -x, 0);
  }
  // Unbatched predicate: a cond of the vmapped branches.
  Array s = vmap(f, {-1, 0})({Array::scalar(0, DType::Bool), xs})[0];
  EXPECT_CLOSE(s, -xs, 0);
}

// ---- depth: one body, not 12 copies ----

TEST_CASE("scannedStackTracesToOneBody") {
  ClosedGraph unrolled12 = traceMlp(false, 12), unrolled24 = traceMlp(false, 24);
  ClosedGraph scanned12 = traceMlp(true, 12), scanned24 = traceMlp(true, 24);
  TSR_COMPARE(unrolled12.graph.count(ir::OpCode::DotGeneral), 12);
  TSR_COMPARE(unrolled24.graph.count(ir::OpCode::DotGeneral), 24);
  TSR_COMPARE(scanned12.graph.count(ir::OpCode::Scan), 1);
  TSR_COMPARE(scanned12.graph.count(ir::OpCode::DotGeneral), 0);
  // The node count does not depend on the depth.
  TSR_COMPARE(totalNodes(scanned12.graph), totalNodes(scanned24.graph));
  REQUIRE(totalNodes(unrolled24.graph) > totalNodes(unrolled12.graph));
  REQUIRE_MESSAGE(totalNodes(scanned12.graph) * 6 < totalNodes(unrolled12.graph),
                  totalNodes(scanned12.graph) << " vs " << totalNodes(unrolled12.graph));
  const ir::Node* scanNode = nullptr;
  for (const auto& n : scanned12.graph.nodes())
    if (n.op == ir::OpCode::Scan) scanNode = &n;
  REQUIRE(scanNode);
  const ir::Graph& body = *std::get<ir::ScanAttrs>(scanNode->attrs).body;
  TSR_COMPARE(body.count(ir::OpCode::DotGeneral), 1);

  // The cost analysis counts the body once per layer: the same flops as the unrolled stack.
  auto flops = [](const ir::Graph& g) {
    double f = 0;
    for (const auto& n : g.nodes()) {
      std::vector<Aval> in, out;
      for (auto v : n.operands) in.push_back(g.aval(v));
      for (auto v : n.results) out.push_back(g.aval(v));
      f += ops::registry().get(n.op).cost(in, out, n.attrs).flops;
    }
    return f;
  };
  TSR_COMPARE(flops(scanned12.graph), flops(unrolled12.graph));

  // The same values and gradients.
  std::mt19937 rng(7);
  Array x = randomArray(Shape{8, kWidth}, rng, DType::F32);
  Array k = randomArray(Shape{12, kWidth, kWidth}, rng, DType::F32, 0.5);
  Array b = randomArray(Shape{12, kWidth}, rng, DType::F32, 0.1);
  EXPECT_CLOSE(mlpScanned(x, k, b), mlpUnrolled(x, k, b), 1e-5);
  auto loss = [&](bool scanned) {
    return [&, scanned](const Tree& t) {
      Array y = scanned ? mlpScanned(x, t.child(0).leaf(), t.child(1).leaf())
                        : mlpUnrolled(x, t.child(0).leaf(), t.child(1).leaf());
      return sum(y * y);
    };
  };
  Tree params = Tree::list({Tree(k), Tree(b)});
  EXPECT_TREE_CLOSE(grad(loss(true))(params), grad(loss(false))(params), 1e-4);
}

// ---- errors ----

TEST_CASE("errorsNameTheProblem") {
  std::string e = errorOf([] {
    scan(
        [](const Tree& c, const Tree&) {
          Array h = c.find("h")->leaf();
          return std::make_pair(Tree::dict({{"h", Tree(concatenate({h, h}, 0))}}), Tree());
        },
        Tree::dict({{"h", Tree(Array::zeros(Shape{2}))}}), Tree(), 3);
  });
  REQUIRE_MESSAGE(e.find("carry 'h' enters the body as f32[2] but comes out as f32[4]") != std::string::npos,
                  e.c_str());
  e = errorOf([] {
    scan([](const Tree& c, const Tree&) { return std::make_pair(Tree::list({c}), Tree()); },
         Tree(Array::zeros(Shape{2})), Tree(), 3);
  });
  REQUIRE_MESSAGE(e.find("scan: the body returns a carry of structure") != std::string::npos, e.c_str());
  e = errorOf([] {
    scan([](const Tree& h, const Tree& x) { return std::make_pair(h, x); }, Tree(Array::zeros(Shape{2})),
         Tree(Array::zeros(Shape{3, 2})), 4);
  });
  REQUIRE_MESSAGE(e.find("leading dim of the length 4") != std::string::npos, e.c_str());
  e = errorOf([] {
    cond(Array::scalar(1, DType::Bool), [](const Tree& t) { return t; },
         [](const Tree& t) { return Tree(astype(t.leaf(), DType::F64)); }, Tree(Array::zeros(Shape{2})));
  });
  REQUIRE_MESSAGE(
      e.find("cond: output 0 is f32[2] in the true branch but f64[2] in the false branch") != std::string::npos,
      e.c_str());
  e = errorOf([] {
    cond(Array::scalar(1.0), [](const Tree& t) { return t; }, [](const Tree& t) { return t; },
         Tree(Array::zeros(Shape{2})));
  });
  REQUIRE_MESSAGE(e.find("predicate must be a scalar bool or integer") != std::string::npos, e.c_str());
}

// ---- the IR form ----

TEST_CASE("irTextOfNestedGraphsRoundTrips") {
  ClosedGraph cg = traceMlp(true, 12);
  const auto& reg = ops::registry();
  REQUIRE(ir::verify(cg.graph, reg).ok());
  std::string text = ir::print(cg.graph, reg);
  // The body is a nested function, numbered from %0 within it.
  REQUIRE_MESSAGE(
      text.find("= scan(%0, %1, %2) {length=12, num_consts=0, num_carry=1, reverse=0, body={\n"
                "    func @body(%0: f32[8,16], %1: f32[16,16], %2: f32[16]) -> (f32[8,16]) {\n") != std::string::npos,
      text.c_str());
  REQUIRE_MESSAGE(text.find("  }} : f32[8,16]") != std::string::npos, text.c_str());
  auto parsed = ir::parse(text, reg);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  TSR_COMPARE(ir::print(*parsed, reg), text);
  REQUIRE(ir::sameGraph(std::make_shared<const ir::Graph>(*parsed), std::make_shared<const ir::Graph>(cg.graph)));

  // A cond inside a scan body: two levels of nesting.
  auto nested = makeGraph(
      [](const std::vector<Array>& a) {
        auto step = [](const Tree& h, const Tree& x) {
          Tree n = cond(
              x.leaf() > 0.0, [](const Tree& t) { return Tree(t.leaf() * 2.0); }, [](const Tree& t) { return t; }, h);
          return std::make_pair(n, Tree());
        };
        return std::vector<Array>{scan(step, Tree(a[0]), Tree(a[1])).first.leaf()};
      },
      {Aval{Shape{2}, DType::F32}, Aval{Shape{3}, DType::F32}});
  REQUIRE_MESSAGE(nested.ok(), nested.error().message);
  std::string text2 = ir::print(nested->graph, reg);
  auto parsed2 = ir::parse(text2, reg);
  REQUIRE_MESSAGE(parsed2.ok(), (parsed2.ok() ? "" : (parsed2.error().message + "\n" + text2).c_str()));
  TSR_COMPARE(ir::print(*parsed2, reg), text2);
  REQUIRE_MESSAGE((text2.find("      %") != std::string::npos &&
                   text2.find("true_branch={\n        func @true_branch(") != std::string::npos),
                  text2.c_str());
}

TEST_CASE("parseAndVerifyErrorsInsideBodies") {
  const auto& reg = ops::registry();
  // A type error on line 4 of the text, inside the body: reported at its line and column.
  const char* bad =
      "func @f(%0: f32[2], %1: f32[3,2]) -> (f32[2]) {\n"
      "  %2, %3 = scan(%0, %1) {length=3, num_consts=0, num_carry=1, reverse=0, body={\n"
      "    func @body(%0: f32[2], %1: f32[2]) -> (f32[2], f32[2]) {\n"
      "      %2 = add(%0, %1) : f32[3]\n"
      "      return %2, %2\n"
      "    }\n"
      "  }} : f32[2], f32[3,2]\n"
      "  return %2\n"
      "}\n";
  auto r = ir::parse(bad, reg);
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.rfind("4:26:", 0) == 0, r.error().message.c_str());
  // Outer values are not visible inside a body.
  std::string leak = bad;
  leak.replace(leak.find("add(%0, %1) : f32[3]"), 20, "add(%0, %9) : f32[2]");
  r = ir::parse(leak, reg);
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(
      (r.error().message.find("4:") == 0 && r.error().message.find("%9 used before definition") != std::string::npos),
      r.error().message.c_str());
  // The body's signature must match the operands.
  std::string sig = bad;
  sig.replace(sig.find("add(%0, %1) : f32[3]"), 20, "add(%0, %1) : f32[2]");
  sig.replace(sig.find("length=3"), 8, "length=4");
  r = ir::parse(sig, reg);
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(
      r.error().message.find("2:12: scan: x 0 is f32[3,2] but every x needs a leading dim of the length 4") == 0,
      r.error().message.c_str());
  // A bool attribute takes 0 or 1.
  std::string flag = bad;
  flag.replace(flag.find("reverse=0"), 9, "reverse=2");
  r = ir::parse(flag, reg);
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("2:71: expected 0 or 1, found 2") == 0, r.error().message.c_str());

  // Regions nest at most 32 deep: scan(scan(...(x))) with `depth` regions, each a one-step identity-like loop.
  auto nestedText = [](int depth) {
    std::string body = "func @body(%0: f32[]) -> (f32[]) { return %0 }";
    for (int d = 0; d < depth; ++d)
      body = std::string(d + 1 == depth ? "func @f" : "func @body") + "(%0: f32[]) -> (f32[]) { %1 = scan(%0) " +
             "{length=1, num_consts=0, num_carry=1, reverse=0, body={ " + body + " }} : f32[] return %1 }";
    return body;
  };
  auto deep = ir::parse(nestedText(32), reg);
  REQUIRE_MESSAGE(deep.ok(), deep.error().message);
  TSR_COMPARE(ir::print(*ir::parse(ir::print(*deep, reg), reg), reg), ir::print(*deep, reg));
  auto tooDeep = ir::parse(nestedText(33), reg);
  REQUIRE(!tooDeep.ok());
  REQUIRE_MESSAGE(tooDeep.error().message.find("regions nested more than 32 deep") != std::string::npos,
                  tooDeep.error().message.c_str());

  // verify() recurses: a broken body names the scan node and the path into it.
  ClosedGraph cg = traceMlp(true, 2);
  auto& node = cg.graph.mutableNodes().back();
  auto attrs = std::get<ir::ScanAttrs>(node.attrs);
  auto body = std::make_shared<ir::Graph>(*attrs.body);
  body->mutableNodes()[0].operands[0] = 999;
  attrs.body = body;
  node.attrs = attrs;
  Status st = ir::verify(cg.graph, reg);
  REQUIRE(!st.ok());
  REQUIRE_MESSAGE((st.error().message.find("(scan") != std::string::npos &&
                   st.error().message.find("in body: node 0") != std::string::npos),
                  st.error().message.c_str());
}
