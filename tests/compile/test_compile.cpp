// The backend registry (engine/runtime/executable.h) and the compile sequence (engine/compile/compile.h): a
// backend is reached by name only, jit compiles with whichever backend is registered under its device, and the
// CPU backend reached through the registry is, bit for bit, the CPU executable jit compiled before it existed.
#include "tests/check.h"

#include <atomic>
#include <cmath>
#include <cstring>

#include "engine/backends/cpu/executable.h"
#include "engine/compile/compile.h"
#include "engine/compile/jit.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/runtime/executable.h"
#include "engine/runtime/interpreter.h"
#include "engine/transform/api.h"

using namespace tsr;

namespace {

// A backend that runs graphs with the reference interpreter and counts what it is asked to do.
struct Counts {
  std::atomic<int> compiles{0}, runs{0};
  std::string lastName;
};

class InterpretingExecutable final : public runtime::Executable {
 public:
  InterpretingExecutable(ir::Graph g, Counts* counts) : m_graph(std::move(g)), m_counts(counts) {}
  Result<std::vector<runtime::BufferPtr>> run(std::span<const runtime::BufferPtr> inputs,
                                              const std::vector<bool>&) override {
    ++m_counts->runs;
    return runtime::interpret(m_graph, ops::registry(), inputs);
  }
  std::string summary() const override { return ", interpreted by the test backend"; }

 private:
  ir::Graph m_graph;
  Counts* m_counts;
};

class CountingBackend final : public runtime::Backend {
 public:
  CountingBackend(std::string name, Counts* counts) : m_name(std::move(name)), m_counts(counts) {}
  std::string name() const override { return m_name; }
  Result<std::unique_ptr<runtime::Executable>> compile(const ir::Graph& g, const ir::OpRegistry&,
                                                       const runtime::CompileOptions& options) override {
    ++m_counts->compiles;
    m_counts->lastName = options.name;
    return std::unique_ptr<runtime::Executable>(std::make_unique<InterpretingExecutable>(g, m_counts));
  }

 private:
  std::string m_name;
  Counts* m_counts;
};

// The test backend's counts; the first call registers the backend under "counting".
Counts& testBackendCounts() {
  static Counts c;
  static const bool registered = runtime::backends().add(std::make_unique<CountingBackend>("counting", &c));
  (void)registered;
  return c;
}

// x * 2 + exp(x), written out by hand for the reference.
std::vector<float> expected(const std::vector<float>& x) {
  std::vector<float> y;
  for (float v : x) y.push_back(v * 2.0f + std::exp(v));
  return y;
}

}  // namespace

TEST_CASE("registryFindsByNameAndKeepsTheFirstOfAName") {
  runtime::BackendRegistry r;
  Counts a, b;
  REQUIRE(r.find("x") == nullptr);
  REQUIRE(r.add(std::make_unique<CountingBackend>("x", &a)));
  REQUIRE(!r.add(std::make_unique<CountingBackend>("x", &b)));
  REQUIRE(r.add(std::make_unique<CountingBackend>("y", &b)));
  TSR_COMPARE(r.names(), (std::vector<std::string>{"x", "y"}));
  REQUIRE(r.find("x") != nullptr);
  ir::Graph g;
  REQUIRE(r.find("x")->compile(g, ops::registry(), {}).ok());
  TSR_COMPARE(a.compiles.load(), 1);  // the first "x", not the refused one
  TSR_COMPARE(b.compiles.load(), 0);
}

TEST_CASE("compileOnAnUnregisteredBackendNamesItAndTheRegisteredOnes") {
  ir::Graph g;
  auto r = runtime::compileOn("nowhere", g, ops::registry(), {});
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("no 'nowhere' backend is registered") != std::string::npos,
                  r.error().message.c_str());
  REQUIRE_MESSAGE(r.error().message.find("cpu") != std::string::npos, r.error().message.c_str());
}

TEST_CASE("jitCompilesWithTheBackendRegisteredUnderItsDevice") {
  Counts& c = testBackendCounts();
  const int compiles0 = c.compiles, runs0 = c.runs;
  Jit f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] * 2.0 + exp(xs[0])}; }, "twice_plus_exp");
  f.setDevice("counting");
  std::vector<float> xv = {-1.5f, 0.0f, 0.25f, 3.0f};
  Array x = Array::fromVector(xv, Shape({4}));
  for (int call = 0; call < 2; ++call) {
    auto y = f({x});
    REQUIRE_MESSAGE(y.ok(), y.error().message);
    std::vector<float> got = (*y)[0].toFloats(), want = expected(xv);
    for (size_t i = 0; i < want.size(); ++i) TSR_COMPARE(got[i], want[i]);
  }
  TSR_COMPARE(c.compiles - compiles0, 1);  // compiled once, cached
  TSR_COMPARE(c.runs - runs0, 2);
  TSR_COMPARE(c.lastName, std::string("twice_plus_exp"));
}

TEST_CASE("unknownDeviceListsTheRegisteredBackends") {
  testBackendCounts();  // registers "counting"
  Jit f = jit([](const std::vector<Array>& xs) { return std::vector<Array>{xs[0] + 1.0}; }, "plus_one");
  f.setDevice("abacus");
  auto y = f({Array::fromVector(std::vector<float>{1, 2}, Shape({2}))});
  REQUIRE(!y.ok());
  const std::string& m = y.error().message;
  REQUIRE_MESSAGE(m.find("plus_one: unknown device 'abacus'") != std::string::npos, m.c_str());
  REQUIRE_MESSAGE((m.find("registered: cpu") != std::string::npos && m.find("counting") != std::string::npos),
                  m.c_str());
}

// The "cpu" backend reached by name gives bit for bit what the CPU executable compiled directly (fusion plan,
// then cpu::Executable::compile, as jit did before the registry) gives, and agrees with the reference
// interpreter to rounding (fused kernels use vectorised tanh).
TEST_CASE("cpuBackendThroughTheRegistryIsTheCpuExecutable") {
  const std::vector<Aval> avals = {Aval{Shape({8, 16}), DType::F32}, Aval{Shape({16, 4}), DType::F32},
                                   Aval{Shape({4}), DType::F32}};
  auto cg = makeGraph(
      [](const std::vector<Array>& xs) {
        Array h = tanh(matmul(xs[0], xs[1]) + xs[2]);
        return std::vector<Array>{h, sum(h * h, {1})};
      },
      avals, "mlp");
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  REQUIRE(compile::optimize(cg->graph).ok());
  compile::Options o;
  o.name = "mlp";
  o.native = false;
  auto viaRegistry = compile::compileForDevice(cg->graph, o);
  REQUIRE_MESSAGE(viaRegistry.ok(), viaRegistry.error().message);
  auto plan = passes::planFusion(cg->graph, ops::registry());
  REQUIRE(plan.ok());
  cpu::CompileOptions co;
  co.name = "mlp";
  auto direct = cpu::Executable::compile(cg->graph, ops::registry(), *plan, co);
  REQUIRE(direct.ok());
  REQUIRE(dynamic_cast<const cpu::Executable*>(viaRegistry->get()) != nullptr);
  TSR_COMPARE(static_cast<const cpu::Executable&>(**viaRegistry).describe(), (*direct)->describe());

  std::vector<runtime::BufferPtr> in;
  for (const Aval& a : avals) {
    std::vector<float> v(static_cast<size_t>(a.shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(a.shape.rank()));
    in.push_back(Array::fromVector(v, a.shape).buffer());
  }
  auto got = (*viaRegistry)->run(in);
  auto same = (*direct)->run(in);
  auto ref = runtime::interpret(cg->graph, ops::registry(), in);
  REQUIRE((got.ok() && same.ok() && ref.ok()));
  TSR_COMPARE(got->size(), size_t{2});
  for (size_t i = 0; i < got->size(); ++i) {
    const auto n = static_cast<size_t>((*got)[i]->size());
    TSR_COMPARE(n, static_cast<size_t>((*same)[i]->size()));
    REQUIRE_MESSAGE(std::memcmp((*got)[i]->data(), (*same)[i]->data(), n) == 0, "output " << i << " differs");
    const auto* g = static_cast<const float*>((*got)[i]->data());
    const auto* r = static_cast<const float*>((*ref)[i]->data());
    for (size_t k = 0; k < n / sizeof(float); ++k)
      REQUIRE_MESSAGE(std::abs(g[k] - r[k]) <= 1e-5f * (1.0f + std::abs(r[k])), "output " << i << "[" << k << "]");
  }
}
