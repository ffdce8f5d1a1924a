// The CUDA code generator, checked without a GPU: every kernel the backend would generate for real training
// steps (GPT-2 mini, the sharding tutorial's MLP, ViT tiny) and for every op case of the conformance suite is
// compiled with NVRTC for sm_90, the backend's target. A kernel that does not compile fails the test with its
// source and NVRTC's log.
#include <QtTest>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "engine/backends/cuda/executable.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/backends/cuda/nvrtc.h"
#include "engine/ops/registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

// Compiles kernels in bundles (one prelude, many bodies: one NVRTC call per bundle); a failing bundle is
// compiled kernel by kernel to name the culprit. Returns "" or the first failure.
std::string compileAll(const std::vector<cuda::GeneratedKernel>& kernels, size_t bundle = 256) {
  for (size_t b = 0; b < kernels.size(); b += bundle) {
    std::string src = cuda::kernelPrelude();
    std::set<std::string> names;
    for (size_t i = b; i < std::min(kernels.size(), b + bundle); ++i)
      if (names.insert(kernels[i].name).second) src += kernels[i].body;
    auto r = cuda::compileCuda(src, "bundle");
    if (r.ok()) continue;
    for (size_t i = b; i < std::min(kernels.size(), b + bundle); ++i) {
      auto one = cuda::compileCuda(kernels[i].source, kernels[i].name);
      if (!one.ok()) return one.error().message;
    }
    return r.error().message;
  }
  return "";
}

}  // namespace

class TestCudaCodegen : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    // Every kernel really goes through NVRTC.
    qputenv("TESSERA_KERNEL_CACHE", "off");
    QVERIFY(cuda::nvrtcVersionString().rfind("NVRTC ", 0) == 0);
  }

  void trainingStepKernelsCompile_data() {
    QTest::addColumn<QString>("project");
    QTest::addColumn<int>("batch");
    QTest::addColumn<int>("seq");
    QTest::newRow("gpt2_mini") << "gpt2_mini" << 2 << 32;
    QTest::newRow("mlp_sharding") << "mlp_sharding" << 8 << 0;
    QTest::newRow("vit_tiny") << "vit_tiny" << 2 << 0;
  }

  void trainingStepKernelsCompile() {
    QFETCH(QString, project);
    QFETCH(int, batch);
    QFETCH(int, seq);
    auto cg = projectStepGraph(project.toStdString(), batch, seq);
    QVERIFY2(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
    auto lowered = lowerForCuda(cg->graph);
    QVERIFY2(lowered.ok(), lowered.ok() ? "" : lowered.error().message.c_str());
    auto prog = cuda::generateProgram(**lowered);
    QVERIFY2(prog.ok(), prog.ok() ? "" : prog.error().message.c_str());
    // Every loop and reduction kernel is generated; gemms have cuBLASLt (f32 operands read in place).
    const auto& ks = (*lowered)->loweredKernels();
    std::map<std::string, int> shapes;
    std::map<std::string, int> hostOps;  // what still runs on host copies
    for (size_t i = 0; i < ks.size(); ++i) {
      const auto kind = ks[i].info.kind;
      if (prog->paths[i] == cuda::KernelPath::Host)
        ++hostOps[ops::registry().get(cg->graph.nodes()[static_cast<size_t>(ks[i].node)].op).name + " " +
                  cg->graph.aval(cg->graph.nodes()[static_cast<size_t>(ks[i].node)].results[0]).toString()];
      if (kind == passes::GroupKind::Loop || kind == passes::GroupKind::Reduction) {
        QVERIFY2(prog->generatedIndex[i] >= 0, ks[i].info.name.c_str());
        const auto& g = prog->kernels[static_cast<size_t>(prog->generatedIndex[i])];
        ++shapes[kind == passes::GroupKind::Loop                        ? "loop"
                 : g.body.find("group = threadIdx") != std::string::npos ? "reduction columns"
                 : g.shape == cuda::LaunchShape::Rows                    ? "reduction rows"
                                                                         : "reduction generic"];
      }
      if (kind == passes::GroupKind::Gemm) {
        ++shapes[prog->paths[i] == cuda::KernelPath::CuBlasLt ? "gemm cublaslt" : "gemm host"];
        if (ks[i].hasProgram) ++shapes["gemm epilogue"];
      }
    }
    QVERIFY(shapes["loop"] > 0);
    QVERIFY(shapes["reduction rows"] > 0);
    QVERIFY(shapes["gemm cublaslt"] > 0);
    QCOMPARE(shapes["gemm host"], 0);
    std::string err = compileAll(prog->kernels);
    QVERIFY2(err.empty(), err.c_str());
    // TESSERA_PRINT_KERNELS=1: every generated source, to read what the generator makes of a real step.
    if (qEnvironmentVariableIsSet("TESSERA_PRINT_KERNELS"))
      for (const auto& k : prog->kernels) std::fprintf(stderr, "%s\n", k.body.c_str());
    QString summary;
    for (const auto& [k, n] : shapes) summary += QString(" %1=%2").arg(QString::fromStdString(k)).arg(n);
    summary += "; on the host:";
    for (const auto& [k, n] : hostOps) summary += QString(" %1 x%2").arg(QString::fromStdString(k)).arg(n);
    qInfo("%s: %zu kernels, %zu distinct generated sources compiled;%s", qPrintable(project), ks.size(),
          prog->kernels.size(), qPrintable(summary));
    QVERIFY2(hostOps.empty(), "a training step has kernels on host copies (listed above)");
  }

  // Each conformance case as a one-node graph (its operands fed directly, and operand 0 through a transpose):
  // whatever the backend generates for it compiles, and every op the backend claims to generate does so.
  void opKernelsCompile() {
    const auto& reg = ops::registry();
    std::vector<cuda::GeneratedKernel> all;
    std::set<std::string> generatedOps, names;
    int graphs = 0;
    for (const OpCase& c : allCases()) {
      for (bool transposed : {false, true}) {
        if (transposed && (c.inputs.empty() || c.inputs[0].aval.rank() != 2)) continue;
        auto g = caseGraph(c, transposed);
        QVERIFY2(g.ok(), g.ok() ? "" : g.error().message.c_str());
        auto lowered = lowerForCuda(*g);
        QVERIFY2(lowered.ok(), (c.label + ": " + (lowered.ok() ? "" : lowered.error().message)).c_str());
        auto prog = cuda::generateProgram(**lowered);
        QVERIFY2(prog.ok(), (c.label + ": " + (prog.ok() ? "" : prog.error().message)).c_str());
        for (auto& k : prog->kernels)
          if (names.insert(k.name).second) all.push_back(std::move(k));
        for (size_t i = 0; i < prog->paths.size(); ++i)
          if (prog->generatedIndex[i] >= 0) generatedOps.insert(reg.get(c.op).name);
        ++graphs;
      }
    }
    QStringList missing;
    for (const auto& def : reg.all()) {
      if (static_cast<uint32_t>(def.code) >= ir::kNumCoreOps) continue;
      bool claimed = std::string(cuda::opPath(def)) == "nvrtc" && def.fusion != ir::FusionKind::Layout;
      if (claimed && !generatedOps.count(def.name)) missing << QString::fromStdString(def.name);
    }
    QVERIFY2(missing.isEmpty(), qPrintable("ops listed as nvrtc without a generated kernel: " + missing.join(", ")));
    std::string err = compileAll(all);
    QVERIFY2(err.empty(), err.c_str());
    qInfo("%d one-node graphs, %zu generated kernels compiled, %zu ops with generated kernels", graphs, all.size(),
          generatedOps.size());
  }

  // Long rows of sums are split into chunks added atomically: that path compiles too.
  void chunkedSumCompiles() {
    const auto& reg = ops::registry();
    ir::Graph g;
    ir::ValueId x = g.addInput(Aval{Shape{4, 300000}, DType::F32});
    auto sq = g.addNode(reg, ir::OpCode::Mul, {x, x}, ir::NoAttrs{});
    QVERIFY(sq.ok());
    auto sum = g.addNode(reg, ir::OpCode::ReduceSum, {(*sq)[0]}, ir::ReduceAttrs{{1}});
    QVERIFY2(sum.ok(), sum.ok() ? "" : sum.error().message.c_str());
    g.setOutputs(*sum);
    auto lowered = lowerForCuda(g);
    QVERIFY(lowered.ok());
    auto prog = cuda::generateProgram(**lowered);
    QVERIFY(prog.ok());
    QCOMPARE(prog->kernels.size(), size_t{1});
    QVERIFY(prog->kernels[0].rows > 4);
    QVERIFY(!prog->kernels[0].zeroArgs.empty());
    QVERIFY(prog->kernels[0].body.find("atomicAdd") != std::string::npos);
    std::string err = compileAll(prog->kernels);
    QVERIFY2(err.empty(), err.c_str());
  }

  void flashAttentionCompiles() {
    for (int d : {32, 64, 80, 128}) {
      auto r = cuda::compileCuda(cuda::flashAttentionSource(d), "flash_attention");
      QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    }
  }

  // A source that does not compile comes back as an error with NVRTC's log and the numbered source.
  void badSourceIsReported() {
    auto r = cuda::compileCuda("extern \"C\" __global__ void k() { undefined_thing(); }", "bad");
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find("undefined_thing") != std::string::npos, r.error().message.c_str());
    QVERIFY(r.error().message.find("--- source ---") != std::string::npos);
  }

  // Equal programs give equal sources (one compile and one cache entry); the cache returns what was compiled.
  void diskCache() {
    QTemporaryDir dir;
    qputenv("TESSERA_KERNEL_CACHE", dir.path().toUtf8());
    const std::string src = std::string(cuda::kernelPrelude()) +
                            "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = tsr_max(p[threadIdx.x], 0.0f); }\n";
    auto first = cuda::compileCuda(src, "k");
    QVERIFY2(first.ok(), first.ok() ? "" : first.error().message.c_str());
    QVERIFY(!first->fromCache);
    auto second = cuda::compileCuda(src, "k");
    QVERIFY(second.ok());
    QVERIFY(second->fromCache);
    QVERIFY(second->cubin == first->cubin);
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 1);
    qputenv("TESSERA_KERNEL_CACHE", "off");
  }

  // Without a GPU the backend says so in one line instead of failing later.
  void noGpuIsReported() {
    auto n = cuda::deviceCount();
    if (n.ok()) QSKIP("a GPU is present");
    QVERIFY(n.error().message.rfind("no CUDA GPU", 0) == 0);
    auto d = cuda::Device::get(0);
    QVERIFY(!d.ok());
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestCudaCodegen)
#include "test_cuda_codegen.moc"
