// The CUDA code generator, checked without a GPU: every kernel the backend would generate for real training
// steps (GPT-2 mini, the sharding tutorial's MLP, ViT tiny) and for every op case of the conformance suite is
// compiled with NVRTC for sm_90, the backend's target. A kernel that does not compile fails the test with its
// source and NVRTC's log.
#include "tests/check.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "engine/backends/cuda/executable.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/backends/cuda/gemm.h"
#include "engine/backends/cuda/loop_groups.h"
#include "engine/backends/cuda/nvrtc.h"
#include "engine/core/env_options.h"
#include "engine/inspect/project_snapshot.h"
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
    const char* compute = "";  // "bf16": the step under autocast (bf16 products and activations)
    bool fusedAttention = false;  // attention as one dot_product_attention op (TESSERA_FUSED_ATTENTION=on, else off)
  };
  const Row rows[] = {
      {"gpt2_mini", 2, 32},
      {"mlp_sharding", 8, 0},
      {"vit_tiny", 2, 0},
      {"resnet_cifar", 2, 0},
      {"gpt2_mini", 2, 32, "bf16"},
      {"vit_tiny", 2, 0, "bf16"},
      {"resnet_cifar", 2, 0, "bf16"},
      {"gpt2_mini", 2, 32, "bf16", true},  // as the GPU runs GPT-2 under autocast: bf16 q, k, v on flash kernels
  };
  for (const Row& row : rows) {
    const std::string name = std::string(row.project) + (*row.compute ? std::string(" compute ") + row.compute : "") +
                             (row.fusedAttention ? " fused attention" : "");
    SUBCASE(name.c_str()) {
      const char* project = row.project;
      struct FusedAttention {  // TESSERA_FUSED_ATTENTION=on or off while the step is traced (auto fuses on the CPU)
        explicit FusedAttention(bool on) {
          setenv("TESSERA_FUSED_ATTENTION", on ? "on" : "off", 1);
          reloadEnvOptions();
        }
        ~FusedAttention() {
          unsetenv("TESSERA_FUSED_ATTENTION");
          reloadEnvOptions();
        }
      } fused(row.fusedAttention);
      auto cg = projectStepGraph(project, row.batch, row.seq, row.compute);
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
        if (prog->paths[i] == cuda::KernelPath::Flash) ++shapes["attention flash"];
        if (kind == passes::GroupKind::Gemm) {
          ++shapes[prog->paths[i] == cuda::KernelPath::CuBlasLt ? "gemm cublaslt" : "gemm host"];
          if (ks[i].hasProgram) ++shapes["gemm epilogue"];
        }
        if (kind == passes::GroupKind::Conv) {
          // The convolution's own kernel is generated as the fallback; the epilogue as cuDNN steps and generated.
          REQUIRE_MESSAGE(prog->anchorIndex[i] >= 0, ks[i].info.name.c_str());
          ++shapes[prog->paths[i] == cuda::KernelPath::Cudnn ? "conv group cudnn" : "conv group generated"];
          if (prog->cudnnEpilogues.count(i)) ++shapes["conv epilogue cudnn"];
          if (ks[i].hasProgram) ++shapes["conv epilogue"];
        }
      }
      std::string summary;
      for (const auto& [k, n] : shapes) summary += " " + k + "=" + std::to_string(n);
      summary += "; on the host:";
      for (const auto& [k, n] : hostOps) summary += " " + k + " x" + std::to_string(n);
      MESSAGE(name << ": " << ks.size() << " kernels, " << prog->kernels.size()
                      << " distinct generated sources compiled;" << summary);
      // Under autocast the convolutions give bf16, which no epilogue fuses yet: each runs alone (cuDNN takes bf16).
      if (std::string(project) == "resnet_cifar" && !*row.compute) {
        REQUIRE(shapes["conv epilogue"] > 0);
        if (cuda::cudnnBuilt()) TSR_COMPARE(shapes["conv epilogue cudnn"], shapes["conv epilogue"]);
      }
      // Fused: each layer's attention and its gradient on the flash kernels (2 layers), whatever q's dtype.
      TSR_COMPARE(shapes["attention flash"], row.fusedAttention ? 4 : 0);
      REQUIRE(shapes["loop"] > 0);
      REQUIRE(shapes["reduction rows"] > 0);
      REQUIRE(shapes["gemm cublaslt"] > 0);
      TSR_COMPARE(shapes["gemm host"], 0);
      std::string err = compileAll(prog->kernels);
      REQUIRE_MESSAGE(err.empty(), err.c_str());
      // TESSERA_PRINT_KERNELS=1: every generated source, to read what the generator makes of a real step.
      if (getenv("TESSERA_PRINT_KERNELS") != nullptr)
        for (const auto& k : prog->kernels) std::fprintf(stderr, "%s\n", k.body.c_str());
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

// AdamW updates each parameter in a loop of its own whose text differs from the others' only in its size; the
// backend launches loops of the same text as one kernel over a table (loop_groups.h). On GPT-2's steps every
// parameter's update is in a group and nothing else is, the groups are two (GPT-2 124M: 148 loops in 2
// launches), their kernels compile, each member writes only fresh outputs, and (read off the graph, not the
// memory plan the grouping used) reads only what kernels before its group's launch computed.
TEST_CASE_FIXTURE(NvrtcEveryTime, "optimizerLoopsGroup") {
  struct Row {
    const char* project;
    int batch;
    int seq;
    size_t parameters;
    size_t launches;
  };
  // Two launches: the matrices (decayed: wte, wpe and four per layer) and the rest (biases and norms: no decay).
  const Row rows[] = {
      {"gpt2_mini", 2, 32, 28, 2},
      {"gpt2_124m", 1, 64, 148, 2},
  };
  for (const Row& row : rows) {
    SUBCASE(row.project) {
      auto cg = projectStepGraph(row.project, row.batch, row.seq);
      REQUIRE_MESSAGE(cg.ok(), cg.error().message);
      auto lowered = lowerForCuda(cg->graph);
      REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
      auto prog = cuda::generateProgram(**lowered);
      REQUIRE_MESSAGE(prog.ok(), prog.error().message);
      auto alone = cuda::generateProgram(**lowered, false);
      REQUIRE(alone.ok());
      REQUIRE(alone->groups.empty());
      size_t parameters = 0;
      for (const std::string& p : inspect::treePaths(cg->inputTree)) parameters += p.find("params.") != std::string::npos &&
                                                                         p.find("opt.") == std::string::npos;
      TSR_COMPARE(parameters, row.parameters);
      const ir::Graph& g = cg->graph;
      const auto& ks = (*lowered)->loweredKernels();
      std::map<ir::NodeId, size_t> kernelOf;  // node -> the kernel computing it
      for (size_t i = 0; i < ks.size(); ++i)
        for (ir::NodeId n : ks[i].info.nodes) kernelOf[n] = i;
      size_t grouped = 0;
      std::vector<cuda::GeneratedKernel> groupKernels;
      for (const cuda::LoopGroup& grp : prog->groups) {
        REQUIRE(grp.members.size() >= 2);
        grouped += grp.members.size();
        groupKernels.push_back(prog->kernels[static_cast<size_t>(grp.kernel)]);
        const size_t launch = grp.members.front();
        for (size_t m : grp.members) {
          TSR_COMPARE(prog->groupOf[m], static_cast<int>(&grp - prog->groups.data()));
          REQUIRE(ks[m].info.kind == passes::GroupKind::Loop);
          for (const cpu::TileStore& st : ks[m].prog.stores) {
            const ir::ValueId v = ks[m].args[static_cast<size_t>(st.arg)];
            REQUIRE_MESSAGE((*lowered)->valueSlots()[static_cast<size_t>(v)].loc == cpu::Loc::Fresh,
                            ks[m].info.name << " writes a value that is not a fresh output");
          }
          for (const cpu::TileInput& in : ks[m].prog.inputs) {
            const ir::NodeId producer = g.value(ks[m].args[static_cast<size_t>(in.arg)]).producer;
            if (producer == ir::kNone || !kernelOf.count(producer)) continue;  // an input, a constant, a view
            REQUIRE_MESSAGE(kernelOf[producer] < launch,
                            ks[m].info.name << " reads what kernel " << kernelOf[producer] << " computes, after "
                                            << launch);
          }
        }
      }
      TSR_COMPARE(grouped, parameters);  // every parameter's update, and nothing else
      TSR_COMPARE(prog->groups.size(), row.launches);
      std::string err = compileAll(groupKernels);
      REQUIRE_MESSAGE(err.empty(), err.c_str());
      std::string sizes;
      for (const cuda::LoopGroup& grp : prog->groups)
        sizes += " " + std::to_string(grp.members.size()) + " like " + ks[grp.members.front()].info.name + ";";
      MESSAGE(std::string(row.project) << ": " << parameters << " parameters, " << grouped << " loops in "
                                       << prog->groups.size() << " launches (" << sizes << " ); "
                                       << prog->kernels.size() << " generated sources (" << alone->kernels.size()
                                       << " without groups)");
    }
  }
}

// What the GPU tests of grouped loops and CUDA graphs take as given, checked here without a GPU: the GPT-2 mini
// step hands its parameters and both AdamW moments to the next step (stepCarries pairs them by path), and a
// reduce_prod runs on host copies (so that its program is one that never becomes a graph).
TEST_CASE("graphTestPremises") {
  auto cg = projectStepGraph("gpt2_mini", 4, 64);
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  const auto carries = stepCarries(*cg);
  const std::vector<std::string> in = inspect::treePaths(cg->inputTree);
  size_t params = 0, moments = 0;
  for (auto [o, i] : carries) {
    params += in[i].find("params.") != std::string::npos && in[i].find("opt.") == std::string::npos;
    moments += in[i].find("opt.") != std::string::npos;
  }
  TSR_COMPARE(params, size_t{28});
  REQUIRE(moments >= 2 * 28);
  const ir::Graph g = hostKernelGraph();
  auto lowered = lowerForCuda(g);
  REQUIRE(lowered.ok());
  auto prog = cuda::generateProgram(**lowered);
  REQUIRE(prog.ok());
  REQUIRE(std::count(prog->paths.begin(), prog->paths.end(), cuda::KernelPath::Host) == 1);
}

// A group's table: each member gets the blocks a launch of its own would (one per 256 elements, at most 32 per
// SM), numbered one after the other; an entry is the member's pointers and three words.
TEST_CASE("loopGroupTableLayout") {
  cuda::GeneratedProgram prog;
  cuda::GeneratedKernel k;
  k.numArgs = 5;
  prog.kernels.push_back(k);
  prog.groups.push_back(cuda::LoopGroup{0, {3, 7, 9}, {100, 1000000, 256 * 5}});
  prog.groups.push_back(cuda::LoopGroup{0, {10, 11}, {1, 2}});
  const cuda::LoopGroupTables t = cuda::layoutLoopGroups(prog, 2);
  TSR_COMPARE(t.groups.size(), size_t{2});
  TSR_COMPARE(t.groups[0].memberBlocks, (std::vector<int64_t>{1, 64, 5}));
  TSR_COMPARE(t.groups[0].firstBlock, (std::vector<int64_t>{0, 1, 65}));
  TSR_COMPARE(t.groups[0].blocks, int64_t{70});
  TSR_COMPARE(t.groups[1].offset, int64_t{3 * (5 + cuda::kGroupEntryExtra)});
  TSR_COMPARE(t.groups[1].blocks, int64_t{2});
  TSR_COMPARE(t.words, int64_t{5 * (5 + cuda::kGroupEntryExtra)});
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

// FlashAttention-2's tensor-core kernels (mma.sync bf16, sm_90 here), both generations, for every head dim they take,
// reading and writing f32 and bf16 arrays.
TEST_CASE_FIXTURE(NvrtcEveryTime, "tensorCoreAttentionCompiles") {
  for (int d : {16, 32, 48, 64})
    for (bool bf16 : {false, true}) {
      REQUIRE(cuda::flashAttentionSupports(d));
      auto r = cuda::compileCuda(cuda::tensorCoreAttentionSourceV2(d, bf16), "flash_attention_tc2");
      REQUIRE_MESSAGE(r.ok(), r.error().message);
      auto r1 = cuda::compileCuda(cuda::tensorCoreAttentionSourceV1(d, bf16), "flash_attention_tc");  // v1
      REQUIRE_MESSAGE(r1.ok(), r1.error().message);
    }
  REQUIRE(!cuda::flashAttentionSupports(80));
  REQUIRE(!cuda::flashAttentionSupports(8));
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

// ---- conv_general_dilated on cuDNN: the mapping (a pure function), checked against values worked by hand ----

namespace {

ir::ConvAttrs convAttrs(std::vector<int64_t> strides, std::vector<int64_t> lo, std::vector<int64_t> hi,
                        std::vector<int64_t> lhsDil, std::vector<int64_t> rhsDil, ir::Ints lhsSpec, ir::Ints rhsSpec,
                        ir::Ints outSpec, int64_t featureGroups = 1, int64_t batchGroups = 1) {
  ir::ConvAttrs at;
  at.windowStrides = std::move(strides);
  at.paddingLo = std::move(lo);
  at.paddingHi = std::move(hi);
  at.lhsDilation = std::move(lhsDil);
  at.rhsDilation = std::move(rhsDil);
  at.lhsSpec = std::move(lhsSpec);
  at.rhsSpec = std::move(rhsSpec);
  at.outSpec = std::move(outSpec);
  at.featureGroupCount = featureGroups;
  at.batchGroupCount = batchGroups;
  return at;
}

cuda::CudnnConvProblem mapped(const Shape& lhs, const Shape& rhs, const Shape& out, const ir::ConvAttrs& at,
                              DType t = DType::F32) {
  cuda::CudnnConvDecision d = cuda::mapConvToCudnn(Aval{lhs, t}, Aval{rhs, t}, Aval{out, t}, at);
  REQUIRE_MESSAGE(d.problem.has_value(), d.reason);
  return *d.problem;
}

using V = std::vector<int64_t>;

}  // namespace

// NHWC x [2, 8, 8, 3], HWIO w [3, 3, 3, 4], stride 2, padding 1 / 0 -> y [2, 4, 4, 4]. The post padding is
// exact at 0, and anything up to stride - 1 = 1 counts the same windows: 1, symmetric with the pre padding.
// HWIO is no layout cuDNN's engines take beside NHWC: the filter is copied to KRSC.
TEST_CASE("cudnnForwardNhwcHwio") {
  const auto at = convAttrs({2, 2}, {1, 1}, {0, 0}, {1, 1}, {1, 1}, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2});
  const auto p = mapped(Shape{2, 8, 8, 3}, Shape{3, 3, 3, 4}, Shape{2, 4, 4, 4}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::Forward);
  TSR_COMPARE(p.x.dims, (V{2, 3, 8, 8}));
  TSR_COMPARE(p.x.strides, (V{192, 1, 24, 3}));
  TSR_COMPARE(p.y.dims, (V{2, 4, 4, 4}));
  TSR_COMPARE(p.y.strides, (V{64, 1, 16, 4}));
  TSR_COMPARE((std::array{p.xValue, p.wValue, p.yValue}), (std::array{0, 1, 2}));
  TSR_COMPARE(p.strides, (V{2, 2}));
  TSR_COMPARE(p.dilations, (V{1, 1}));
  TSR_COMPARE(p.prePadding, (V{1, 1}));
  TSR_COMPARE(p.postPadding, (V{1, 1}));
  TSR_COMPARE(p.groups, int64_t{1});
  REQUIRE(p.copyFilter);
  REQUIRE(!p.convolutionMode);
  TSR_COMPARE(p.w.dims, (V{4, 3, 3, 3}));
  TSR_COMPARE(p.w.strides, (V{27, 1, 9, 3}));  // KRSC
  // The copy walks [G, K, R, S, C] of the packed buffer; HWIO holds O with stride 1, I 4, H 36, W 12.
  TSR_COMPARE(p.filterCopy.dims, (V{1, 4, 3, 3, 3}));
  TSR_COMPARE(p.filterCopy.strides, (V{4, 1, 36, 12, 4}));
  TSR_COMPARE(p.filterCopy.offset, int64_t{0});
}

// NCHW x [1, 4, 9, 7], OIHW w [6, 2, 3, 2] in 2 groups, rhs dilation (2, 1), padding (2, 1) and (0, 1) -> y [1,
// 6, 8, 7]. H: 9 + 3 - 5 + 1 = 8, exact post 7 + 4 + 1 - 9 - 2 = 1; W: 7 + 1 - 2 + 1 = 7, exact post 1. OIHW
// beside NCHW is packed KCRS: read in place.
TEST_CASE("cudnnForwardGroupedDilated") {
  const auto at = convAttrs({1, 1}, {2, 0}, {1, 1}, {1, 1}, {2, 1}, {0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}, 2);
  const auto p = mapped(Shape{1, 4, 9, 7}, Shape{6, 2, 3, 2}, Shape{1, 6, 8, 7}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::Forward);
  TSR_COMPARE(p.groups, int64_t{2});
  TSR_COMPARE(p.x.strides, (V{252, 63, 7, 1}));
  TSR_COMPARE(p.w.dims, (V{6, 2, 3, 2}));
  TSR_COMPARE(p.w.strides, (V{12, 6, 2, 1}));
  TSR_COMPARE(p.y.strides, (V{336, 56, 7, 1}));
  TSR_COMPARE(p.dilations, (V{2, 1}));
  TSR_COMPARE(p.prePadding, (V{2, 0}));
  TSR_COMPARE(p.postPadding, (V{1, 1}));
  REQUIRE(!p.copyFilter);
  TSR_COMPARE(p.filterCopy.dims, (V{2, 3, 2, 3, 2}));
  TSR_COMPARE(p.filterCopy.strides, (V{36, 12, 6, 2, 1}));
}

// The data gradient the vjp emits for x [1, 2, 7] (NCW), w [3, 2, 3] (OIW), stride 2, padding 1 / 1, y [1, 3, 4]:
// conv(dy [1, 3, 4], flip(w) [3, 2, 3] read as [I, O, k], lhs dilation 2, padding 1 / 1) -> dx [1, 2, 7]. cuDNN's
// backward data of the forward convolution: stride 2, pre (3 - 1) - 1 = 1, post in [1, 2] -> 1; the flipped
// kernel with its feature roles swapped is w itself read flipped (CONVOLUTION mode), [3, 2, 3] KCRS in place.
// 1-D becomes 2-D with a unit dim in front.
TEST_CASE("cudnnBackwardData1d") {
  const auto at = convAttrs({1}, {1}, {1}, {2}, {1}, {0, 1, 2}, {1, 0, 2}, {0, 1, 2});
  const auto p = mapped(Shape{1, 3, 4}, Shape{3, 2, 3}, Shape{1, 2, 7}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::BackwardData);
  TSR_COMPARE((std::array{p.xValue, p.wValue, p.yValue}), (std::array{2, 1, 0}));
  TSR_COMPARE(p.x.dims, (V{1, 2, 1, 7}));  // dx
  TSR_COMPARE(p.x.strides, (V{14, 7, 7, 1}));
  TSR_COMPARE(p.y.dims, (V{1, 3, 1, 4}));  // dy
  TSR_COMPARE(p.y.strides, (V{12, 4, 4, 1}));
  TSR_COMPARE(p.w.dims, (V{3, 2, 1, 3}));
  TSR_COMPARE(p.w.strides, (V{6, 3, 3, 1}));
  REQUIRE(p.convolutionMode);
  REQUIRE(!p.copyFilter);
  TSR_COMPARE(p.strides, (V{1, 2}));
  TSR_COMPARE(p.dilations, (V{1, 1}));
  TSR_COMPARE(p.prePadding, (V{0, 1}));
  TSR_COMPARE(p.postPadding, (V{0, 1}));
  // The copy (the second try) reads the flip through a negative stride from the last element of each row.
  TSR_COMPARE(p.filterCopy.dims, (V{1, 3, 2, 3}));
  TSR_COMPARE(p.filterCopy.strides, (V{6, 6, 3, -1}));
  TSR_COMPARE(p.filterCopy.offset, int64_t{2});
  const cuda::CudnnConvProblem copied = cuda::withFilterCopy(p);
  REQUIRE(copied.copyFilter);
  REQUIRE(!copied.convolutionMode);
  TSR_COMPARE(copied.w, p.filterCopy.packed);
  REQUIRE(copied.key() != p.key());
}

// The grouped data gradient: x [1, 4, 6] (NCW), w [6, 2, 3] in 2 groups, stride 2, padding 1 / 1 -> y [1, 6,
// 3]. The vjp's kernel is [O/G, G*I, k] = [3, 4, 3] (rhs spec IOW): element [oj, g*2 + ci, j] = w[g*3 + oj, ci,
// j] flipped. cuDNN's W [6, 2, 3] has K = (g, oj): strides g -> 6, oj -> 12 are no single stride, so the filter
// is copied (and flipped there).
TEST_CASE("cudnnBackwardDataGroupedCopies") {
  const auto at = convAttrs({1}, {1}, {2}, {2}, {1}, {0, 1, 2}, {1, 0, 2}, {0, 1, 2}, 2);
  const auto p = mapped(Shape{1, 6, 3}, Shape{3, 4, 3}, Shape{1, 4, 6}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::BackwardData);
  TSR_COMPARE(p.groups, int64_t{2});
  REQUIRE(p.copyFilter);
  REQUIRE(!p.convolutionMode);
  TSR_COMPARE(p.w.dims, (V{6, 2, 1, 3}));
  TSR_COMPARE(p.w.strides, (V{6, 3, 3, 1}));
  TSR_COMPARE(p.filterCopy.dims, (V{2, 3, 2, 3}));
  TSR_COMPARE(p.filterCopy.strides, (V{6, 12, 3, -1}));
  TSR_COMPARE(p.filterCopy.offset, int64_t{2});
  TSR_COMPARE(p.prePadding, (V{0, 1}));
  TSR_COMPARE(p.postPadding, (V{0, 1}));  // exact 0, up to 1: nearest the pre padding
  TSR_COMPARE(p.x.dims, (V{1, 4, 1, 6}));
  TSR_COMPARE(p.y.dims, (V{1, 6, 1, 3}));
}

// The filter gradient the vjp emits for the same x [1, 2, 7], w [3, 2, 3], stride 2, padding 1 / 1: conv(x read
// as [C, N, W], dy [1, 3, 4] read as [O, N, W] (the window), rhs dilation 2, padding 1 / 1) -> dw [3, 2, 3].
// cuDNN's backward filter: stride 2 (the rhs dilation), pre 1, post 6 + 2 + 1 - 7 - 1 = 1.
TEST_CASE("cudnnBackwardFilter1d") {
  const auto at = convAttrs({1}, {1}, {1}, {1}, {2}, {1, 0, 2}, {1, 0, 2}, {1, 0, 2});
  const auto p = mapped(Shape{1, 2, 7}, Shape{1, 3, 4}, Shape{3, 2, 3}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::BackwardFilter);
  TSR_COMPARE((std::array{p.xValue, p.wValue, p.yValue}), (std::array{0, 2, 1}));
  TSR_COMPARE(p.x.dims, (V{1, 2, 1, 7}));
  TSR_COMPARE(p.y.dims, (V{1, 3, 1, 4}));
  TSR_COMPARE(p.w.dims, (V{3, 2, 1, 3}));
  TSR_COMPARE(p.w.strides, (V{6, 3, 3, 1}));
  REQUIRE(!p.copyFilter);
  TSR_COMPARE(p.strides, (V{1, 2}));
  TSR_COMPARE(p.dilations, (V{1, 1}));
  TSR_COMPARE(p.prePadding, (V{0, 1}));
  TSR_COMPARE(p.postPadding, (V{0, 1}));
}

// A depthwise filter gradient (NHWC x [2, 5, 5, 4], HWIO w [3, 3, 1, 4], 4 groups, padding 1): batch groups 4 ->
// backward filter in 4 groups. dw [3, 3, 1, 4] HWIO is [K=4, C=1, 3, 3] with K stride 1, R 12, S 4: no KRSC,
// so cuDNN writes a packed KRSC copy that is then scattered into dw.
TEST_CASE("cudnnBackwardFilterDepthwise") {
  const auto at = convAttrs({1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {3, 0, 1, 2}, {3, 0, 1, 2}, {2, 3, 0, 1}, 1, 4);
  const auto p = mapped(Shape{2, 5, 5, 4}, Shape{2, 5, 5, 4}, Shape{3, 3, 1, 4}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::BackwardFilter);
  TSR_COMPARE(p.groups, int64_t{4});
  TSR_COMPARE(p.x.dims, (V{2, 4, 5, 5}));
  TSR_COMPARE(p.x.strides, (V{100, 1, 20, 4}));
  TSR_COMPARE(p.y.strides, (V{100, 1, 20, 4}));
  REQUIRE(p.copyFilter);
  TSR_COMPARE(p.w.dims, (V{4, 1, 3, 3}));
  TSR_COMPARE(p.w.strides, (V{9, 1, 3, 1}));
  TSR_COMPARE(p.filterCopy.dims, (V{4, 1, 3, 3, 1}));
  TSR_COMPARE(p.filterCopy.strides, (V{1, 1, 12, 4, 4}));
  TSR_COMPARE(p.prePadding, (V{1, 1}));
  TSR_COMPARE(p.postPadding, (V{1, 1}));
}

// 3-D NCDHW x [1, 2, 4, 4, 4], OIDHW w [3, 2, 2, 2, 2], no padding -> y [1, 3, 3, 3, 3], bf16: five dims as they lie.
TEST_CASE("cudnnForward3dBf16") {
  const auto at = convAttrs({1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4},
                            {0, 1, 2, 3, 4});
  const auto p = mapped(Shape{1, 2, 4, 4, 4}, Shape{3, 2, 2, 2, 2}, Shape{1, 3, 3, 3, 3}, at, DType::BF16);
  TSR_COMPARE(p.dtype, DType::BF16);
  TSR_COMPARE(p.spatialDims(), 3);
  TSR_COMPARE(p.x.strides, (V{128, 64, 16, 4, 1}));
  TSR_COMPARE(p.w.strides, (V{16, 8, 4, 2, 1}));
  TSR_COMPARE(p.y.strides, (V{81, 27, 9, 3, 1}));
  TSR_COMPARE(p.postPadding, (V{0, 0, 0}));
  REQUIRE(!p.copyFilter);
}

// What cuDNN cannot express stays on the NVRTC kernel, with the reason.
TEST_CASE("cudnnDeclines") {
  auto reason = [](const Shape& lhs, const Shape& rhs, const Shape& out, const ir::ConvAttrs& at, DType t) {
    cuda::CudnnConvDecision d = cuda::mapConvToCudnn(Aval{lhs, t}, Aval{rhs, t}, Aval{out, t}, at);
    REQUIRE(!d.problem.has_value());
    return d.reason;
  };
  const auto plain = convAttrs({1}, {0}, {0}, {1}, {1}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2});
  REQUIRE(reason(Shape{1, 2, 5}, Shape{3, 2, 3}, Shape{1, 3, 3}, plain, DType::F64).find("f64") != std::string::npos);
  // A strided transposed convolution (lhs dilation and window strides).
  const auto stridedTransposed = convAttrs({2}, {0}, {0}, {2}, {1}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2});
  REQUIRE(reason(Shape{1, 2, 5}, Shape{3, 2, 3}, Shape{1, 3, 4}, stridedTransposed, DType::F32).find("lhs dilation") !=
          std::string::npos);
  // Negative padding (a crop).
  const auto crop = convAttrs({1}, {-1}, {0}, {1}, {1}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2});
  REQUIRE(reason(Shape{1, 2, 6}, Shape{3, 2, 3}, Shape{1, 3, 3}, crop, DType::F32).find("negative padding") !=
          std::string::npos);
}

// A forward convolution's epilogue as cuDNN pointwise steps. NHWC y [2, 5, 5, 8] is [N, K, H, W] = [2, 8, 5, 5]
// with strides [200, 1, 40, 8]; a bias is [1, 8, 1, 1] with its channel packed (stride 1, the others past it),
// a residual is laid out as y, a scalar is [1, 1, 1, 1].
TEST_CASE("cudnnEpilogueBiasResidualReluScale") {
  const auto at = convAttrs({1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0, 3, 1, 2}, {3, 2, 0, 1}, {0, 3, 1, 2});
  const auto p = mapped(Shape{2, 5, 5, 3}, Shape{3, 3, 3, 8}, Shape{2, 5, 5, 8}, at);
  TSR_COMPARE(p.y.dims, (V{2, 8, 5, 5}));
  TSR_COMPARE(p.y.strides, (V{200, 1, 40, 8}));
  using K = ops::ConvPostOp::Kind;
  using O = ops::ConvPostOp::Operand;
  const std::vector<ops::ConvPostOp> chain{{K::Add, O::PerChannel}, {K::Add, O::Full}, {K::Relu, O::None},
                                           {K::Mul, O::Scalar}};
  const cuda::CudnnEpilogueDecision d = cuda::mapEpilogueToCudnn(p, chain);
  REQUIRE_MESSAGE(d.epilogue.has_value(), d.reason);
  const auto& steps = d.epilogue->steps;
  REQUIRE(steps.size() == 4);
  std::vector<std::string> names;
  for (const auto& st : steps) names.push_back(cuda::cudnnPointwiseName(st.kind));
  TSR_COMPARE(names, (std::vector<std::string>{"add", "add", "relu_fwd", "mul"}));
  TSR_COMPARE((std::array{steps[0].binary, steps[1].binary, steps[2].binary, steps[3].binary}),
              (std::array{true, true, false, true}));
  TSR_COMPARE(steps[0].operand.dims, (V{1, 8, 1, 1}));
  TSR_COMPARE(steps[0].operand.strides, (V{8, 1, 8, 8}));
  TSR_COMPARE(steps[1].operand.dims, (V{2, 8, 5, 5}));
  TSR_COMPARE(steps[1].operand.strides, (V{200, 1, 40, 8}));
  TSR_COMPARE(steps[3].operand.dims, (V{1, 1, 1, 1}));
  // The plan cache tells fused graphs apart by their steps.
  TSR_COMPARE(d.epilogue->key(), std::string(" add([1,8,1,1]/[8,1,8,8]) add([2,8,5,5]/[200,1,40,8]) relu_fwd "
                                             "mul([1,1,1,1]/[1,1,1,1])"));
}

// 1-D: the unit dim cuDNN sees in front of the spatial one is a dim of 1 in the bias too.
TEST_CASE("cudnnEpilogue1dBias") {
  const auto at = convAttrs({1}, {0}, {0}, {1}, {1}, {0, 1, 2}, {0, 1, 2}, {0, 1, 2});
  const auto p = mapped(Shape{2, 3, 7}, Shape{4, 3, 3}, Shape{2, 4, 5}, at);
  const std::vector<ops::ConvPostOp> chain{{ops::ConvPostOp::Kind::Add, ops::ConvPostOp::Operand::PerChannel}};
  const cuda::CudnnEpilogueDecision d = cuda::mapEpilogueToCudnn(p, chain);
  REQUIRE_MESSAGE(d.epilogue.has_value(), d.reason);
  TSR_COMPARE(d.epilogue->steps[0].operand.dims, (V{1, 4, 1, 1}));
  TSR_COMPARE(d.epilogue->steps[0].operand.strides, (V{4, 1, 4, 4}));
}

// Only a forward convolution takes an epilogue (the fusion pass anchors no other).
TEST_CASE("cudnnEpilogueOnlyAfterAForwardConvolution") {
  const auto at = convAttrs({1}, {1}, {1}, {2}, {1}, {0, 1, 2}, {1, 0, 2}, {0, 1, 2});
  const auto p = mapped(Shape{1, 3, 4}, Shape{3, 2, 3}, Shape{1, 2, 7}, at);
  TSR_COMPARE(p.op, cuda::CudnnConvOp::BackwardData);
  const std::vector<ops::ConvPostOp> chain{{ops::ConvPostOp::Kind::Relu, ops::ConvPostOp::Operand::None}};
  const cuda::CudnnEpilogueDecision d = cuda::mapEpilogueToCudnn(p, chain);
  REQUIRE(!d.epilogue.has_value());
  REQUIRE(d.reason.find("backward_data") != std::string::npos);
}

// Every convolution of the training cases (forward, and the data and filter gradients the vjp emits, after the
// standard passes) goes to cuDNN as the operation named in its case; the fallback kernels and the filter copy
// compile.
TEST_CASE_FIXTURE(NvrtcEveryTime, "cudnnConvolutionsOfTrainingCases") {
  if (!cuda::cudnnBuilt()) TSR_SKIP("built without cuDNN");
  for (const ConvCase& c : convCases()) {
    const std::string caseName = c.name;
    CAPTURE(caseName);
    auto cg = convGradGraph(c);
    REQUIRE_MESSAGE(cg.ok(), cg.error().message);
    auto lowered = lowerForCuda(cg->graph);
    REQUIRE_MESSAGE(lowered.ok(), lowered.error().message);
    auto prog = cuda::generateProgram(**lowered);
    REQUIRE_MESSAGE(prog.ok(), prog.error().message);
    int convs = 0;
    for (const auto& n : cg->graph.nodes()) convs += n.op == ir::OpCode::ConvGeneralDilated;
    TSR_COMPARE(convs, 3);
    std::vector<std::string> ops;
    for (const auto& [ki, p] : prog->cudnnConvs) {
      TSR_COMPARE(prog->paths[ki], cuda::KernelPath::Cudnn);
      // The fallback: the convolution's own kernel (a conv group's anchor, the lone node's kernel otherwise).
      const bool group = (*lowered)->loweredKernels()[ki].info.kind == passes::GroupKind::Conv;
      REQUIRE((group ? prog->anchorIndex[ki] : prog->generatedIndex[ki]) >= 0);
      ops.push_back(cuda::cudnnConvOpName(p.op));
      TSR_COMPARE(p.dtype, c.dtype);
    }
    std::vector<std::string> want = c.ops;
    std::sort(ops.begin(), ops.end());
    std::sort(want.begin(), want.end());
    TSR_COMPARE(ops, want);
    std::string err = compileAll(prog->kernels);
    REQUIRE_MESSAGE(err.empty(), err.c_str());
  }
  auto r = cuda::compileCuda(cuda::cudnnFilterCopySource(), "cudnn_filter_copy");
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE(std::string(cuda::opPath(ops::registry().get(ir::OpCode::ConvGeneralDilated))), std::string("cudnn"));
}
