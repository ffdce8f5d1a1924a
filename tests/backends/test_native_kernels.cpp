// Native CPU kernels (engine/backends/cpu/native_codegen.h, native_compiler.h): every fused loop the backend
// makes native must give the interpreter's bits, and the interpreter's results are themselves checked against
// the conformance cases' independent references. Kernels really go through the host C++ compiler (the disk
// cache is off).
#include "tests/check.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/core/env_options.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/project/project.h"
#include "engine/train/bench.h"
#include "tests/ops/harness.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Result<std::unique_ptr<cpu::Executable>> compileGraph(const ir::Graph& g, bool native, bool bf16Excess = true) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry()));
  cpu::CompileOptions o;
  o.native = native;
  o.bf16ExcessPrecision = bf16Excess;
  return cpu::Executable::compile(g, ops::registry(), plan, o);
}

// Runs an executable on host tensors; its outputs as host tensors.
Result<std::vector<HostTensor>> run(cpu::Executable& exe, const std::vector<HostTensor>& inputs) {
  std::vector<runtime::BufferPtr> in;
  for (const auto& t : inputs) in.push_back(toBuffer(t));
  TSR_ASSIGN(auto out, exe.run(in));
  std::vector<HostTensor> r;
  for (size_t i = 0; i < out.size(); ++i) r.push_back(fromBuffer(out[i], exe.graph().aval(exe.graph().outputs()[i])));
  return r;
}

// "" when every output has the same bytes, else the first difference.
std::string sameBits(const std::vector<HostTensor>& a, const std::vector<HostTensor>& b) {
  if (a.size() != b.size()) return "different output counts";
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bytes != b[i].bytes) {
      std::string where = compareTensors(a[i], b[i], 0, 0);
      return fmt::format("output {} differs{}", i, where.empty() ? " (in NaN payload or the sign of zero)" : ": " + where);
    }
  return "";
}

HostTensor randomHost(const Aval& a, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(a);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (a.dtype == DType::F32) {
      float v = nd(rng);
      std::memcpy(t.bytes.data() + i * 4, &v, 4);
    } else {
      t.bytes[static_cast<size_t>(i)] = rng() & 1;
    }
  }
  return t;
}

}  // namespace

// Every test case starts without the disk cache, and with native code wanted but not compiled at once: the
// tests compile all their executables' kernels in a few translation units, then fill each executable in.
struct NativeAsync {
  NativeAsync() {
    setenv("TESSERA_KERNEL_CACHE", "off", 1);
    cpu::setNativeMode(cpu::NativeMode::Async);
  }
};

// Every conformance case as a one-node graph, its operands fed directly and (rank 2) operand 0 through a
// transpose (strided reads): the native kernel against the interpreter's bits and the case's reference.
TEST_CASE_FIXTURE(NativeAsync, "opCasesMatchInterpreterBitForBit") {
  const auto& reg = ops::registry();
  struct Built {
    const OpCase* c;
    bool transposed;
    std::unique_ptr<cpu::Executable> native, interpreted;
  };
  std::vector<Built> built;
  std::vector<OpCase> cases = allCases();
  std::vector<cpu::NativeSource> all;
  std::set<std::string> ops, symbols;
  for (const OpCase& c : cases) {
    for (bool transposed : {false, true}) {
      if (transposed && (c.inputs.empty() || c.inputs[0].aval.rank() != 2)) continue;
      auto g = caseGraph(c, transposed);
      if (!g.ok()) continue;  // an op that takes no graph node this way (the conformance test checks that)
      auto native = compileGraph(*g, true);
      REQUIRE_MESSAGE(native.ok(), (c.label + ": " + (native.ok() ? "" : native.error().message)).c_str());
      if ((*native)->nativeKernels() == 0) continue;
      auto interpreted = compileGraph(*g, false);
      REQUIRE(interpreted.ok());
      for (const auto& s : (*native)->nativeSet()->sources())
        if (symbols.insert(s.symbol).second) all.push_back(s);
      ops.insert(reg.get(c.op).name);
      built.push_back({&c, transposed, std::move(*native), std::move(*interpreted)});
    }
  }
  REQUIRE(built.size() > 100);
  // One compile for every distinct kernel, then each executable takes its functions from what is loaded.
  cpu::NativeKernelSet everything(all);
  Status st = cpu::compileNative(everything);
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  for (size_t i = 0; i < everything.size(); ++i) REQUIRE(everything.get(i) != nullptr);
  int compared = 0;
  for (auto& b : built) {
    REQUIRE(cpu::compileNative(*b.native->nativeSet()).ok());
    TSR_COMPARE(b.native->nativeKernelsReady(), b.native->nativeKernels());
    std::vector<HostTensor> inputs = b.c->inputs;
    if (b.transposed) inputs[0] = transposed(inputs[0]);
    auto got = run(*b.native, inputs);
    auto want = run(*b.interpreted, inputs);
    const std::string label = b.c->label + (b.transposed ? " (transposed input)" : "");
    REQUIRE_MESSAGE((got.ok() && want.ok()), label.c_str());
    std::string diff = sameBits(*got, *want);
    REQUIRE_MESSAGE(diff.empty(), (label + ": native and interpreted " + diff).c_str());
    std::vector<HostTensor> ref = b.c->reference(b.c->inputs);
    std::vector<HostTensor> canonical = *got;
    if (b.c->canonical) {  // signs and completions in one form on both sides (harness.h)
      b.c->canonical(canonical);
      b.c->canonical(ref);
    }
    for (size_t i = 0; i < ref.size() && i < canonical.size(); ++i) {
      flushSubnormals(ref[i]);
      std::string err = compareWithReference(canonical[i], ref[i], *b.c);
      REQUIRE_MESSAGE(err.empty(), label, ": ", err);
    }
    ++compared;
  }
  // The ops the interpreter fuses, each seen native at least once.
  for (const char* op : {"add", "sub", "mul", "div", "max", "min", "neg", "abs", "sign", "exp", "log", "tanh",
                         "logistic", "sqrt", "rsqrt", "floor", "ceil", "round", "select", "clamp", "eq", "lt",
                         "pow", "rem", "erf", "is_finite", "and", "or", "not", "convert"})
    REQUIRE_MESSAGE(ops.count(op), "no native kernel for " << op);
  MESSAGE(compared << " graphs compared, " << all.size() << " distinct native kernels, " << ops.size() << " ops");
}

// The shapes a training step gives loops: a row broadcast (bias), a column broadcast (per-row scale), a scalar,
// bool inputs and outputs, a tail shorter than a vector, several outputs, one output written into a donated
// input. Random inputs; native against interpreted, bit for bit.
TEST_CASE_FIXTURE(NativeAsync, "broadcastsTailsAndOutputs") {
  const auto& reg = ops::registry();
  for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{37}, int64_t{1030}}) {
    ir::Graph g;
    const int64_t rows = 5;
    ir::ValueId x = g.addInput(Aval{Shape{rows, cols}, DType::F32});
    ir::ValueId bias = g.addInput(Aval{Shape{cols}, DType::F32});
    ir::ValueId scale = g.addInput(Aval{Shape{rows, 1}, DType::F32});
    ir::ValueId s = g.addInput(Aval{Shape{}, DType::F32});
    ir::ValueId m = g.addInput(Aval{Shape{rows, cols}, DType::Bool});
    auto node = [&](ir::OpCode op, std::vector<ir::ValueId> in, ir::Attrs attrs = ir::NoAttrs{}) {
      auto r = g.addNode(reg, op, in, attrs);
      if (!r.ok()) TSR_FATAL(r.error().message);
      return (*r)[0];
    };
    auto bcast = [&](ir::ValueId v, std::vector<int64_t> dims) {
      return node(ir::OpCode::BroadcastInDim, {v}, ir::BroadcastInDimAttrs{{rows, cols}, std::move(dims)});
    };
    ir::ValueId y = node(ir::OpCode::Add, {x, bcast(bias, {1})});
    y = node(ir::OpCode::Mul, {y, node(ir::OpCode::BroadcastInDim, {scale}, ir::BroadcastInDimAttrs{{rows, cols}, {0, 1}})});
    y = node(ir::OpCode::Sub, {y, bcast(s, {})});
    ir::ValueId t = node(ir::OpCode::Tanh, {y});
    ir::ValueId gt = node(ir::OpCode::Gt, {t, bcast(s, {})});
    ir::ValueId sel = node(ir::OpCode::Select, {m, node(ir::OpCode::Exp, {t}), node(ir::OpCode::Logistic, {y})});
    ir::ValueId both = node(ir::OpCode::And, {gt, m});
    g.setOutputs({sel, both, t});
    auto native = compileGraph(g, true);
    auto interpreted = compileGraph(g, false);
    REQUIRE((native.ok() && interpreted.ok()));
    REQUIRE((*native)->nativeKernels() > 0);
    REQUIRE(cpu::compileNative(*(*native)->nativeSet()).ok());
    TSR_COMPARE((*native)->nativeKernelsReady(), (*native)->nativeKernels());
    std::mt19937 rng(static_cast<unsigned>(cols));
    std::vector<HostTensor> inputs;
    for (ir::ValueId v : g.inputs()) inputs.push_back(randomHost(g.aval(v), rng));
    auto got = run(**native, inputs);
    auto want = run(**interpreted, inputs);
    REQUIRE((got.ok() && want.ok()));
    std::string diff = sameBits(*got, *want);
    REQUIRE_MESSAGE(diff.empty(), "cols " << cols << ": " << diff);
    // And by hand, for one element: the first row's last column.
    const float* xv = reinterpret_cast<const float*>(inputs[0].bytes.data());
    const float* bv = reinterpret_cast<const float*>(inputs[1].bytes.data());
    const float* sv = reinterpret_cast<const float*>(inputs[2].bytes.data());
    const float s0 = *reinterpret_cast<const float*>(inputs[3].bytes.data());
    const size_t e = static_cast<size_t>(cols - 1);
    float yy = (xv[e] + bv[e]) * sv[0] - s0;
    float tt = reinterpret_cast<const float*>((*got)[2].bytes.data())[e];
    REQUIRE(std::fabs(tt - std::tanh(yy)) <= 1e-6f * (1 + std::fabs(yy)));
  }
}

// bf16 chains in one loop kernel, with c a quarter of x's spacing (x in [1, 2), c = 2^-9): d = (x + c) - x and
// (x - c) < x. One by one, x + c and x - c round back to x: d = 0 and the comparison is false. Under excess
// precision x + c stays f32 inside the kernel, so d = c (exact in f32, and a bf16), while the comparison reads
// x - c rounded, as the value stored would be: false. Native and interpreted alike; through the CPU backend,
// TESSERA_BF16_EXCESS_PRECISION picks the rule.
TEST_CASE_FIXTURE(NativeAsync, "bf16ChainsRoundWhereTheyLeaveTheKernel") {
  const auto& reg = ops::registry();
  const int64_t rows = 3, cols = 37;  // a tail shorter than a vector
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{Shape{rows, cols}, DType::BF16});
  ir::ValueId c = g.addInput(Aval{Shape{}, DType::BF16});
  auto node = [&](ir::OpCode op, std::vector<ir::ValueId> in, ir::Attrs attrs = ir::NoAttrs{}) {
    auto r = g.addNode(reg, op, in, attrs);
    if (!r.ok()) TSR_FATAL(r.error().message);
    return (*r)[0];
  };
  ir::ValueId cs = node(ir::OpCode::BroadcastInDim, {c}, ir::BroadcastInDimAttrs{{rows, cols}, {}});
  ir::ValueId a = node(ir::OpCode::Add, {x, cs});
  ir::ValueId b = node(ir::OpCode::Sub, {x, cs});
  g.setOutputs({node(ir::OpCode::Sub, {a, x}), node(ir::OpCode::Lt, {b, x})});
  std::vector<HostTensor> inputs{HostTensor::zeros(g.aval(x)), HostTensor::zeros(g.aval(c))};
  auto setBf16 = [](HostTensor& t, int64_t i, float v) {
    const uint16_t bits = bf16(v).bits;
    std::memcpy(t.bytes.data() + i * 2, &bits, 2);
  };
  for (int64_t i = 0; i < rows * cols; ++i) setBf16(inputs[0], i, 1.0f + static_cast<float>(i % 128) / 128.0f);
  const float quarterUlp = 1.0f / 512.0f;
  setBf16(inputs[1], 0, quarterUlp);
  auto check = [&](const std::vector<HostTensor>& out, bool excess, const std::string& how) {
    REQUIRE(out.size() == 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint16_t bits = 0;
      std::memcpy(&bits, out[0].bytes.data() + i * 2, 2);
      const float d = bf16BitsToFloat(bits);
      REQUIRE_MESSAGE(d == (excess ? quarterUlp : 0.0f), how << ": (x + c) - x at " << i << " is " << d);
      REQUIRE_MESSAGE(out[1].bytes[static_cast<size_t>(i)] == 0, how << ": x - c < x at " << i);
    }
  };
  for (bool excess : {true, false})
    for (bool native : {true, false}) {
      auto exe = compileGraph(g, native, excess);
      REQUIRE_MESSAGE(exe.ok(), exe.error().message);
      if (native) {
        REQUIRE(cpu::compileNative(*(*exe)->nativeSet()).ok());
        TSR_COMPARE((*exe)->nativeKernelsReady(), static_cast<int64_t>((*exe)->kernels().size()));
      }
      auto out = run(**exe, inputs);
      REQUIRE_MESSAGE(out.ok(), out.error().message);
      check(*out, excess, fmt::format("excess {} native {}", excess, native));
    }
  for (const char* setting : {"off", "on"}) {
    setenv("TESSERA_BF16_EXCESS_PRECISION", setting, 1);
    reloadEnvOptions();
    auto exe = runtime::compileOn("cpu", g, reg, runtime::CompileOptions{});
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    std::vector<runtime::BufferPtr> in{toBuffer(inputs[0]), toBuffer(inputs[1])};
    auto out = (*exe)->run(in);
    REQUIRE_MESSAGE(out.ok(), out.error().message);
    check({fromBuffer((*out)[0], g.aval(g.outputs()[0])), fromBuffer((*out)[1], g.aval(g.outputs()[1]))},
          std::string(setting) == "on", std::string("TESSERA_BF16_EXCESS_PRECISION=") + setting);
  }
  unsetenv("TESSERA_BF16_EXCESS_PRECISION");
  reloadEnvOptions();
}

// Reductions of every layout the backend splits: rows in several chunks of several tiles with tails, one long
// row in many chunks, columns with and without a leading kept dim; sums with a prologue, max and min. Native
// against interpreted, bit for bit, and against double-precision sums and exact extremes computed here.
TEST_CASE_FIXTURE(NativeAsync, "reductionsMatchInterpreter") {
  struct Row {
    const char* name;
    std::vector<int64_t> shape;
    int axis;
  };
  const Row rows[] = {
      {"rows [3,5000]", {3, 5000}, 1},
      {"one long row [300001]", {1, 300001}, 1},
      {"columns [2,3000,37]", {2, 3000, 37}, 1},
      {"columns [4,1030]", {4, 1030}, 0},
  };
  for (const Row& row : rows) {
    SUBCASE(row.name) {
      const std::vector<int64_t>& dims = row.shape;
      const int axis = row.axis;
      const auto& reg = ops::registry();
      ir::Graph g;
      ir::ValueId x = g.addInput(Aval{Shape(dims), DType::F32});
      auto node = [&](ir::OpCode op, std::vector<ir::ValueId> in, ir::Attrs attrs = ir::NoAttrs{}) {
        auto r = g.addNode(reg, op, in, attrs);
        if (!r.ok()) TSR_FATAL(r.error().message);
        return (*r)[0];
      };
      ir::ValueId sq = node(ir::OpCode::Mul, {x, x});
      ir::ValueId sum = node(ir::OpCode::ReduceSum, {sq}, ir::ReduceAttrs{{axis}});
      ir::ValueId mx = node(ir::OpCode::ReduceMax, {x}, ir::ReduceAttrs{{axis}});
      ir::ValueId mn = node(ir::OpCode::ReduceMin, {node(ir::OpCode::Neg, {x})}, ir::ReduceAttrs{{axis}});
      g.setOutputs({sum, mx, mn});
      auto native = compileGraph(g, true);
      auto interpreted = compileGraph(g, false);
      REQUIRE((native.ok() && interpreted.ok()));
      int reductions = 0;
      for (const auto& k : (*native)->loweredKernels())
        if (k.info.kind == passes::GroupKind::Reduction) {
          ++reductions;
          REQUIRE_MESSAGE(k.native >= 0, k.info.name.c_str());
        }
      REQUIRE(reductions > 0);
      REQUIRE(cpu::compileNative(*(*native)->nativeSet()).ok());
      TSR_COMPARE((*native)->nativeKernelsReady(), (*native)->nativeKernels());
      std::mt19937 rng(7);
      HostTensor in = randomHost(g.aval(x), rng);
      auto got = run(**native, {in});
      auto want = run(**interpreted, {in});
      REQUIRE((got.ok() && want.ok()));
      std::string diff = sameBits(*got, *want);
      REQUIRE_MESSAGE(diff.empty(), diff.c_str());
      // By hand: strides of the reduced axis and of the kept positions.
      const float* xv = reinterpret_cast<const float*>(in.bytes.data());
      int64_t before = 1, after = 1;
      for (int d = 0; d < axis; ++d) before *= dims[static_cast<size_t>(d)];
      for (size_t d = static_cast<size_t>(axis) + 1; d < dims.size(); ++d) after *= dims[d];
      const int64_t r = dims[static_cast<size_t>(axis)];
      for (int64_t o = 0; o < before * after; ++o) {
        const int64_t b = o / after, c = o % after;
        double s = 0;
        float hi = -INFINITY, lo = INFINITY;
        for (int64_t i = 0; i < r; ++i) {
          float v = xv[(b * r + i) * after + c];
          s += double(v) * double(v);
          hi = std::max(hi, v);
          lo = std::min(lo, -v);
        }
        auto at = [&](int out) { return reinterpret_cast<const float*>((*got)[static_cast<size_t>(out)].bytes.data())[o]; };
        REQUIRE_MESSAGE(std::fabs(at(0) - s) <= 1e-5 * s, "sum " << o << ": " << at(0) << " vs " << s);
        TSR_COMPARE(at(1), hi);
        TSR_COMPARE(at(2), lo);
      }
    }
  }
}

// Training steps of three sample models, native from the first step, against the interpreter: the same losses
// to the bit (the engine's kernels and the native ones round alike).
TEST_CASE_FIXTURE(NativeAsync, "trainingStepsMatchInterpreter") {
  struct Row {
    const char* project;
    int batch;
    int seq;
    const char* compute = "f32";  // bf16: under autocast, its loops reading, rounding and writing bf16
  };
  const Row rows[] = {
      {"gpt2_mini", 2, 32},
      {"mlp_sharding", 16, 0},
      {"vit_tiny", 2, 0},
      {"gpt2_mini", 2, 32, "bf16"},
  };
  for (const Row& row : rows) {
    const std::string name = std::string(row.project) + " " + row.compute;
    SUBCASE(name.c_str()) {
      const char* project = row.project;
      auto p = project::loadProject(std::string(TSR_SOURCE_DIR) + "/sample_projects/" + project);
      REQUIRE_MESSAGE(p.ok(), p.error().message);
      p->precision = row.compute;
      train::BenchOptions o;
      o.batch = row.batch;
      o.seq = row.seq;
      o.steps = 3;
      std::map<bool, train::BenchReport> reports;
      for (bool native : {false, true}) {
        cpu::setNativeMode(native ? cpu::NativeMode::Sync : cpu::NativeMode::Off);
        auto r = train::benchTrainingStep(*p, o);
        REQUIRE_MESSAGE(r.ok(), r.error().message);
        reports[native] = *r;
      }
      cpu::setNativeMode(cpu::NativeMode::Async);
      REQUIRE(cpu::nativeStats().kernels > 0);
      REQUIRE_MESSAGE(cpu::nativeStats().error.empty(), cpu::nativeStats().error.c_str());
      TSR_COMPARE(reports[true].firstLoss, reports[false].firstLoss);
      TSR_COMPARE(reports[true].lastLoss, reports[false].lastLoss);
      REQUIRE(reports[true].lastLoss < reports[true].firstLoss);
    }
  }
}

// The disk cache keeps the most recently used libraries: 520 old ones in it, one new compile, and the 9 oldest
// are gone while the newest old ones and the new one stay. A library loaded from the cache counts as used.
TEST_CASE_FIXTURE(NativeAsync, "cacheKeepsRecentLibraries") {
  TempDir dir;
  REQUIRE(dir.isValid());
  setenv("TESSERA_KERNEL_CACHE", dir.path().c_str(), 1);
  const std::filesystem::path cpuDir = std::filesystem::path(dir.path()) / "cpu";
  std::filesystem::create_directories(cpuDir);
  const auto old = std::filesystem::file_time_type::clock::now() - std::chrono::hours(24 * 400);
  for (int i = 0; i < 520; ++i) {
    auto f = cpuDir / fmt::format("tsr_cpu_{:016x}.so", i);
    std::ofstream(f) << "not a library";
    std::filesystem::last_write_time(f, old + std::chrono::minutes(i));
  }
  const auto& reg = ops::registry();
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{Shape{7, 5, 3}, DType::F32});
  auto y = g.addNode(reg, ir::OpCode::Sub, {x, x}, ir::NoAttrs{});
  REQUIRE(y.ok());
  g.setOutputs(*y);
  auto exe = compileGraph(g, true);
  REQUIRE(exe.ok());
  Status st = cpu::compileNative(*(*exe)->nativeSet());
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  int libs = 0;
  for (const auto& e : std::filesystem::directory_iterator(cpuDir)) libs += e.path().extension() == ".so";
  TSR_COMPARE(libs, 512);
  REQUIRE(!std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 8)));
  REQUIRE(std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 9)));
  REQUIRE(std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 519)));
  setenv("TESSERA_KERNEL_CACHE", "off", 1);
}

// Without a working compiler the kernels stay on the interpreter, the results are right, and the reason is
// kept. (Last: a missing compiler turns native code off for the rest of the process.)
TEST_CASE_FIXTURE(NativeAsync, "missingCompilerFallsBackToInterpreter") {
  setenv("TESSERA_CXX", "/nonexistent/tessera-test-c++", 1);
  const auto& reg = ops::registry();
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{Shape{3, 11, 13}, DType::F32});
  auto sq = g.addNode(reg, ir::OpCode::Mul, {x, x}, ir::NoAttrs{});
  REQUIRE(sq.ok());
  auto y = g.addNode(reg, ir::OpCode::Add, {(*sq)[0], x}, ir::NoAttrs{});
  REQUIRE(y.ok());
  g.setOutputs(*y);
  auto exe = compileGraph(g, true);
  REQUIRE(exe.ok());
  Status st = cpu::compileNative(*(*exe)->nativeSet());
  REQUIRE(!st.ok());
  REQUIRE_MESSAGE(st.error().message.find("/nonexistent/tessera-test-c++") != std::string::npos,
                  st.error().message.c_str());
  TSR_COMPARE((*exe)->nativeKernelsReady(), int64_t{0});
  HostTensor in = HostTensor::zeros(g.aval(x));
  for (int64_t i = 0; i < in.numel(); ++i) {
    float v = static_cast<float>(i % 7) - 3.0f;
    std::memcpy(in.bytes.data() + i * 4, &v, 4);
  }
  auto out = run(**exe, {in});
  REQUIRE(out.ok());
  for (int64_t i = 0; i < in.numel(); ++i) {
    float v = static_cast<float>(i % 7) - 3.0f, got;
    std::memcpy(&got, (*out)[0].bytes.data() + i * 4, 4);
    TSR_COMPARE(got, v * v + v);
  }
  REQUIRE(cpu::nativeStats().error.find("/nonexistent/tessera-test-c++") != std::string::npos);
  unsetenv("TESSERA_CXX");
}
