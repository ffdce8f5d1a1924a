// jit: equals eager on randomly composed functions; the cache hits and misses with the right reason;
// tracing records provenance; errors inside jitted functions come back as values.
#include "tests/check.h"

#include <cmath>
#include <random>

#include "engine/ir/graph.h"
#include "engine/runtime/debug_nans.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/compile/eval.h"
#include "engine/compile/jit.h"
#include "engine/transform/trace.h"

using namespace tsr;

namespace {

Array randomArray(Shape s, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, std::move(s), DType::F32);
}

// A random program over a pool of [4,5] arrays plus a [5] row, a [4,1] column and a [5,5] matrix.
// The same seed replays the same steps, so eager and jitted runs compute the same function.
std::vector<Array> randomProgram(uint32_t seed, const std::vector<Array>& in) {
  std::mt19937 rng(seed);
  std::vector<Array> pool = {in[0], in[1]};
  const Array& row = in[2];
  const Array& col = in[3];
  const Array& mat = in[4];
  auto pick = [&]() -> const Array& { return pool[rng() % pool.size()]; };
  int steps = 4 + static_cast<int>(rng() % 10);
  for (int s = 0; s < steps; ++s) {
    const Array& a = pick();
    const Array& b = pick();
    switch (rng() % 16) {
      case 0: pool.push_back(tanh(a)); break;
      case 1: pool.push_back(exp(tanh(a))); break;
      case 2: pool.push_back(sin(a) * 0.5); break;
      case 3: pool.push_back(relu(a) - abs(b)); break;
      case 4: pool.push_back(sigmoid(a) + b); break;
      case 5: pool.push_back(a * b); break;
      case 6: pool.push_back(maximum(a, b) - 0.25); break;
      case 7: pool.push_back(a + row); break;
      case 8: pool.push_back(a * col); break;
      case 9: pool.push_back(a - mean(a, {1}, true)); break;
      case 10: pool.push_back(matmul(a, mat) * 0.2); break;
      case 11: pool.push_back(softmax(a)); break;
      case 12: pool.push_back(transpose(transpose(a) * 2.0)); break;
      case 13: pool.push_back(reshape(reshape(a, {20}) + 1.0, {4, 5})); break;
      case 14: pool.push_back(where(a > b, a, -b)); break;
      case 15: pool.push_back(concatenate({sliceAxis(a, 1, 0, 2), sliceAxis(b, 1, 2, 5)}, 1)); break;
    }
  }
  return {pool.back(), sum(pool[pool.size() / 2], {0})};
}

}  // namespace

TEST_CASE("jitEqualsEagerOnRandomFunctions") {
  std::mt19937 rng(99);
  for (uint32_t seed = 0; seed < 200; ++seed) {
    std::vector<Array> in = {randomArray({4, 5}, rng), randomArray({4, 5}, rng), randomArray({5}, rng),
                             randomArray({4, 1}, rng), randomArray({5, 5}, rng)};
    std::vector<Array> eager = randomProgram(seed, in);
    Jit f = jit([seed](const std::vector<Array>& xs) { return randomProgram(seed, xs); }, "random");
    auto jitted = f(in);
    REQUIRE_MESSAGE(jitted.ok(), jitted.error().message);
    TSR_COMPARE(jitted->size(), eager.size());
    for (size_t o = 0; o < eager.size(); ++o) {
      TSR_COMPARE((*jitted)[o].aval(), eager[o].aval());
      auto a = (*jitted)[o].toDoubles(), b = eager[o].toDoubles();
      for (size_t i = 0; i < a.size(); ++i)
        REQUIRE_MESSAGE(std::fabs(a[i] - b[i]) <= 1e-5 * (1 + std::fabs(b[i])),
                        "seed " << seed << " output " << o << " element " << i << ": " << a[i] << " vs " << b[i]);
    }
  }
}

TEST_CASE("cacheHitsAndExplainsMisses") {
  Jit f = jit(
      [](const Tree& args, const StaticArgs& statics) {
        Array x = args.child(0).leaf();
        double scale = std::get<double>(statics.at("scale"));
        return Tree(x * scale);
      },
      "scaled");
  auto call = [&](const Array& x, double scale) {
    return f.call(Tree::list({Tree(x)}), {{"scale", scale}});
  };
  REQUIRE(call(Array::ones({2, 3}), 2.0).ok());
  TSR_COMPARE(f.lastMissReason(), std::string("first call"));
  REQUIRE(call(Array::zeros({2, 3}), 2.0).ok());
  TSR_COMPARE(f.stats().hits, 1);
  TSR_COMPARE(f.stats().misses, 1);

  REQUIRE(call(Array::ones({4, 3}), 2.0).ok());
  TSR_COMPARE(f.stats().misses, 2);
  TSR_COMPARE(f.lastMissReason(), std::string("argument 0 ('0'): shape changed f32[2,3] -> f32[4,3]"));

  REQUIRE(call(Array::ones({4, 3}, DType::BF16), 2.0).ok());
  TSR_COMPARE(f.lastMissReason(), std::string("argument 0 ('0'): dtype changed f32[4,3] -> bf16[4,3]"));

  auto r = call(Array::ones({4, 3}, DType::BF16), 3.0);
  REQUIRE(r.ok());
  TSR_COMPARE(f.lastMissReason(), std::string("static argument 'scale' changed: 2 -> 3"));
  TSR_COMPARE(r->leaf().toDoubles()[0], 3.0);
  TSR_COMPARE(f.cacheSize(), size_t(4));

  // Equal avals again hit, whatever the values.
  REQUIRE(call(Array::full({2, 3}, 5.0), 2.0).ok());
  TSR_COMPARE(f.stats().misses, 4);
  TSR_COMPARE(f.stats().hits, 2);
}

TEST_CASE("compileLogNamesTimeAndMissReason") {
  std::vector<std::string> lines;
  setCompileLogSink([&](const std::string& l) { lines.push_back(l); });
  Jit f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] * 2.0}; }, "double");
  REQUIRE(f({Array::ones({2})}).ok());
  REQUIRE(f({Array::ones({2})}).ok());
  REQUIRE(f({Array::ones({3})}).ok());
  setCompileLogSink(nullptr);
  TSR_COMPARE(lines.size(), size_t(4));  // two compiles, each a miss line and a compile line
  TSR_COMPARE(lines[0], std::string("cache miss for 'double': first call"));
  REQUIRE_MESSAGE((lines[1].find("compiled 'double' for (f32[2]): 3 nodes (3 traced)") == 0 &&
                   lines[1].find(" ms") != std::string::npos),
                  lines[1].c_str());
  TSR_COMPARE(lines[2], std::string("cache miss for 'double': argument 0 ('0'): shape changed f32[2] -> f32[3]"));
}

TEST_CASE("debugNansNamesTheProducingOp") {
  runtime::setDebugNans(true);
  int line = __LINE__ + 3;
  Jit f = jit(
      [](const std::vector<Array>& xs) {
        Array y = sqrt(xs[0]) * 2.0;
        return std::vector<Array>{y + 1.0};
      },
      "sqrt2");
  auto r = f({Array::fromVector({4.0, -1.0}, Shape{2}, DType::F32)});
  REQUIRE(!r.ok());
  const std::string& m = r.error().message;
  REQUIRE_MESSAGE(m.find("sqrt (f32[2]) produced nan at element 1") != std::string::npos, m.c_str());
  REQUIRE_MESSAGE(m.find("test_jit.cpp:" + std::to_string(line)) != std::string::npos, m.c_str());
  REQUIRE(f({Array::fromVector({4.0, 1.0}, Shape{2}, DType::F32)}).ok());  // finite: no error

  // Eager ops check their own results.
  auto e = capture([] { return log(Array::fromVector({0.0}, Shape{1}, DType::F32)); });
  REQUIRE(!e.ok());
  REQUIRE_MESSAGE(e.error().message.find("log produced -inf at element 0") != std::string::npos,
                  e.error().message.c_str());
  runtime::setDebugNans(false);
  REQUIRE(capture([] { return log(Array::fromVector({0.0}, Shape{1}, DType::F32)); }).ok());
}

TEST_CASE("jitRunsTheCleanupPipeline") {
  std::vector<std::string> lines;
  setCompileLogSink([&](const std::string& l) { lines.push_back(l); });
  // (x + 0) * 1 and a duplicated tanh: simplify removes the identities, CSE merges the tanh pair.
  Jit f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{tanh((xs[0] + 0.0) * 1.0) + tanh(xs[0])}; },
              "cleanup");
  auto r = f({Array::fromVector({0.5, -1.0}, Shape{2}, DType::F32)});
  setCompileLogSink(nullptr);
  REQUIRE(r.ok());
  TSR_COMPARE((*r)[0].toDoubles()[0], static_cast<double>(2.0f * std::tanh(0.5f)));
  TSR_COMPARE(lines.size(), size_t(2));
  REQUIRE_MESSAGE(lines[1].find("2 nodes (9 traced)") != std::string::npos, lines[1].c_str());
}

TEST_CASE("errorsInsideJitAreValues") {
  Jit f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] + xs[1]}; }, "bad");
  auto r = f({Array::zeros({2, 3}), Array::zeros({5})});
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("[2,3]") != std::string::npos, r.error().message.c_str());
  REQUIRE_MESSAGE(r.error().message.find("test_jit.cpp") != std::string::npos, r.error().message.c_str());
}

TEST_CASE("leakedTracerIsAnError") {
  Array leaked;
  auto g = makeGraph(
      [&](const std::vector<Array>& xs) {
        leaked = xs[0] * 2.0;
        return std::vector<Array>{leaked};
      },
      {Aval{Shape{3}, DType::F32}});
  REQUIRE(g.ok());
  auto r = capture([&] { return leaked + Array::ones({3}); });
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("escaped") != std::string::npos, r.error().message.c_str());
}

TEST_CASE("capturesConstantsAndRecordsProvenance") {
  Array w = Array::ones({64, 64});  // large: captured as an input, not inlined
  auto g = makeGraph(
      [&](const std::vector<Array>& xs) {
        ModuleScope scope("encoder");
        ModuleScope inner("proj");
        return std::vector<Array>{matmul(xs[0], w) * 3.0};
      },
      {Aval{Shape{2, 64}, DType::F32}}, "proj");
  REQUIRE(g.ok());
  TSR_COMPARE(g->consts.size(), size_t(1));
  TSR_COMPARE(g->numArgs(), 1);
  TSR_COMPARE(g->graph.inputs().size(), size_t(2));
  const ir::Node* dot = nullptr;
  for (const auto& n : g->graph.nodes())
    if (n.op == ir::OpCode::DotGeneral) dot = &n;
  REQUIRE(dot);
  TSR_COMPARE(dot->prov.modulePath, std::string("encoder.proj"));
  REQUIRE_MESSAGE(dot->prov.file.find("test_jit.cpp") != std::string::npos, dot->prov.file.c_str());
  REQUIRE(dot->prov.line > 0);
  REQUIRE(ir::verify(g->graph, ops::registry()).ok());
  // The closed graph evaluates to the eager result.
  auto out = evalGraph(*g, {Array::ones({2, 64})});
  REQUIRE(out.ok());
  TSR_COMPARE((*out)[0].toDoubles()[0], 64.0 * 3.0);
}

TEST_CASE("jitInsideTraceInlines") {
  Jit inner = jit([](const std::vector<Array>& xs) { return std::vector<Array>{exp(xs[0])}; }, "inner");
  auto g = makeGraph(
      [&](const std::vector<Array>& xs) {
        auto r = inner({xs[0]});
        if (!r.ok()) raise(r.takeError());
        return std::vector<Array>{(*r)[0] + 1.0};
      },
      {Aval{Shape{3}, DType::F32}});
  REQUIRE(g.ok());
  TSR_COMPARE(g->graph.count(ir::OpCode::Exp), 1);
}
