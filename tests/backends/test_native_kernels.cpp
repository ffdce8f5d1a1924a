// Native CPU kernels (engine/backends/cpu/native_codegen.h, native_compiler.h): every fused loop the backend
// makes native must give the interpreter's bits, and the interpreter's results are themselves checked against
// the conformance cases' independent references. Kernels really go through the host C++ compiler (the disk
// cache is off).
#include <QtTest>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include <fmt/format.h>

#include "engine/backends/cpu/executable.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/project/project.h"
#include "engine/train/bench.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

Result<std::unique_ptr<cpu::Executable>> compileGraph(const ir::Graph& g, bool native) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry()));
  cpu::CompileOptions o;
  o.native = native;
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

// Executables run with subnormals flushed to zero (as XLA's CPU backend does); references are exact.
void flushSubnormals(HostTensor& t) {
  if (t.aval.dtype != DType::F32) return;
  for (int64_t i = 0; i < t.numel(); ++i) {
    float v;
    std::memcpy(&v, t.bytes.data() + i * 4, 4);
    if (std::fpclassify(v) == FP_SUBNORMAL) v = std::signbit(v) ? -0.0f : 0.0f;
    std::memcpy(t.bytes.data() + i * 4, &v, 4);
  }
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

class TestNativeKernels : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    qputenv("TESSERA_KERNEL_CACHE", "off");
    // Executables here are compiled with native code wanted but not compiled at once: the test compiles all
    // their kernels in a few translation units, then fills each executable in.
    cpu::setNativeMode(cpu::NativeMode::Async);
  }

  // Every conformance case as a one-node graph, its operands fed directly and (rank 2) operand 0 through a
  // transpose (strided reads): the native kernel against the interpreter's bits and the case's reference.
  void opCasesMatchInterpreterBitForBit() {
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
        QVERIFY2(native.ok(), (c.label + ": " + (native.ok() ? "" : native.error().message)).c_str());
        if ((*native)->nativeKernels() == 0) continue;
        auto interpreted = compileGraph(*g, false);
        QVERIFY(interpreted.ok());
        for (const auto& s : (*native)->nativeSet()->sources())
          if (symbols.insert(s.symbol).second) all.push_back(s);
        ops.insert(reg.get(c.op).name);
        built.push_back({&c, transposed, std::move(*native), std::move(*interpreted)});
      }
    }
    QVERIFY(built.size() > 100);
    // One compile for every distinct kernel, then each executable takes its functions from what is loaded.
    cpu::NativeKernelSet everything(all);
    Status st = cpu::compileNative(everything);
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
    for (size_t i = 0; i < everything.size(); ++i) QVERIFY(everything.get(i) != nullptr);
    int compared = 0;
    for (auto& b : built) {
      QVERIFY(cpu::compileNative(*b.native->nativeSet()).ok());
      QCOMPARE(b.native->nativeKernelsReady(), b.native->nativeKernels());
      std::vector<HostTensor> inputs = b.c->inputs;
      if (b.transposed) inputs[0] = transposed(inputs[0]);
      auto got = run(*b.native, inputs);
      auto want = run(*b.interpreted, inputs);
      const std::string label = b.c->label + (b.transposed ? " (transposed input)" : "");
      QVERIFY2(got.ok() && want.ok(), label.c_str());
      std::string diff = sameBits(*got, *want);
      QVERIFY2(diff.empty(), (label + ": native and interpreted " + diff).c_str());
      std::vector<HostTensor> ref = b.c->reference(b.c->inputs);
      for (size_t i = 0; i < ref.size() && i < got->size(); ++i) {
        flushSubnormals(ref[i]);
        std::string err = compareWithReference((*got)[i], ref[i], *b.c);
        QVERIFY2(err.empty(), (label + ": " + err).c_str());
      }
      ++compared;
    }
    // The ops the interpreter fuses, each seen native at least once.
    for (const char* op : {"add", "sub", "mul", "div", "max", "min", "neg", "abs", "sign", "exp", "log", "tanh",
                           "logistic", "sqrt", "rsqrt", "floor", "ceil", "round", "select", "clamp", "eq", "lt",
                           "pow", "rem", "erf", "is_finite", "and", "or", "not", "convert"})
      QVERIFY2(ops.count(op), qPrintable(QString("no native kernel for %1").arg(op)));
    qInfo("%d graphs compared, %zu distinct native kernels, %zu ops", compared, all.size(), ops.size());
  }

  // The shapes a training step gives loops: a row broadcast (bias), a column broadcast (per-row scale), a scalar,
  // bool inputs and outputs, a tail shorter than a vector, several outputs, one output written into a donated
  // input. Random inputs; native against interpreted, bit for bit.
  void broadcastsTailsAndOutputs() {
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
        if (!r.ok()) qFatal("%s", r.error().message.c_str());
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
      QVERIFY(native.ok() && interpreted.ok());
      QVERIFY((*native)->nativeKernels() > 0);
      QVERIFY(cpu::compileNative(*(*native)->nativeSet()).ok());
      QCOMPARE((*native)->nativeKernelsReady(), (*native)->nativeKernels());
      std::mt19937 rng(static_cast<unsigned>(cols));
      std::vector<HostTensor> inputs;
      for (ir::ValueId v : g.inputs()) inputs.push_back(randomHost(g.aval(v), rng));
      auto got = run(**native, inputs);
      auto want = run(**interpreted, inputs);
      QVERIFY(got.ok() && want.ok());
      std::string diff = sameBits(*got, *want);
      QVERIFY2(diff.empty(), qPrintable(QString("cols %1: %2").arg(cols).arg(QString::fromStdString(diff))));
      // And by hand, for one element: the first row's last column.
      const float* xv = reinterpret_cast<const float*>(inputs[0].bytes.data());
      const float* bv = reinterpret_cast<const float*>(inputs[1].bytes.data());
      const float* sv = reinterpret_cast<const float*>(inputs[2].bytes.data());
      const float s0 = *reinterpret_cast<const float*>(inputs[3].bytes.data());
      const size_t e = static_cast<size_t>(cols - 1);
      float yy = (xv[e] + bv[e]) * sv[0] - s0;
      float tt = reinterpret_cast<const float*>((*got)[2].bytes.data())[e];
      QVERIFY(std::fabs(tt - std::tanh(yy)) <= 1e-6f * (1 + std::fabs(yy)));
    }
  }

  // Reductions of every layout the backend splits: rows in several chunks of several tiles with tails, one long
  // row in many chunks, columns with and without a leading kept dim; sums with a prologue, max and min. Native
  // against interpreted, bit for bit, and against double-precision sums and exact extremes computed here.
  void reductionsMatchInterpreter_data() {
    QTest::addColumn<QList<qint64>>("shape");
    QTest::addColumn<int>("axis");
    QTest::newRow("rows [3,5000]") << QList<qint64>{3, 5000} << 1;
    QTest::newRow("one long row [300001]") << QList<qint64>{1, 300001} << 1;
    QTest::newRow("columns [2,3000,37]") << QList<qint64>{2, 3000, 37} << 1;
    QTest::newRow("columns [4,1030]") << QList<qint64>{4, 1030} << 0;
  }
  void reductionsMatchInterpreter() {
    QFETCH(QList<qint64>, shape);
    QFETCH(int, axis);
    const auto& reg = ops::registry();
    ir::Graph g;
    std::vector<int64_t> dims(shape.begin(), shape.end());
    ir::ValueId x = g.addInput(Aval{Shape(dims), DType::F32});
    auto node = [&](ir::OpCode op, std::vector<ir::ValueId> in, ir::Attrs attrs = ir::NoAttrs{}) {
      auto r = g.addNode(reg, op, in, attrs);
      if (!r.ok()) qFatal("%s", r.error().message.c_str());
      return (*r)[0];
    };
    ir::ValueId sq = node(ir::OpCode::Mul, {x, x});
    ir::ValueId sum = node(ir::OpCode::ReduceSum, {sq}, ir::ReduceAttrs{{axis}});
    ir::ValueId mx = node(ir::OpCode::ReduceMax, {x}, ir::ReduceAttrs{{axis}});
    ir::ValueId mn = node(ir::OpCode::ReduceMin, {node(ir::OpCode::Neg, {x})}, ir::ReduceAttrs{{axis}});
    g.setOutputs({sum, mx, mn});
    auto native = compileGraph(g, true);
    auto interpreted = compileGraph(g, false);
    QVERIFY(native.ok() && interpreted.ok());
    int reductions = 0;
    for (const auto& k : (*native)->loweredKernels())
      if (k.info.kind == passes::GroupKind::Reduction) {
        ++reductions;
        QVERIFY2(k.native >= 0, k.info.name.c_str());
      }
    QVERIFY(reductions > 0);
    QVERIFY(cpu::compileNative(*(*native)->nativeSet()).ok());
    QCOMPARE((*native)->nativeKernelsReady(), (*native)->nativeKernels());
    std::mt19937 rng(7);
    HostTensor in = randomHost(g.aval(x), rng);
    auto got = run(**native, {in});
    auto want = run(**interpreted, {in});
    QVERIFY(got.ok() && want.ok());
    std::string diff = sameBits(*got, *want);
    QVERIFY2(diff.empty(), diff.c_str());
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
      QVERIFY2(std::fabs(at(0) - s) <= 1e-5 * s, qPrintable(QString("sum %1: %2 vs %3").arg(o).arg(at(0)).arg(s)));
      QCOMPARE(at(1), hi);
      QCOMPARE(at(2), lo);
    }
  }

  // Training steps of three sample models, native from the first step, against the interpreter: the same losses
  // to the bit (the engine's kernels and the native ones round alike).
  void trainingStepsMatchInterpreter_data() {
    QTest::addColumn<QString>("project");
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("seq");
    QTest::newRow("gpt2_mini") << "gpt2_mini" << 2 << 32;
    QTest::newRow("mlp_sharding") << "mlp_sharding" << 16 << 0;
    QTest::newRow("vit_tiny") << "vit_tiny" << 2 << 0;
  }
  void trainingStepsMatchInterpreter() {
    QFETCH(QString, project);
    QFETCH(int, batch);
    QFETCH(int, seq);
    auto p = project::loadProject(std::string(TSR_SOURCE_DIR) + "/sample_projects/" + project.toStdString());
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    train::BenchOptions o;
    o.batch = batch;
    o.seq = seq;
    o.steps = 3;
    std::map<bool, train::BenchReport> reports;
    for (bool native : {false, true}) {
      cpu::setNativeMode(native ? cpu::NativeMode::Sync : cpu::NativeMode::Off);
      auto r = train::benchTrainingStep(*p, o);
      QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
      reports[native] = *r;
    }
    cpu::setNativeMode(cpu::NativeMode::Async);
    QVERIFY(cpu::nativeStats().kernels > 0);
    QVERIFY2(cpu::nativeStats().error.empty(), cpu::nativeStats().error.c_str());
    QCOMPARE(reports[true].firstLoss, reports[false].firstLoss);
    QCOMPARE(reports[true].lastLoss, reports[false].lastLoss);
    QVERIFY(reports[true].lastLoss < reports[true].firstLoss);
  }

  // The disk cache keeps the most recently used libraries: 520 old ones in it, one new compile, and the 9 oldest
  // are gone while the newest old ones and the new one stay. A library loaded from the cache counts as used.
  void cacheKeepsRecentLibraries() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    qputenv("TESSERA_KERNEL_CACHE", dir.path().toUtf8());
    const std::filesystem::path cpuDir = std::filesystem::path(dir.path().toStdString()) / "cpu";
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
    QVERIFY(y.ok());
    g.setOutputs(*y);
    auto exe = compileGraph(g, true);
    QVERIFY(exe.ok());
    Status st = cpu::compileNative(*(*exe)->nativeSet());
    QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
    int libs = 0;
    for (const auto& e : std::filesystem::directory_iterator(cpuDir)) libs += e.path().extension() == ".so";
    QCOMPARE(libs, 512);
    QVERIFY(!std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 8)));
    QVERIFY(std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 9)));
    QVERIFY(std::filesystem::exists(cpuDir / fmt::format("tsr_cpu_{:016x}.so", 519)));
    qputenv("TESSERA_KERNEL_CACHE", "off");
  }

  // Without a working compiler the kernels stay on the interpreter, the results are right, and the reason is
  // kept. (Last: a missing compiler turns native code off for the rest of the process.)
  void missingCompilerFallsBackToInterpreter() {
    qputenv("TESSERA_CXX", "/nonexistent/tessera-test-c++");
    const auto& reg = ops::registry();
    ir::Graph g;
    ir::ValueId x = g.addInput(Aval{Shape{3, 11, 13}, DType::F32});
    auto sq = g.addNode(reg, ir::OpCode::Mul, {x, x}, ir::NoAttrs{});
    QVERIFY(sq.ok());
    auto y = g.addNode(reg, ir::OpCode::Add, {(*sq)[0], x}, ir::NoAttrs{});
    QVERIFY(y.ok());
    g.setOutputs(*y);
    auto exe = compileGraph(g, true);
    QVERIFY(exe.ok());
    Status st = cpu::compileNative(*(*exe)->nativeSet());
    QVERIFY(!st.ok());
    QVERIFY2(st.error().message.find("/nonexistent/tessera-test-c++") != std::string::npos, st.error().message.c_str());
    QCOMPARE((*exe)->nativeKernelsReady(), int64_t{0});
    HostTensor in = HostTensor::zeros(g.aval(x));
    for (int64_t i = 0; i < in.numel(); ++i) {
      float v = static_cast<float>(i % 7) - 3.0f;
      std::memcpy(in.bytes.data() + i * 4, &v, 4);
    }
    auto out = run(**exe, {in});
    QVERIFY(out.ok());
    for (int64_t i = 0; i < in.numel(); ++i) {
      float v = static_cast<float>(i % 7) - 3.0f, got;
      std::memcpy(&got, (*out)[0].bytes.data() + i * 4, 4);
      QCOMPARE(got, v * v + v);
    }
    QVERIFY(cpu::nativeStats().error.find("/nonexistent/tessera-test-c++") != std::string::npos);
    qunsetenv("TESSERA_CXX");
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestNativeKernels)
#include "test_native_kernels.moc"
