// whileLoop and foriLoop with traced bounds: compared with the same computation written as a plain C++ loop, eagerly,
// under jit and under vmap (a batched predicate runs until every example is done); grad refuses it with a message
// that says what to use instead; the IR text form round-trips.
#include "tests/check.h"

#include <cmath>

#include "engine/compile/jit.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Array i32(double v) { return Array::scalar(v, DType::I32); }

// The number of Collatz steps from n to 1, as a while_loop over the carry (n, steps).
Array collatzSteps(const Array& n) {
  auto notOne = [](const Tree& c) { return notEqual(c.child(0).leaf(), i32(1)); };
  auto step = [](const Tree& c) {
    Array m = c.child(0).leaf();
    Array even = equal(rem(m, i32(2)), i32(0));
    Array next = where(even, div(m, i32(2)), m * 3.0 + 1.0);
    return Tree::list({Tree(next), Tree(c.child(1).leaf() + 1.0)});
  };
  return whileLoop(notOne, step, Tree::list({Tree(n), Tree(i32(0))})).child(1).leaf();
}

int64_t collatzLoop(int64_t n) {
  int64_t steps = 0;
  for (; n != 1; ++steps) n = n % 2 == 0 ? n / 2 : 3 * n + 1;
  return steps;
}

// Newton's iteration for sqrt(a) until |x * x - a| <= 1e-12 * a: the carry is a dict.
Tree newtonSqrt(const Array& a) {
  auto far = [a](const Tree& c) { return abs(c.find("x")->leaf() * c.find("x")->leaf() - a) > a * 1e-12; };
  auto step = [a](const Tree& c) {
    Array x = c.find("x")->leaf();
    return Tree::dict({{"x", Tree((x + a / x) * 0.5)}, {"iterations", Tree(c.find("iterations")->leaf() + 1.0)}});
  };
  return whileLoop(far, step, Tree::dict({{"x", Tree(a)}, {"iterations", Tree(i32(0))}}));
}

}  // namespace

TEST_CASE("whileLoopEqualsThePlainLoop") {
  for (int64_t n : {1, 2, 6, 7, 27, 97}) {
    CAPTURE(n);
    TSR_COMPARE(collatzSteps(i32(static_cast<double>(n))).item(), static_cast<double>(collatzLoop(n)));
  }
  // Newton: the same iterates as the loop written out, and the same number of them.
  const double a = 10.0;
  double x = a;
  int iterations = 0;
  for (; std::fabs(x * x - a) > a * 1e-12; ++iterations) x = (x + a / x) * 0.5;
  Tree r = newtonSqrt(Array::scalar(a, DType::F64));
  TSR_COMPARE(r.find("x")->leaf().item(), x);
  TSR_COMPARE(r.find("iterations")->leaf().item(), static_cast<double>(iterations));
  // A predicate false at once: the body never runs.
  Tree same = whileLoop([](const Tree&) { return Array::scalar(0, DType::Bool); },
                        [](const Tree& c) { return Tree(c.leaf() + 1.0); }, Tree(Array::full(Shape{2}, 3.0)));
  TSR_COMPARE(same.leaf().toDoubles(), (std::vector<double>{3.0, 3.0}));
}

TEST_CASE("whileLoopUnderJitIsOneOpWithATracedBound") {
  // while i < n: acc = acc * 0.5 + i; n is an argument of the jitted function, so the bound is traced.
  auto f = [](const std::vector<Array>& a) {
    auto below = [n = a[1]](const Tree& c) { return less(c.child(0).leaf(), n); };
    auto step = [](const Tree& c) {
      Array i = c.child(0).leaf();
      return Tree::list({Tree(i + 1.0), Tree(c.child(1).leaf() * 0.5 + astype(i, DType::F64))});
    };
    return std::vector<Array>{whileLoop(below, step, Tree::list({Tree(i32(0)), Tree(a[0])})).child(1).leaf()};
  };
  Jit j = jit(f, "while_jit");
  Array x = Array::fromVector({1.0, -4.0}, Shape{2}, DType::F64);
  for (int n : {0, 3, 9}) {
    CAPTURE(n);
    std::vector<double> want = x.toDoubles();
    for (int i = 0; i < n; ++i)
      for (double& w : want) w = w * 0.5 + i;
    auto r = j({x, i32(n)});
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    TSR_COMPARE((*r)[0].toDoubles(), want);
  }
  TSR_COMPARE(j.stats().misses, 1);  // one trace serves every bound
  auto lowered = makeGraph(f, {x.aval(), i32(0).aval()});
  REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
  TSR_COMPARE(lowered->graph.count(ir::OpCode::WhileLoop), 1);
  TSR_COMPARE(lowered->graph.count(ir::OpCode::Mul), 0);  // the body's ops are in the nested graph
}

TEST_CASE("foriLoopWithTracedBoundsIsAWhileLoop") {
  auto body = [](const Array& i, const Tree& c) { return Tree(c.leaf() * 0.5 + astype(i, DType::F64)); };
  Array x = Array::fromVector({1.0, -4.0}, Shape{2}, DType::F64);
  std::vector<double> want = x.toDoubles();
  for (int i = 2; i < 7; ++i)
    for (double& w : want) w = w * 0.5 + i;
  // Eagerly, and with static bounds (a scan) for comparison.
  TSR_COMPARE(foriLoop(i32(2), i32(7), body, Tree(x)).leaf().toDoubles(), want);
  TSR_COMPARE(foriLoop(2, 7, body, Tree(x)).leaf().toDoubles(), want);
  // i64 bounds are accepted; an empty or reversed range returns the initial carry.
  TSR_COMPARE(foriLoop(Array::scalar(2, DType::I64), Array::scalar(7, DType::I64), body, Tree(x)).leaf().toDoubles(),
              want);
  TSR_COMPARE(foriLoop(i32(7), i32(2), body, Tree(x)).leaf().toDoubles(), x.toDoubles());
  // Traced: one while_loop and no scan.
  auto traced = makeGraph(
      [&](const std::vector<Array>& a) { return std::vector<Array>{foriLoop(a[1], a[2], body, Tree(a[0])).leaf()}; },
      {x.aval(), i32(0).aval(), i32(0).aval()});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  TSR_COMPARE(traced->graph.count(ir::OpCode::WhileLoop), 1);
  TSR_COMPARE(traced->graph.count(ir::OpCode::Scan), 0);
  // Bounds must be integer scalars.
  std::string e = errorOf([&] { foriLoop(Array::scalar(0.0), i32(3), body, Tree(x)); });
  REQUIRE_MESSAGE(e.find("foriLoop: the lower bound must be a scalar integer, got f32[]") != std::string::npos,
                  e.c_str());
}

TEST_CASE("vmapWithABatchedPredicateEqualsTheLoopPerExample") {
  // Each example stops at its own step count: the loop runs until the last one is done.
  std::vector<double> starts = {1, 6, 27, 7, 2};
  Array ns = Array::fromVector(starts, Shape{5}, DType::I32);
  ArrayFn steps = [](const std::vector<Array>& a) { return std::vector<Array>{collatzSteps(a[0])}; };
  std::vector<double> got = vmap(steps)({ns})[0].toDoubles();
  for (size_t k = 0; k < starts.size(); ++k) TSR_COMPARE(got[k], static_cast<double>(collatzLoop(int64_t(starts[k]))));
  // The same under jit.
  Jit j = jit([&](const std::vector<Array>& a) { return vmap(steps)(a); }, "collatz_batch");
  auto r = j({ns});
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE((*r)[0].toDoubles(), got);
}

TEST_CASE("vmapWithAnUnbatchedPredicateKeepsTheCounterUnbatched") {
  // The bounds are shared by every example, so the predicate is too: a plain loop of the batched body whose
  // counter stays a scalar (no per-example select).
  auto body = [](const Array& i, const Tree& c) { return Tree(c.leaf() * 0.5 + astype(i, DType::F64)); };
  ArrayFn f = [&](const std::vector<Array>& a) {
    return std::vector<Array>{foriLoop(a[1], a[2], body, Tree(a[0])).leaf()};
  };
  Array xs = Array::fromVector({1.0, -4.0, 2.0, 0.5, 3.0, -1.0}, Shape{3, 2}, DType::F64);
  ArrayFn batched = vmap(f, {0, -1, -1});
  std::vector<Array> got = batched({xs, i32(1), i32(4)});
  for (int64_t b = 0; b < 3; ++b) {
    Array x = squeeze(sliceAxis(xs, 0, b, b + 1), {0});
    EXPECT_CLOSE(squeeze(sliceAxis(got[0], 0, b, b + 1), {0}), f({x, i32(1), i32(4)})[0], 1e-15);
  }
  auto traced = makeGraph(batched, {xs.aval(), i32(0).aval(), i32(0).aval()});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  TSR_COMPARE(traced->graph.count(ir::OpCode::WhileLoop), 1);
  TSR_COMPARE(countOf(traced->graph, ir::OpCode::Select), 0);
  TSR_COMPARE(countOf(traced->graph, ir::OpCode::ReduceOr), 0);
  // Batched bounds: a batched predicate, so every example selects its own carry.
  Array uppers = Array::fromVector({0, 2, 5}, Shape{3}, DType::I32);
  std::vector<Array> each = vmap(f, {0, -1, 0})({xs, i32(1), uppers});
  for (int64_t b = 0; b < 3; ++b) {
    Array x = squeeze(sliceAxis(xs, 0, b, b + 1), {0});
    Array upper = squeeze(sliceAxis(uppers, 0, b, b + 1), {0});
    EXPECT_CLOSE(squeeze(sliceAxis(each[0], 0, b, b + 1), {0}), f({x, i32(1), upper})[0], 1e-15);
  }
}

TEST_CASE("gradOfWhileLoopRaisesAClearError") {
  auto loss = [](const Tree& t) { return sum(newtonSqrt(t.leaf()).find("x")->leaf()); };
  std::string e = errorOf([&] { grad(loss)(Tree(Array::scalar(10.0, DType::F64))); });
  REQUIRE_MESSAGE(e.find("while_loop: reverse-mode differentiation does not work for while_loop") != std::string::npos,
                  e.c_str());
  REQUIRE_MESSAGE(e.find("use scan, or foriLoop (lax.fori_loop) with static bounds") != std::string::npos, e.c_str());
  REQUIRE_MESSAGE(e.find("test_while_loop.cpp") != std::string::npos, e.c_str());  // the loop's call site
  // Under jit it is an error result, not an abort.
  Jit j = jit([&](const Tree& t, const StaticArgs&) { return grad(loss)(t); }, "grad_while");
  auto r = j.call(Tree(Array::scalar(10.0, DType::F64)));
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("reverse-mode differentiation") != std::string::npos, r.error().message);
  // A loop that only counts (no float carry) is no obstacle: its result is a constant of the gradient.
  auto scaled = [](const Tree& t) {
    return t.leaf() * astype(collatzSteps(i32(6)), DType::F64);  // 8 steps
  };
  TSR_COMPARE(grad(scaled)(Tree(Array::scalar(1.5, DType::F64))).leaf().item(), 8.0);
}

TEST_CASE("whileLoopErrorsNameTheLeaf") {
  auto keep = [](const Tree&) { return Array::scalar(1, DType::Bool); };
  std::string e = errorOf([&] {
    whileLoop(keep, [](const Tree& c) { return Tree::dict({{"h", Tree(astype(c.find("h")->leaf(), DType::F64))}}); },
              Tree::dict({{"h", Tree(Array::zeros(Shape{2}))}}));
  });
  REQUIRE_MESSAGE(e.find("while_loop: carry 'h' enters the body as f32[2] but comes out as f64[2]") != std::string::npos,
                  e.c_str());
  e = errorOf([&] {
    whileLoop([](const Tree& c) { return c.leaf(); }, [](const Tree& c) { return c; }, Tree(Array::zeros(Shape{2})));
  });
  REQUIRE_MESSAGE(e.find("while_loop: the cond function must return a scalar bool, got (f32[2])") != std::string::npos,
                  e.c_str());
  e = errorOf([&] {
    whileLoop(keep, [](const Tree& c) { return Tree::list({c}); }, Tree(Array::zeros(Shape{2})));
  });
  REQUIRE_MESSAGE(e.find("while_loop: the body returns a carry of structure") != std::string::npos, e.c_str());
}

TEST_CASE("whileLoopIrTextRoundTripsAndVerifies") {
  const auto& reg = ops::registry();
  // A while_loop whose cond and body close over different values: both graphs take both.
  auto traced = makeGraph(
      [](const std::vector<Array>& a) {
        Array limit = a[1], scale = a[2];
        auto below = [&](const Tree& c) { return less(sum(c.leaf()), limit); };
        auto step = [&](const Tree& c) { return Tree(c.leaf() * scale + 1.0); };
        return std::vector<Array>{whileLoop(below, step, Tree(a[0])).leaf()};
      },
      {Aval{Shape{3}, DType::F32}, Aval{Shape{}, DType::F32}, Aval{Shape{3}, DType::F32}});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  REQUIRE(ir::verify(traced->graph, reg).ok());
  std::string text = ir::print(traced->graph, reg);
  REQUIRE_MESSAGE(text.find("= while_loop(%1, %2, %0) {num_consts=2, cond={\n    func @cond(") != std::string::npos,
                  text.c_str());
  auto parsed = ir::parse(text, reg);
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  TSR_COMPARE(ir::print(*parsed, reg), text);

  // The parser checks the op like any other: a cond that returns f32 is refused at its line.
  std::string bad =
      "func @f(%0: f32[]) -> (f32[]) {\n"
      "  %1 = while_loop(%0) {num_consts=0, cond={\n"
      "    func @cond(%0: f32[]) -> (f32[]) { return %0 }\n"
      "  }, body={\n"
      "    func @body(%0: f32[]) -> (f32[]) { return %0 }\n"
      "  }} : f32[]\n"
      "  return %1\n"
      "}\n";
  auto r = ir::parse(bad, reg);
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("while_loop: the cond function must return a scalar bool, got f32[]") !=
                      std::string::npos,
                  r.error().message);
}
