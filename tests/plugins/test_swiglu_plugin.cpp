// The swiglu example plugin's op through the same harnesses as the core ops (tests/ops: conformance against a
// naive reference, gradients against finite differences, vmap against per-example runs), jit against eager, its
// rules against the rule-table check; and its model family gpt2_swiglu: a project trains and its loss falls.
#include "tests/check.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/data/file_io.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_table.h"
#include "engine/passes/fusion.h"
#include "engine/plugin/loader.h"
#include "engine/project/project.h"
#include "engine/sharding/propagation.h"
#include "engine/train/run.h"
#include "engine/transform/api.h"
#include "engine/compile/jit.h"
#include "tests/ops/grad_check.h"
#include "tests/ops/harness.h"
#include "tests/ops/vmap_check.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::test;
namespace fs = std::filesystem;

namespace {

// swiglu(g, u) = g / (1 + e^-g) * u, in double, element by element.
std::vector<HostTensor> reference(const std::vector<HostTensor>& in) {
  HostTensor y = HostTensor::zeros(in[0].aval);
  for (int64_t i = 0; i < y.numel(); ++i) {
    double g = in[0].get(i), u = in[1].get(i);
    y.set(i, g / (1.0 + std::exp(-g)) * u);
  }
  return {y};
}

// Every edge shape, in f32, f64 and bf16, with gates over [-6, 6] (both tails of the sigmoid).
std::vector<OpCase> swigluCases(ir::OpCode code) {
  std::mt19937 rng(17);
  std::vector<OpCase> cases;
  for (DType t : {DType::F32, DType::F64, DType::BF16})
    for (const Shape& s : edgeShapes()) {
      Aval a{s, t};
      OpCase c;
      c.label = "swiglu " + a.toString();
      c.op = code;
      c.attrs = ir::NoAttrs{};
      c.inputs = {randomTensor(a, rng, -6, 6), randomTensor(a, rng, -2, 2)};
      c.reference = reference;
      cases.push_back(std::move(c));
    }
  return cases;
}

struct Loaded {
  ir::OpCode code;
  std::vector<OpCase> cases;
};

// The plugin, loaded once for the program, and its op's cases.
const Loaded& loaded() {
  static const Loaded l = [] {
    plugin::PluginRecord r = plugin::loadPlugin(std::string(TSR_PLUGIN_DIR) + "/swiglu.so");
    REQUIRE_MESSAGE(r.loaded, r.error);
    const ir::OpDef* def = ops::registry().find("swiglu");
    REQUIRE(def);
    return Loaded{def->code, swigluCases(def->code)};
  }();
  return l;
}

// Every test case has the plugin loaded and its op at hand.
struct SwigluPlugin {
  ir::OpCode m_code = loaded().code;
  const std::vector<OpCase>& m_cases = loaded().cases;
};

}  // namespace

TEST_CASE_FIXTURE(SwigluPlugin, "passesTheRuleTableCheck") {
  const ir::OpDef& def = ops::registry().get(m_code);
  REQUIRE(ops::checkOpRules(def).ok());
  REQUIRE((def.vjp && def.batch && def.shard && def.cost && def.cpu && !def.cudaSource.empty()));
  REQUIRE(def.loop.valid());
}

// Its loop lowering makes it fusible as a core op is: y = swiglu(g, u) * w + g is one loop kernel, and it gives
// the same bits interpreted and as a native kernel, within float rounding of the formula in double.
TEST_CASE_FIXTURE(SwigluPlugin, "fusesWithItsNeighbours") {
  const Aval a{Shape{3, 37}, DType::F32};
  ir::Graph graph;
  ir::ValueId gate = graph.addInput(a), up = graph.addInput(a), w = graph.addInput(a);
  auto s = graph.addNode(ops::registry(), m_code, {gate, up}, ir::NoAttrs{});
  REQUIRE(s.ok());
  auto m = graph.addNode(ops::registry(), ir::OpCode::Mul, {(*s)[0], w}, ir::NoAttrs{});
  REQUIRE(m.ok());
  auto y = graph.addNode(ops::registry(), ir::OpCode::Add, {(*m)[0], gate}, ir::NoAttrs{});
  REQUIRE(y.ok());
  graph.setOutputs(*y);
  auto plan = passes::planFusion(graph, ops::registry());
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  int loops = 0;
  for (const auto& gr : plan->groups)
    if (gr.kind == passes::GroupKind::Loop) {
      ++loops;
      TSR_COMPARE(gr.nodes.size(), size_t{3});
    }
  TSR_COMPARE(loops, 1);

  std::mt19937 rng(11);
  std::vector<HostTensor> inputs = {randomTensor(a, rng, -6, 6), randomTensor(a, rng), randomTensor(a, rng)};
  std::vector<std::vector<uint8_t>> results;
  for (bool native : {false, true}) {
    cpu::setNativeMode(native ? cpu::NativeMode::Sync : cpu::NativeMode::Off);
    cpu::CompileOptions o;
    o.native = native;
    auto exe = cpu::Executable::compile(graph, ops::registry(), *plan, o);
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    if (native)
      REQUIRE_MESSAGE((cpu::nativeStats().kernels > 0 && cpu::nativeStats().error.empty()),
                      cpu::nativeStats().error.c_str());
    std::vector<runtime::BufferPtr> in;
    for (const auto& t : inputs) in.push_back(toBuffer(t));
    auto out = (*exe)->run(in);
    REQUIRE_MESSAGE(out.ok(), out.error().message);
    HostTensor got = fromBuffer((*out)[0], a);
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double g = inputs[0].get(i), u = inputs[1].get(i), ww = inputs[2].get(i);
      const double want = g / (1.0 + std::exp(-g)) * u * ww + g;
      REQUIRE_MESSAGE(std::fabs(got.get(i) - want) <= 1e-5 * (1 + std::fabs(want)),
                      i << ": " << got.get(i) << " vs " << want);
    }
    results.push_back(got.bytes);
  }
  cpu::setNativeMode(cpu::NativeMode::Off);
  REQUIRE_MESSAGE(results[0] == results[1], "the native kernel differs from the interpreter");
}

TEST_CASE_FIXTURE(SwigluPlugin, "conformance") {
  int graphRuns = 0;
  std::vector<std::string> failures;
  for (const auto& c : m_cases)
    for (const auto& m : checkConformance(c, &graphRuns)) failures.push_back(m);
  const size_t shown = std::min<size_t>(10, failures.size());
  REQUIRE_MESSAGE(failures.empty(),
                  join({failures.begin(), failures.begin() + static_cast<std::ptrdiff_t>(shown)}, "\n"));
  REQUIRE(graphRuns >= static_cast<int>(m_cases.size()) * 2);
}

TEST_CASE_FIXTURE(SwigluPlugin, "gradientsMatchFiniteDifferences") {
  std::mt19937 rng(4321);
  GradReport report;
  for (const auto& c : m_cases) checkGradCase(c, report, rng);
  int failingOps = printFailures(report.failures);
  TSR_COMPARE(failingOps, 0);
  REQUIRE(report.checkedCases["swiglu"] >= static_cast<int>(m_cases.size()) - 2);
  REQUIRE(report.checkedElements["swiglu"] > 100);
}

TEST_CASE_FIXTURE(SwigluPlugin, "vmapMatchesPerExampleRuns") {
  std::vector<Failure> failures;
  int layouts = 0;
  for (const auto& c : m_cases)
    for (const Layout& l : layoutsFor(c)) {
      ++layouts;
      std::string diff = checkLayout(c, l);
      if (!diff.empty()) failures.push_back({"swiglu", c.label + " (" + l.name + ")", diff});
    }
  TSR_COMPARE(printFailures(failures), 0);
  REQUIRE(layouts > static_cast<int>(m_cases.size()) * 3);
}

// Under jit the op runs as its own kernel in the compiled CPU program, with the same numbers as eager.
TEST_CASE_FIXTURE(SwigluPlugin, "jitMatchesEager") {
  std::mt19937 rng(3);
  Aval a{Shape{3, 5, 7}, DType::F32};
  Array g = toArray(randomTensor(a, rng, -4, 4)), u = toArray(randomTensor(a, rng));
  auto f = [this](const std::vector<Array>& x) {
    return std::vector<Array>{bind1(m_code, {x[0], x[1]}, ir::NoAttrs{}, std::source_location::current()) * 2.0};
  };
  auto eager = capture([&] { return f({g, u}); });
  REQUIRE(eager.ok());
  Jit jitted = jit(f, "swiglu2");
  auto out = jitted({g, u});
  REQUIRE_MESSAGE(out.ok(), out.error().message);
  auto want = (*eager)[0].toDoubles(), got = (*out)[0].toDoubles();
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(got[i] - want[i]) <= 1e-6 * (1 + std::fabs(want[i])));
}

// Its sharding rule: a split of the gate's rows passes through to the result and back to `up`, as for a core
// elementwise op, with no collective.
TEST_CASE_FIXTURE(SwigluPlugin, "shardingPropagatesThroughIt") {
  ir::Graph g;
  ir::ValueId gate = g.addInput(Aval{Shape{8, 4}, DType::F32}), up = g.addInput(Aval{Shape{8, 4}, DType::F32});
  auto y = g.addNode(ops::registry(), m_code, {gate, up}, ir::NoAttrs{});
  REQUIRE(y.ok());
  g.setOutputs(*y);
  auto mesh = sharding::Mesh::create({2}, {"a"});
  REQUIRE(mesh.ok());
  auto spec = sharding::PartitionSpec::parse("a, None");
  REQUIRE(spec.ok());
  auto rows = sharding::TensorSharding::fromSpec(*mesh, *spec, Shape{8, 4});
  REQUIRE(rows.ok());
  sharding::ShardingAnnotations ann;
  ann.inputs = {*rows, std::nullopt};
  auto plan = sharding::propagateShardings(g, ops::registry(), *mesh, ann);
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  TSR_COMPARE(plan->values[static_cast<size_t>((*y)[0])].toString(*mesh), std::string("P('a', None)"));
  TSR_COMPARE(plan->values[static_cast<size_t>(up)].toString(*mesh), std::string("P('a', None)"));
}

// Wrong operands are errors that name the op and the shapes, never crashes.
TEST_CASE_FIXTURE(SwigluPlugin, "errorsNameTheOp") {
  auto r = capture([this] {
    return bind(m_code, {Array::zeros({2, 3}), Array::zeros({3, 2})}, ir::NoAttrs{}, std::source_location::current());
  });
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(
      (r.error().message.find("swiglu") != std::string::npos && r.error().message.find("[2,3]") != std::string::npos),
      r.error().message.c_str());
}

// The sample project's model family: the training step's graph holds one swiglu per layer forward, and the
// loss of the sample project's run falls well below its start (ln 512 = 6.2 at initialisation).
TEST_CASE_FIXTURE(SwigluPlugin, "gpt2SwigluTrainsAndItsLossFalls") {
  TempDir dir;
  fs::path root(dir.path());
  fs::path sample = fs::path(TSR_SOURCE_DIR) / "sample_projects";
  auto toml = data::readFile((sample / "gpt2_swiglu" / "project.toml").string());
  auto corpusFile = data::readFile((sample / "gpt2_mini" / "data" / "corpus.txt").string());
  REQUIRE((toml.ok() && corpusFile.ok()));
  std::string text = *toml;
  // The corpus's first 30 kB (a quicker tokenizer); the project's own 150 steps.
  std::string corpus = corpusFile->substr(0, 30000);
  std::ofstream(root / "corpus.txt") << corpus;
  auto replace = [&](const std::string& from, const std::string& to) {
    size_t at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, from.c_str());
    text.replace(at, from.size(), to);
  };
  replace("path = \"../gpt2_mini/data/corpus.txt\"", "path = \"corpus.txt\"");
  std::ofstream(root / "project.toml") << text;
  auto p = project::loadProject(root.string());
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  TSR_COMPARE(p->model.family, std::string("gpt2_swiglu"));
  TSR_COMPARE(p->model.config.integer("mlp_hidden"), int64_t(176));

  auto step = train::traceTrainingStep(*p);
  REQUIRE_MESSAGE(step.ok(), step.error().message);
  REQUIRE_MESSAGE(step->graph.count(m_code) >= p->model.config.integer("n_layer"), step->graph.count(m_code) << " swiglu nodes");

  auto s = train::runTraining(*p, {}, [](const train::RunEvent&) {});
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->steps, int64_t(150));
  MESSAGE("gpt2_swiglu: loss " << std::fixed << std::setprecision(3) << s->firstLoss << " -> " << s->lastLoss);
  REQUIRE(std::isfinite(s->lastLoss));
  // A 15% fall (about 1 nat) takes the model past uniform guessing; held-out text improves alike.
  REQUIRE_MESSAGE(s->lastLoss < s->firstLoss * 0.85, s->firstLoss << " -> " << s->lastLoss);
  REQUIRE_MESSAGE((s->lastValLoss > 0 && s->lastValLoss < s->firstLoss * 0.9),
                  "validation " << s->lastValLoss << ", first training loss " << s->firstLoss);
}
