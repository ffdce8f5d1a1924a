// The CUDA code generator, checked without a GPU: every kernel the backend would generate for real training
// steps (GPT-2 mini, the sharding tutorial's MLP, ViT tiny) and for every op case of the conformance suite is
// compiled with NVRTC for sm_90, the backend's target. A kernel that does not compile fails the test with its
// source and NVRTC's log.
#include "tests/check.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "engine/backends/cuda/executable.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/backends/cuda/gemm.h"
#include "engine/backends/cuda/nvrtc.h"
#include "engine/ops/registry.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/ops/harness.h"
#include "tests/temp_dir.h"

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

// Every test case starts with the disk cache off: every kernel really goes through NVRTC.
struct NvrtcEveryTime {
  NvrtcEveryTime() {
    setenv("TESSERA_KERNEL_CACHE", "off", 1);
    REQUIRE(cuda::nvrtcVersionString().rfind("NVRTC ", 0) == 0);
  }
};

}  // namespace


TEST_CASE_FIXTURE(NvrtcEveryTime, "trainingStepKernelsCompile") {
  struct Row {
    const char* project;
    int batch;
    int seq;
  };
  const Row rows[] = {
      {"gpt2_mini", 2, 32},
      {"mlp_sharding", 8, 0},
      {"vit_tiny", 2, 0},
  };
  for (const Row& row : rows) {
    SUBCASE(row.project) {
      const char* project = row.project;
      auto cg = projectStepGraph(project, row.batch, row.seq);
      REQUIRE_MESSAGE(cg.ok(), cg.error().message);
      auto lowered = lowerForCuda(cg->graph);
      REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
      auto prog = cuda::generateProgram(**lowered);
      REQUIRE_MESSAGE(prog.ok(), prog.error().message);
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
          REQUIRE_MESSAGE(prog->generatedIndex[i] >= 0, ks[i].info.name.c_str());
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
      REQUIRE(shapes["loop"] > 0);
      REQUIRE(shapes["reduction rows"] > 0);
      REQUIRE(shapes["gemm cublaslt"] > 0);
      TSR_COMPARE(shapes["gemm host"], 0);
      std::string err = compileAll(prog->kernels);
      REQUIRE_MESSAGE(err.empty(), err.c_str());
      // TESSERA_PRINT_KERNELS=1: every generated source, to read what the generator makes of a real step.
      if (getenv("TESSERA_PRINT_KERNELS") != nullptr)
        for (const auto& k : prog->kernels) std::fprintf(stderr, "%s\n", k.body.c_str());
      std::string summary;
      for (const auto& [k, n] : shapes) summary += " " + k + "=" + std::to_string(n);
      summary += "; on the host:";
      for (const auto& [k, n] : hostOps) summary += " " + k + " x" + std::to_string(n);
      MESSAGE(project << ": " << ks.size() << " kernels, " << prog->kernels.size()
                      << " distinct generated sources compiled;" << summary);
      REQUIRE_MESSAGE(hostOps.empty(), "a training step has kernels on host copies (listed above)");
    }
  }
}

// Each conformance case as a one-node graph (its operands fed directly, and operand 0 through a transpose):
// whatever the backend generates for it compiles, and every op the backend claims to generate does so.
TEST_CASE_FIXTURE(NvrtcEveryTime, "opKernelsCompile") {
  const auto& reg = ops::registry();
  std::vector<cuda::GeneratedKernel> all;
  std::set<std::string> generatedOps, names;
  int graphs = 0;
  for (const OpCase& c : allCases()) {
    for (bool transposed : {false, true}) {
      if (transposed && (c.inputs.empty() || c.inputs[0].aval.rank() != 2)) continue;
      auto g = caseGraph(c, transposed);
      REQUIRE_MESSAGE(g.ok(), g.error().message);
      auto lowered = lowerForCuda(*g);
      REQUIRE_MESSAGE(lowered.ok(), (c.label + ": " + (lowered.ok() ? "" : lowered.error().message)).c_str());
      auto prog = cuda::generateProgram(**lowered);
      REQUIRE_MESSAGE(prog.ok(), (c.label + ": " + (prog.ok() ? "" : prog.error().message)).c_str());
      for (auto& k : prog->kernels)
        if (names.insert(k.name).second) all.push_back(std::move(k));
      for (size_t i = 0; i < prog->paths.size(); ++i)
        if (prog->generatedIndex[i] >= 0) generatedOps.insert(reg.get(c.op).name);
      ++graphs;
    }
  }
  std::vector<std::string> missing;
  for (const auto& def : reg.all()) {
    if (static_cast<uint32_t>(def.code) >= ir::kNumCoreOps) continue;
    bool claimed = std::string(cuda::opPath(def)) == "nvrtc" && def.fusion != ir::FusionKind::Layout;
    if (claimed && !generatedOps.count(def.name)) missing.push_back(def.name);
  }
  REQUIRE_MESSAGE(missing.empty(), "ops listed as nvrtc without a generated kernel: " << join(missing, ", "));
  std::string err = compileAll(all);
  REQUIRE_MESSAGE(err.empty(), err);
  MESSAGE(graphs << " one-node graphs, " << all.size() << " generated kernels compiled, " << generatedOps.size()
                 << " ops with generated kernels");
}

// The one generated kernel of reduce_sum(x op x) over `axis`.
static cuda::GeneratedKernel sumKernel(const Shape& shape, ir::OpCode op, int64_t axis) {
  const auto& reg = ops::registry();
  ir::Graph g;
  ir::ValueId x = g.addInput(Aval{shape, DType::F32});
  auto y = g.addNode(reg, op, {x, x}, ir::NoAttrs{});
  REQUIRE(y.ok());
  auto sum = g.addNode(reg, ir::OpCode::ReduceSum, {(*y)[0]}, ir::ReduceAttrs{{axis}});
  REQUIRE_MESSAGE(sum.ok(), sum.error().message);
  g.setOutputs(*sum);
  auto lowered = lowerForCuda(g);
  REQUIRE(lowered.ok());
  auto prog = cuda::generateProgram(**lowered);
  REQUIRE(prog.ok());
  TSR_COMPARE(prog->kernels.size(), size_t{1});
  std::string err = compileAll(prog->kernels);
  REQUIRE_MESSAGE(err.empty(), err.c_str());
  return prog->kernels[0];
}

// Long rows of sums are split into chunks added atomically: that path compiles too.
TEST_CASE_FIXTURE(NvrtcEveryTime, "chunkedSumCompiles") {
  const cuda::GeneratedKernel k = sumKernel(Shape{4, 300000}, ir::OpCode::Mul, 1);
  REQUIRE(k.rows > 4);
  REQUIRE(!k.zeroArgs.empty());
  REQUIRE(k.body.find("atomicAdd") != std::string::npos);
}

// Column sums over many rows into few outputs (a bias gradient) are split into chunks added atomically; a
// column sum with enough outputs is not.
TEST_CASE_FIXTURE(NvrtcEveryTime, "chunkedColumnSumCompiles") {
  for (auto [shape, chunked] : {std::pair{Shape{16384, 768}, true}, std::pair{Shape{64, 65536}, false}}) {
    const cuda::GeneratedKernel k = sumKernel(shape, ir::OpCode::Add, 0);
    REQUIRE(k.body.find("group = threadIdx") != std::string::npos);  // the columns layout
    TSR_COMPARE(k.body.find("atomicAdd") != std::string::npos, chunked);
    TSR_COMPARE(!k.zeroArgs.empty(), chunked);
    if (chunked) REQUIRE(k.rows >= cuda::kMinReductionBlocks);
  }
}

// The kernels that stage GEMM operands (bf16 conversion, aligned repacking) compile.
TEST_CASE_FIXTURE(NvrtcEveryTime, "gemmStagingCompiles") {
  auto r = cuda::compileCuda(cuda::gemmStageSource(), "gemm_stage");
  REQUIRE_MESSAGE(r.ok(), r.error().message);
}

TEST_CASE_FIXTURE(NvrtcEveryTime, "flashAttentionCompiles") {
  for (int d : {32, 64, 80, 128}) {
    auto r = cuda::compileCuda(cuda::flashAttentionSource(d), "flash_attention");
    REQUIRE_MESSAGE(r.ok(), r.error().message);
  }
}

// A source that does not compile comes back as an error with NVRTC's log and the numbered source.
TEST_CASE_FIXTURE(NvrtcEveryTime, "badSourceIsReported") {
  auto r = cuda::compileCuda("extern \"C\" __global__ void k() { undefined_thing(); }", "bad");
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find("undefined_thing") != std::string::npos, r.error().message.c_str());
  REQUIRE(r.error().message.find("--- source ---") != std::string::npos);
}

// Equal programs give equal sources (one compile and one cache entry); the cache returns what was compiled.
TEST_CASE_FIXTURE(NvrtcEveryTime, "diskCache") {
  TempDir dir;
  setenv("TESSERA_KERNEL_CACHE", dir.path().c_str(), 1);
  const std::string src = std::string(cuda::kernelPrelude()) +
                          "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] = tsr_max(p[threadIdx.x], 0.0f); }\n";
  auto first = cuda::compileCuda(src, "k");
  REQUIRE_MESSAGE(first.ok(), first.error().message);
  REQUIRE(!first->fromCache);
  auto second = cuda::compileCuda(src, "k");
  REQUIRE(second.ok());
  REQUIRE(second->fromCache);
  REQUIRE(second->cubin == first->cubin);
  TSR_COMPARE(countFiles(dir.path()), 1);
  setenv("TESSERA_KERNEL_CACHE", "off", 1);
}

// Without a GPU the backend says so in one line instead of failing later.
TEST_CASE_FIXTURE(NvrtcEveryTime, "noGpuIsReported") {
  auto n = cuda::deviceCount();
  if (n.ok()) TSR_SKIP("a GPU is present");
  REQUIRE(n.error().message.rfind("no CUDA GPU", 0) == 0);
  auto d = cuda::Device::get(0);
  REQUIRE(!d.ok());
}
