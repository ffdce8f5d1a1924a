// The CUDA backend on a GPU: every conformance case against its independent reference, a GPT-2 mini training
// step against the CPU executable, cuBLASLt at each matmul precision against a naive double-precision product,
// the timeline's events, NCCL's collectives with one rank, and convolutions with their gradients on cuDNN against
// the CPU executable, with and without their epilogues (flash attention: test_cuda_attention.cpp, in the same
// program). Without a GPU every test skips with the reason.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <iomanip>

#include "engine/backends/cuda/collective_kernels.h"
#include "engine/backends/cuda/executable.h"
#include "engine/backends/cuda/gemm.h"
#include "engine/backends/cuda/nccl_communicator.h"
#include "engine/dist/communicator.h"
#include "engine/ops/registry.h"
#include "engine/passes/pipeline.h"
#include "engine/runtime/profiler.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

// groupLoops, graphs: CompileOptions' switches (the environment's, TESSERA_CUDA_LOOP_GROUPS and
// TESSERA_CUDA_GRAPHS, must be on too).
Result<std::unique_ptr<cuda::Executable>> compileCuda(const ir::Graph& g, const std::string& name,
                                                      bool groupLoops = true, bool graphs = true) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry(), nullptr, cuda::fusionOptions()));
  cuda::CompileOptions o;
  o.name = name;
  o.groupLoops = groupLoops;
  o.graphs = graphs;
  return cuda::Executable::compile(g, ops::registry(), plan, o);
}

// Every output of a GPU run against the CPU's (downloaded first).
void requireOutputsMatch(cuda::Executable& exe, const ir::Graph& graph, const std::vector<cuda::DeviceBufferPtr>& got,
                         const std::vector<runtime::BufferPtr>& want, double rtol, double atol) {
  for (size_t o = 0; o < want.size(); ++o) {
    const Aval& a = graph.aval(graph.outputs()[o]);
    auto host = cuda::toHost(exe.device(), *got[o], a.bytes());
    REQUIRE(host.ok());
    const std::string d = compareTensors(fromBuffer(*host, a), fromBuffer(want[o], a), rtol, atol);
    REQUIRE_MESSAGE(d.empty(), "output " << o << ": " << d);
  }
}

// The GPT-2 mini training step at batch 4, sequence 64, and inputs for it (small positive floats, tokens < 512).
struct MiniStep {
  ClosedGraph step;
  std::vector<runtime::BufferPtr> inputs;
};
MiniStep gpt2MiniStep() {
  auto cg = projectStepGraph("gpt2_mini", 4, 64);
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  std::mt19937 rng(7);
  auto inputs = randomInputs(cg->graph, rng, 0.05, 512);
  return {std::move(*cg), std::move(inputs)};
}

}  // namespace

TEST_CASE("conformance") {
  SKIP_WITHOUT_GPU();
  ConformanceOptions only;
  only.targets = {"cuda"};
  only.kernel = false;
  ConformanceReport report = runConformance(allCases(), only);
  const std::vector<std::string>& failures = report.messages;
  const int runs = report.graphRuns["cuda"];
  for (size_t i = 0; i < std::min<size_t>(40, failures.size()); ++i) MESSAGE(failures[i]);
  MESSAGE(runs << " graphs run on the GPU, " << static_cast<long long>(failures.size()) << " failures");
  REQUIRE_MESSAGE(failures.empty(), failures.size() << " conformance failures on CUDA");
}

// The whole GPT-2 mini training step (forward, backward, clipping, AdamW) on the GPU against the CPU executable
// on the same inputs.
TEST_CASE("gpt2MiniStepMatchesCpu") {
  SKIP_WITHOUT_GPU();
  const MiniStep mini = gpt2MiniStep();
  const ir::Graph& graph = mini.step.graph;
  const auto& inputs = mini.inputs;
  auto cpuExe = lowerForCuda(graph);
  REQUIRE(cpuExe.ok());
  auto want = (*cpuExe)->run(inputs);
  REQUIRE_MESSAGE(want.ok(), want.error().message);
  auto exe = compileCuda(graph, "gpt2_mini_step");
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  MESSAGE((*exe)->describe().substr(0, 200));
  auto got = (*exe)->runHost(inputs);
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  for (size_t i = 0; i < want->size(); ++i) {
    const Aval& a = graph.aval(graph.outputs()[i]);
    std::string d = compareTensors(fromBuffer((*got)[i], a), fromBuffer((*want)[i], a), 2e-3, 2e-5);
    REQUIRE_MESSAGE(d.empty(), ("output " + std::to_string(i) + ": " + d).c_str());
  }
}

// The GPU timeline of a GPT-2 mini step against the host clock: an event per kernel and one more per GEMM
// epilogue (after its product, same fusion), in launch order, each inside the host interval that brackets the
// profiled run, together no longer than it.
TEST_CASE("gpt2MiniStepTimeline") {
  SKIP_WITHOUT_GPU();
  const MiniStep mini = gpt2MiniStep();
  const ir::Graph& graph = mini.step.graph;
  const auto& inputs = mini.inputs;
  auto exe = compileCuda(graph, "gpt2_mini_timeline");
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  std::vector<cuda::DeviceBufferPtr> dev;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto d = cuda::toDevice((*exe)->device(), *inputs[i], graph.aval(graph.inputs()[i]).bytes());
    REQUIRE(d.ok());
    dev.push_back(*d);
  }
  REQUIRE((*exe)->run(dev).ok());  // warm: modules loaded, pool grown
  REQUIRE((*exe)->device().synchronize().ok());
  runtime::Profiler prof;
  int64_t before = 0, after = 0;
  {
    runtime::ProfilerScope scope(prof);
    before = runtime::Profiler::nowNs();
    auto outs = (*exe)->run(dev);
    REQUIRE(outs.ok());
    REQUIRE((*exe)->device().synchronize().ok());
    after = runtime::Profiler::nowNs();
  }
  std::vector<runtime::ProfileEvent> events;
  for (auto& e : prof.events())
    if (e.device == "cuda:0") events.push_back(e);
  const int kernels = static_cast<int>((*exe)->lowered().loweredKernels().size());
  int epilogues = 0;
  int64_t busy = 0;
  const int64_t slack = 200'000;  // 0.2 ms: the anchor event's host time is taken just before it is recorded
  for (size_t i = 0; i < events.size(); ++i) {
    const runtime::ProfileEvent& e = events[i];
    CAPTURE(e.name);
    REQUIRE(e.durationNs >= 0);
    REQUIRE(e.startNs >= before - slack);
    REQUIRE(e.startNs + e.durationNs <= after + slack);
    if (i > 0) REQUIRE(e.startNs >= events[i - 1].startNs);
    busy += e.durationNs;
    if (e.name.ends_with(" epilogue")) {
      ++epilogues;
      REQUIRE(i > 0);
      REQUIRE(events[i - 1].fusion == e.fusion);
      REQUIRE(events[i - 1].name + " epilogue" == e.name);
    }
  }
  MESSAGE(events.size() << " events (" << epilogues << " GEMM epilogues) for " << kernels << " kernels; "
                        << busy / 1000 << " us busy in " << (after - before) / 1000 << " us");
  REQUIRE(static_cast<int>(events.size()) == kernels + epilogues);
  REQUIRE(epilogues > 0);  // GPT-2's products have fused epilogues (bias, gelu, residual)
  REQUIRE(busy <= after - before + slack);
}

// C = A B for A [256, 384], B [384, 512] at each precision against a double-precision loop: f32 is exact to
// f32 rounding, tf32 and bf16 lose input mantissa bits (relative errors near 2^-11 and 2^-8), so the
// setting is seen to take effect.
TEST_CASE("matmulPrecisionModes") {
  SKIP_WITHOUT_GPU();
  const int64_t M = 256, K = 384, N = 512;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(K * N));
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  std::vector<double> ref(static_cast<size_t>(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) ref[static_cast<size_t>(i * N + j)] += double(a[static_cast<size_t>(i * K + k)]) * b[static_cast<size_t>(k * N + j)];
  auto dev = cuda::Device::get(0);
  REQUIRE(dev.ok());
  cuda::Device& d = **dev;
  auto da = d.allocate(M * K * 4), db = d.allocate(K * N * 4), dc = d.allocate(M * N * 4);
  REQUIRE((da.ok() && db.ok() && dc.ok()));
  REQUIRE(d.upload((*da)->data(), a.data(), M * K * 4).ok());
  REQUIRE(d.upload((*db)->data(), b.data(), K * N * 4).ok());
  double err[3] = {0, 0, 0};
  for (auto p : {cuda::MatmulPrecision::F32, cuda::MatmulPrecision::TF32, cuda::MatmulPrecision::BF16}) {
    cuda::GemmSpec spec;
    spec.plan.m = M;
    spec.plan.n = N;
    spec.plan.k = K;
    spec.plan.lda = K;
    spec.plan.ldb = N;
    spec.precision = p;
    auto g = cuda::LtGemm::create(d, spec);
    REQUIRE_MESSAGE(g.ok(), g.error().message);
    REQUIRE((*g)->run((*da)->data(), (*db)->data(), (*dc)->data()).ok());
    std::vector<float> c(static_cast<size_t>(M * N));
    REQUIRE(d.download(c.data(), (*dc)->data(), M * N * 4).ok());
    double e = 0;
    for (size_t i = 0; i < c.size(); ++i) e = std::max(e, std::fabs(c[i] - ref[i]) / (1.0 + std::fabs(ref[i])));
    err[static_cast<int>(p)] = e;
  }
  MESSAGE("max relative error: f32 " << std::setprecision(3) << err[0] << ", tf32 " << err[1] << ", bf16 " << err[2]);
  REQUIRE(err[0] < 1e-5);
  REQUIRE((err[1] < 1e-2 && err[1] > 4 * err[0]));
  REQUIRE((err[2] < 5e-2 && err[2] > err[1]));
}

// Products that cuBLASLt reads through staged copies, against double-precision loops over the inputs as given
// and over the inputs rounded to bf16 (to nearest, ties to even, by frexp/nearbyint rather than bits): bf16
// precision on a batch with both operands transposed and padded leading dimensions (every matrix of the batch
// converted, not only the first), and a GEMM of over a GFLOP whose leading dimensions are not 16-byte aligned
// (the operands repacked, in f32 and in bf16).
double roundToBf16(float x) {
  if (!std::isfinite(x) || x == 0) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // [0.5, 1): 8 significant bits kept
  return std::ldexp(std::nearbyint(m * 256.0) / 256.0, e);
}

struct GemmErrors {
  double exact = 0, bf16Inputs = 0;  // max |c - ref| / (1 + |ref|)
};

// Random operands of `spec.plan` in [-1, 1] as T (f32, or bf16 rounded from them), their product on cuBLASLt as
// T: a, b and c on the host.
template <class T>
struct HostGemm {
  std::vector<T> a, b, c;
};
template <class T>
HostGemm<T> runLtGemm(const cuda::GemmSpec& spec, unsigned seed) {
  const cpu::GemmPlan& plan = spec.plan;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  const int64_t aElems = plan.batch * plan.strideA + (plan.transA ? plan.k : plan.m) * plan.lda;
  const int64_t bElems = plan.batch * plan.strideB + (plan.transB ? plan.n : plan.k) * plan.ldb;
  const int64_t cElems = plan.batch * plan.m * plan.n;
  constexpr int64_t size = sizeof(T);
  HostGemm<T> h{std::vector<T>(static_cast<size_t>(aElems)), std::vector<T>(static_cast<size_t>(bElems)),
                std::vector<T>(static_cast<size_t>(cElems))};
  for (auto& x : h.a) x = T(u(rng));
  for (auto& x : h.b) x = T(u(rng));
  auto dev = cuda::Device::get(0);
  REQUIRE(dev.ok());
  cuda::Device& d = **dev;
  auto da = d.allocate(aElems * size), db = d.allocate(bElems * size), dc = d.allocate(cElems * size);
  REQUIRE((da.ok() && db.ok() && dc.ok()));
  REQUIRE(d.upload((*da)->data(), h.a.data(), aElems * size).ok());
  REQUIRE(d.upload((*db)->data(), h.b.data(), bElems * size).ok());
  auto g = cuda::LtGemm::create(d, spec);
  REQUIRE_MESSAGE(g.ok(), g.error().message);
  REQUIRE((*g)->run((*da)->data(), (*db)->data(), (*dc)->data()).ok());
  REQUIRE(d.download(h.c.data(), (*dc)->data(), cElems * size).ok());
  REQUIRE(d.synchronize().ok());
  return h;
}

GemmErrors stagedGemmErrors(const cpu::GemmPlan& plan, cuda::MatmulPrecision precision) {
  cuda::GemmSpec spec;
  spec.plan = plan;
  spec.precision = precision;
  const HostGemm<float> h = runLtGemm<float>(spec, 5);
  const std::vector<float>& a = h.a;
  const std::vector<float>& b = h.b;
  const std::vector<float>& c = h.c;
  GemmErrors err;
  for (int64_t q = 0; q < plan.batch; ++q)
    for (int64_t i = 0; i < plan.m; ++i)
      for (int64_t j = 0; j < plan.n; ++j) {
        double ref = 0, refBf16 = 0;
        for (int64_t k = 0; k < plan.k; ++k) {
          const float x = a[static_cast<size_t>(q * plan.strideA + (plan.transA ? k * plan.lda + i : i * plan.lda + k))];
          const float y = b[static_cast<size_t>(q * plan.strideB + (plan.transB ? j * plan.ldb + k : k * plan.ldb + j))];
          ref += double(x) * y;
          refBf16 += roundToBf16(x) * roundToBf16(y);
        }
        const double got = c[static_cast<size_t>((q * plan.m + i) * plan.n + j)];
        err.exact = std::max(err.exact, std::fabs(got - ref) / (1.0 + std::fabs(ref)));
        err.bf16Inputs = std::max(err.bf16Inputs, std::fabs(got - refBf16) / (1.0 + std::fabs(refBf16)));
      }
  return err;
}

TEST_CASE("stagedGemms") {
  SKIP_WITHOUT_GPU();
  cpu::GemmPlan batched;
  batched.batch = 3;
  batched.m = 70;
  batched.n = 50;
  batched.k = 90;
  batched.transA = batched.transB = true;
  batched.lda = batched.m + 6;  // A stored k x lda
  batched.ldb = batched.k + 3;  // B stored n x ldb
  batched.strideA = batched.k * batched.lda;
  batched.strideB = batched.n * batched.ldb;
  const GemmErrors e = stagedGemmErrors(batched, cuda::MatmulPrecision::BF16);
  MESSAGE("bf16, batched and transposed: max relative error " << e.exact << ", against bf16 inputs " << e.bf16Inputs);
  REQUIRE(e.bf16Inputs < 5e-5);  // the inputs rounded exactly as the reference rounds them
  REQUIRE(e.exact > 1e-3);       // and not read as f32

  // 2 x 999 x 1001 x 501 = 1.0 GFLOP: every leading dimension odd; at bf16 computed padded (k with zeros, C's
  // rows and columns compacted afterwards)
  cpu::GemmPlan unaligned;
  unaligned.m = 999;
  unaligned.n = 1001;
  unaligned.k = 501;
  unaligned.lda = unaligned.k;
  unaligned.ldb = unaligned.n;
  const GemmErrors f32 = stagedGemmErrors(unaligned, cuda::MatmulPrecision::F32);
  const GemmErrors bf16 = stagedGemmErrors(unaligned, cuda::MatmulPrecision::BF16);
  MESSAGE("unaligned 999x1001x501: max relative error f32 " << f32.exact << "; bf16 " << bf16.exact
                                                              << ", against bf16 inputs " << bf16.bf16Inputs);
  REQUIRE(f32.exact < 5e-5);  // f32 accumulation over 501 products (1.3e-5 seen on an H200)
  REQUIRE(bf16.bf16Inputs < 5e-5);
  REQUIRE(bf16.exact > 1e-3);

  cpu::GemmPlan transposed = unaligned;  // the same padded, both operands transposed and with wider rows
  transposed.transA = transposed.transB = true;
  transposed.lda = transposed.m + 3;  // A stored k x lda
  transposed.ldb = transposed.k + 5;  // B stored n x ldb
  const GemmErrors t = stagedGemmErrors(transposed, cuda::MatmulPrecision::BF16);
  MESSAGE("unaligned and transposed: max relative error bf16 " << t.exact << ", against bf16 inputs " << t.bf16Inputs);
  REQUIRE(t.bf16Inputs < 5e-5);
  REQUIRE(t.exact > 1e-3);

  // ViT's attention products: a batch of 256 small products with every dimension 197 or 64, 1.3 GFLOP together:
  // the scores q k^T (k = 64, read as they lie) and the scores times v (k = 197: computed padded on tensor cores).
  cpu::GemmPlan scores;
  scores.batch = 256;
  scores.m = 197;
  scores.n = 197;
  scores.k = 64;
  scores.transB = true;
  scores.lda = scores.k;
  scores.ldb = scores.k;  // B stored n x k
  scores.strideA = scores.m * scores.k;
  scores.strideB = scores.n * scores.k;
  cpu::GemmPlan values;
  values.batch = 256;
  values.m = 197;
  values.n = 64;
  values.k = 197;
  values.lda = values.k;
  values.ldb = values.n;
  values.strideA = values.m * values.k;
  values.strideB = values.k * values.n;
  for (const cpu::GemmPlan& plan : {scores, values}) {
    const GemmErrors e32 = stagedGemmErrors(plan, cuda::MatmulPrecision::F32);
    const GemmErrors etf = stagedGemmErrors(plan, cuda::MatmulPrecision::TF32);
    const GemmErrors ebf = stagedGemmErrors(plan, cuda::MatmulPrecision::BF16);
    MESSAGE("batched " << plan.m << "x" << plan.n << "x" << plan.k << " batch " << plan.batch
                       << ": max relative error f32 " << e32.exact << ", tf32 " << etf.exact << ", bf16 " << ebf.exact
                       << " (against bf16 inputs " << ebf.bf16Inputs << ")");
    REQUIRE(e32.exact < 5e-5);
    REQUIRE(etf.exact < 1e-2);
    REQUIRE(ebf.bf16Inputs < 5e-5);
  }
}

// Autocast's products: bf16 operands and a bf16 result, repacked, padded and compacted as f32 ones are (the
// staging and compaction kernels reading bf16), against a double-precision loop over the same bf16 values; the
// result is rounded once to bf16, so within 2^-8 of the reference's scale.
double bf16GemmError(const cpu::GemmPlan& plan) {
  cuda::GemmSpec spec;
  spec.plan = plan;
  spec.inType = spec.outType = DType::BF16;
  const HostGemm<bf16> h = runLtGemm<bf16>(spec, 7);
  const std::vector<bf16>& a = h.a;
  const std::vector<bf16>& b = h.b;
  const std::vector<bf16>& c = h.c;
  double err = 0;
  for (int64_t q = 0; q < plan.batch; ++q)
    for (int64_t i = 0; i < plan.m; ++i)
      for (int64_t j = 0; j < plan.n; ++j) {
        double ref = 0;
        for (int64_t k = 0; k < plan.k; ++k)
          ref += double(float(a[static_cast<size_t>(q * plan.strideA + (plan.transA ? k * plan.lda + i : i * plan.lda + k))])) *
                 float(b[static_cast<size_t>(q * plan.strideB + (plan.transB ? j * plan.ldb + k : k * plan.ldb + j))]);
        const double got = float(c[static_cast<size_t>((q * plan.m + i) * plan.n + j)]);
        err = std::max(err, std::fabs(got - ref) / (1.0 + std::fabs(ref)));
      }
  return err;
}

TEST_CASE("bf16GemmsPadded") {
  SKIP_WITHOUT_GPU();
  cpu::GemmPlan unaligned;  // 1.0 GFLOP, every dimension odd: padded, C compacted
  unaligned.m = 999;
  unaligned.n = 1001;
  unaligned.k = 501;
  unaligned.lda = unaligned.k;
  unaligned.ldb = unaligned.n;
  cpu::GemmPlan transposed = unaligned;
  transposed.transA = transposed.transB = true;
  transposed.lda = transposed.m + 3;
  transposed.ldb = transposed.k + 5;
  cpu::GemmPlan small = unaligned;  // under a GFLOP: read as they lie
  small.m = 65;
  small.n = 33;
  small.k = 17;
  small.lda = small.k;
  small.ldb = small.n;
  for (const cpu::GemmPlan& plan : {unaligned, transposed, small}) {
    const double e = bf16GemmError(plan);
    MESSAGE("bf16 in and out " << plan.m << "x" << plan.n << "x" << plan.k << (plan.transA ? " transposed" : "")
                               << ": max relative error " << e);
    REQUIRE(e < 1.0 / 128);
  }
}

// Column sums over many rows into few outputs (a bias gradient [tokens, features] -> [features], and one with a
// kept leading dim) split the rows into chunks added atomically; against a double-precision loop.
TEST_CASE("chunkedColumnSums") {
  SKIP_WITHOUT_GPU();
  const auto& reg = ops::registry();
  for (Shape shape : {Shape{20000, 77}, Shape{3, 5000, 40}}) {
    ir::Graph g;
    ir::ValueId x = g.addInput(Aval{shape, DType::F32});
    auto twice = g.addNode(reg, ir::OpCode::Add, {x, x}, ir::NoAttrs{});
    REQUIRE(twice.ok());
    const int rank = static_cast<int>(shape.dims().size());
    const int64_t rdim = rank - 2;
    auto sum = g.addNode(reg, ir::OpCode::ReduceSum, {(*twice)[0]}, ir::ReduceAttrs{{rdim}});
    REQUIRE(sum.ok());
    g.setOutputs(*sum);
    std::mt19937 rng(11);
    auto in = randomInputs(g, rng, 1.0, 0);
    const int64_t k1 = rank == 3 ? shape[0] : 1, r = shape[rank - 2], k2 = shape[rank - 1];
    const float* p = static_cast<const float*>(in[0]->data());
    auto exe = compileCuda(g, "chunked_column_sum");
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    auto got = (*exe)->runHost(in);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    const float* out = static_cast<const float*>((*got)[0]->data());
    double worst = 0;
    for (int64_t a = 0; a < k1; ++a)
      for (int64_t c = 0; c < k2; ++c) {
        double want = 0, scale = 0;
        for (int64_t i = 0; i < r; ++i) {
          const double v = 2.0 * p[(a * r + i) * k2 + c];
          want += v;
          scale += std::fabs(v);
        }
        worst = std::max(worst, std::fabs(out[a * k2 + c] - want) / scale);
      }
    MESSAGE("column sums " << rank << "-d: worst error / sum of magnitudes " << worst);
    REQUIRE(worst < 1e-6);
  }
}

// NCCL with one rank, made as mpirun's ranks make theirs: the unique id through the bootstrap records over a host
// communicator (here one in-process device), ncclCommInitRank, made once for the group. Each collective on device
// buffers against the op's CPU kernel for the same group of one (the identity) on the same data: all_reduce
// (f32 and i32, in place too), all_gather, reduce_scatter, all_to_all and a permute to itself.
TEST_CASE("ncclOneRankAgainstCpu") {
  SKIP_WITHOUT_GPU();
  if (!cuda::ncclBuilt()) TSR_SKIP("built without NCCL");
  auto host = dist::makeInProcessCommunicator(1);
  std::mt19937 rng(11);
  Status st = dist::runOnDevices(*host, [&](int self) -> Status {
    TSR_ASSIGN(int ordinal, cuda::gpuForLocalDevice(0));
    TSR_ASSIGN(cuda::Device * dev, cuda::Device::get(ordinal));
    const ir::Ints group = {0};
    TSR_ASSIGN(cuda::NcclGroup g, cuda::ncclGroup(*host, self, *dev, group, 1));
    TSR_ASSIGN(cuda::NcclGroup again, cuda::ncclGroup(*host, self, *dev, group, 1));
    if (again.comm != g.comm || g.rank != 0 || g.size != 1) return makeError("the group's communicator is not kept");
    void* stream = dev->computeStream();
    for (DType t : {DType::F32, DType::I32, DType::BF16}) {
      const Aval a{Shape{37, 29}, t};
      TSR_ASSIGN(runtime::BufferPtr x, runtime::Buffer::allocate(a.bytes()));
      for (int64_t i = 0; i < a.bytes(); ++i) static_cast<uint8_t*>(x->data())[i] = static_cast<uint8_t>(rng() % 61);
      // The CPU's all_reduce of the group [0], run by the op's kernel on this device of the run.
      std::vector<char> cpu(static_cast<size_t>(a.bytes()));
      const ir::Attrs attrs = ir::AllReduceAttrs{group, 1};
      const ir::TensorView in[1] = {ir::TensorView{x->data(), a, 0}};
      const ir::MutableTensorView out[1] = {ir::MutableTensorView{cpu.data(), a, 0}};
      ops::registry().get(ir::OpCode::AllReduce).cpu(ir::CpuKernelArgs{in, out, attrs});
      TSR_ASSIGN(cuda::DeviceBufferPtr dx, cuda::toDevice(*dev, *x, a.bytes()));
      TSR_ASSIGN(cuda::DeviceBufferPtr dy, dev->allocate(a.bytes()));
      std::vector<char> got(static_cast<size_t>(a.bytes()));
      auto expect = [&](const char* what) -> Status {
        TSR_TRY(dev->download(got.data(), dy->data(), a.bytes()));
        if (got != cpu) return makeError("{} {}: NCCL's result differs from the CPU kernel's", what, a.toString());
        return {};
      };
      TSR_TRY(cuda::ncclAllReduce(g, dx->data(), dy->data(), a.numel(), t, stream));
      TSR_TRY(expect("all_reduce"));
      TSR_TRY(cuda::ncclReduceScatter(g, dx->data(), dy->data(), a.numel(), t, stream));
      TSR_TRY(expect("reduce_scatter"));
      TSR_TRY(cuda::ncclAllGather(g, dx->data(), dy->data(), a.bytes(), stream));
      TSR_TRY(expect("all_gather"));
      TSR_TRY(cuda::ncclAllToAll(g, dx->data(), dy->data(), a.bytes(), stream));
      TSR_TRY(expect("all_to_all"));
      const std::pair<int, int> toItself[1] = {{0, 0}};
      TSR_TRY(cuda::ncclPermute(g, toItself, dx->data(), dy->data(), a.bytes(), stream));
      TSR_TRY(expect("collective_permute"));
      TSR_TRY(dev->upload(dy->data(), x->data(), a.bytes()));
      TSR_TRY(cuda::ncclPermute(g, {}, dx->data(), dy->data(), a.bytes(), stream));  // no pair targets it: zeros
      std::fill(cpu.begin(), cpu.end(), 0);
      TSR_TRY(expect("collective_permute without a source"));
      TSR_TRY(dev->upload(dy->data(), x->data(), a.bytes()));
      TSR_TRY(cuda::ncclAllReduce(g, dy->data(), dy->data(), a.numel(), t, stream));  // in place
      std::memcpy(cpu.data(), x->data(), cpu.size());
      TSR_TRY(expect("all_reduce in place"));
    }
    return {};
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
}

// The chunk layouts a collective along a dim other than 0 moves through: [outer, n, row] to [n, outer, row] and
// back, by strided device copies, against the same rearrangement written as loops here.
TEST_CASE("collectiveChunkLayoutOnDevice") {
  SKIP_WITHOUT_GPU();
  auto dev = cuda::Device::get(0);
  REQUIRE(dev.ok());
  const int64_t outer = 5, n = 3, row = 12, bytes = outer * n * row;
  std::vector<uint8_t> x(static_cast<size_t>(bytes)), want(x.size()), got(x.size()), back(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 13 + 7);
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < row; ++b)
        want[static_cast<size_t>((j * outer + a) * row + b)] = x[static_cast<size_t>((a * n + j) * row + b)];
  auto src = (*dev)->allocate(bytes), mid = (*dev)->allocate(bytes), dst = (*dev)->allocate(bytes);
  REQUIRE((src.ok() && mid.ok() && dst.ok()));
  REQUIRE((*dev)->upload((*src)->data(), x.data(), bytes).ok());
  REQUIRE(cuda::packChunks((*src)->data(), (*mid)->data(), outer, n, row, (*dev)->computeStream()).ok());
  REQUIRE(cuda::unpackChunks((*mid)->data(), (*dst)->data(), outer, n, row, (*dev)->computeStream()).ok());
  REQUIRE((*dev)->download(got.data(), (*mid)->data(), bytes).ok());
  REQUIRE((*dev)->download(back.data(), (*dst)->data(), bytes).ok());
  REQUIRE(got == want);
  REQUIRE(back == x);
}

// Convolutions and both their gradients (convCases: NCHW and NHWC, strided, asymmetric padding, dilated, grouped,
// depthwise, 1-D, 3-D, bf16) against the CPU backend on the same inputs, and the executable runs each of the
// three convolutions on cuDNN (asymmetric padding: where cuDNN has an engine for it; its NVRTC kernel otherwise,
// still checked against the CPU). A filter copy, where a case's filter layout needs one, runs here too.
TEST_CASE("cudnnConvolutionsMatchCpu") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cudnnBuilt()) TSR_SKIP("built without cuDNN");
  MESSAGE(cuda::cudnnVersionString());
  // Every case runs, whatever an earlier one did: a GPU run reports all that fails at once.
  for (const ConvCase& c : convCases()) {
    const std::string caseName = c.name;
    CAPTURE(caseName);
    auto cg = convGradGraph(c);
    REQUIRE_MESSAGE(cg.ok(), cg.error().message);
    std::mt19937 rng(17);
    auto inputs = randomInputs(cg->graph, rng, 1.0, 0);
    auto cpuExe = lowerForCuda(cg->graph);
    REQUIRE(cpuExe.ok());
    auto want = (*cpuExe)->run(inputs);
    REQUIRE_MESSAGE(want.ok(), want.error().message);
    auto exe = compileCuda(cg->graph, c.name);
    CHECK_MESSAGE(exe.ok(), (std::string(c.name) + ": " + (exe.ok() ? "" : exe.error().message)).c_str());
    if (!exe.ok()) continue;
    const std::string described = (*exe)->describe();
    const int onCudnn = (*exe)->numKernels(cuda::KernelPath::Cudnn);
    MESSAGE(caseName << ": " << onCudnn << " of 3 convolutions on cuDNN\n" << described);
    if (!c.asymmetric) CHECK_MESSAGE(onCudnn == 3, described);
    auto got = (*exe)->runHost(inputs);
    CHECK_MESSAGE(got.ok(), (std::string(c.name) + ": " + (got.ok() ? "" : got.error().message)).c_str());
    if (!got.ok()) continue;
    // f32 at f32 precision: f32 rounding over sums of up to a few hundred products; bf16: one rounding of the
    // result on both sides, and bf16 intermediates (the gradients' inputs) where the two differ by one ulp.
    const double rtol = c.dtype == DType::BF16 ? 3e-2 : 1e-4, atol = c.dtype == DType::BF16 ? 3e-2 : 1e-5;
    for (size_t i = 0; i < want->size(); ++i) {
      const Aval& a = cg->graph.aval(cg->graph.outputs()[i]);
      std::string d = compareTensors(fromBuffer((*got)[i], a), fromBuffer((*want)[i], a), rtol, atol);
      CHECK_MESSAGE(d.empty(), (std::string(c.name) + " output " + std::to_string(i) + ": " + d).c_str());
    }
  }
}

// The same convolution at f32 and at tf32 precision: both within tolerance of the CPU, and the executable keeps
// the precision it was compiled with (no tensor-core engine at f32).
TEST_CASE("cudnnConvolutionPrecision") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cudnnBuilt()) TSR_SKIP("built without cuDNN");
  ConvCase c = convCases()[1];  // NHWC, strided
  c.lhs = Shape{4, 32, 32, 64};
  c.rhs = Shape{3, 3, 64, 64};
  auto cg = convGradGraph(c);
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  std::mt19937 rng(23);
  auto inputs = randomInputs(cg->graph, rng, 1.0, 0);
  auto cpuExe = lowerForCuda(cg->graph);
  REQUIRE(cpuExe.ok());
  auto want = (*cpuExe)->run(inputs);
  REQUIRE(want.ok());
  const cuda::MatmulPrecision before = cuda::matmulPrecision();
  double err[2] = {0, 0};
  for (auto p : {cuda::MatmulPrecision::F32, cuda::MatmulPrecision::TF32}) {
    cuda::setMatmulPrecision(p);
    auto exe = compileCuda(cg->graph, "conv_precision");
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    TSR_COMPARE((*exe)->numKernels(cuda::KernelPath::Cudnn), 3);
    auto got = (*exe)->runHost(inputs);
    REQUIRE(got.ok());
    const Aval& a = cg->graph.aval(cg->graph.outputs()[0]);
    const HostTensor g = fromBuffer((*got)[0], a), w = fromBuffer((*want)[0], a);
    double e = 0;
    for (int64_t i = 0; i < g.numel(); ++i) e = std::max(e, std::fabs(g.get(i) - w.get(i)) / (1.0 + std::fabs(w.get(i))));
    err[p == cuda::MatmulPrecision::TF32] = e;
  }
  cuda::setMatmulPrecision(before);
  MESSAGE("conv forward max relative error: f32 " << err[0] << ", tf32 " << err[1]);
  REQUIRE(err[0] < 1e-5);
  REQUIRE(err[1] < 2e-2);
}

// A convolution with its epilogue (bias, residual add, relu: one conv group) against the CPU backend, at f32 and
// tf32 precision. cuDNN runs the chain in the convolution's graph where an engine takes it (describe says
// "fused"), else the convolution and then the generated epilogue; the values agree either way.
TEST_CASE("cudnnConvEpilogues") {
  SKIP_WITHOUT_GPU();
  if (!cuda::cudnnBuilt()) TSR_SKIP("built without cuDNN");
  const std::vector<Aval> avals{Aval{Shape{4, 16, 16, 32}, DType::F32}, Aval{Shape{3, 3, 32, 32}, DType::F32},
                                Aval{Shape{32}, DType::F32}, Aval{Shape{4, 16, 16, 32}, DType::F32}};
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        ConvDimensionNumbers dn{"NHWC", "HWIO", "NHWC"};
        Array y = convGeneralDilated(in[0], in[1], {1, 1}, "SAME", {}, {}, dn);
        return std::vector<Array>{relu(y + reshape(in[2], {1, 1, 1, 32}) + in[3])};
      },
      avals, "conv_epilogue");
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  REQUIRE(pm.run(cg->graph, ctx).ok());
  std::mt19937 rng(29);
  auto inputs = randomInputs(cg->graph, rng, 1.0, 0);
  auto cpuExe = lowerForCuda(cg->graph);
  REQUIRE(cpuExe.ok());
  int groups = 0;
  for (const auto& k : (*cpuExe)->loweredKernels()) groups += k.info.kind == passes::GroupKind::Conv && !k.postOps.empty();
  TSR_COMPARE(groups, 1);
  auto want = (*cpuExe)->run(inputs);
  REQUIRE(want.ok());
  const cuda::MatmulPrecision before = cuda::matmulPrecision();
  for (auto p : {cuda::MatmulPrecision::F32, cuda::MatmulPrecision::TF32}) {
    cuda::setMatmulPrecision(p);
    auto exe = compileCuda(cg->graph, "conv_epilogue");
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    const std::string described = (*exe)->describe();
    MESSAGE(std::string(cuda::matmulPrecisionName(p)) << ":\n" << described);
    TSR_COMPARE((*exe)->numKernels(cuda::KernelPath::Cudnn), 1);
    auto got = (*exe)->runHost(inputs);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    const Aval& a = cg->graph.aval(cg->graph.outputs()[0]);
    const double tol = p == cuda::MatmulPrecision::F32 ? 1e-4 : 2e-2;
    const std::string d = compareTensors(fromBuffer((*got)[0], a), fromBuffer((*want)[0], a), tol, tol);
    CHECK_MESSAGE(d.empty(), d.c_str());
  }
  cuda::setMatmulPrecision(before);
}

// A value that several products read at bf16 is converted once, and the copy is shared and freed after its last
// reader: x feeds two products as it lies and a third transposed. Against the CPU executable on the inputs
// rounded to bf16 (to nearest even, by frexp), so only the order of f32 accumulation differs.
TEST_CASE("sharedBf16OperandCopies") {
  SKIP_WITHOUT_GPU();
  std::vector<Aval> avals = {Aval{Shape{256, 512}, DType::F32}, Aval{Shape{512, 384}, DType::F32},
                             Aval{Shape{512, 384}, DType::F32}, Aval{Shape{256, 384}, DType::F32}};
  auto cg = makeGraph(
      [](const std::vector<Array>& in) {
        Array y = matmul(in[0], in[1]) + matmul(in[0], in[2]);
        return std::vector<Array>{y, matmul(transpose(in[0]), in[3])};
      },
      avals, "shared_copies");
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  REQUIRE(pm.run(cg->graph, ctx).ok());
  std::mt19937 rng(31);
  auto inputs = randomInputs(cg->graph, rng, 1.0, 0);
  std::vector<runtime::BufferPtr> rounded;
  for (const auto& b : inputs) {
    auto r = runtime::Buffer::allocateUninitialized(b->size());
    REQUIRE(r.ok());
    const float* x = static_cast<const float*>(b->data());
    float* y = static_cast<float*>((*r)->data());
    for (size_t i = 0; i < static_cast<size_t>(b->size()) / 4; ++i) y[i] = static_cast<float>(roundToBf16(x[i]));
    rounded.push_back(*r);
  }
  auto cpuExe = lowerForCuda(cg->graph);
  REQUIRE(cpuExe.ok());
  auto want = (*cpuExe)->run(rounded);
  REQUIRE(want.ok());
  const cuda::MatmulPrecision before = cuda::matmulPrecision();
  cuda::setMatmulPrecision(cuda::MatmulPrecision::BF16);
  auto exe = compileCuda(cg->graph, "shared_copies");
  cuda::setMatmulPrecision(before);
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  const std::string described = (*exe)->describe();
  MESSAGE(described);
  REQUIRE(described.find("1 bf16 operand copies shared") != std::string::npos);
  for (int rep = 0; rep < 2; ++rep) {  // twice: the copy is made again on each run
    auto got = (*exe)->runHost(inputs);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    for (size_t o = 0; o < 2; ++o) {
      const Aval& a = cg->graph.aval(cg->graph.outputs()[o]);
      const std::string d = compareTensors(fromBuffer((*got)[o], a), fromBuffer((*want)[o], a), 1e-4, 1e-4);
      CHECK_MESSAGE(d.empty(), d.c_str());
    }
  }
}

// Six GPT-2 mini steps, each from the CPU executable's state after the step before (the independent
// reference), uploaded into one of two fixed sets of device buffers in turn, as a loop's batches alternate. With
// the AdamW loops grouped and the runs as CUDA graphs (the first run eager, then a capture for each set, then
// replays, which must read the inputs uploaded since), and with both switched off, every output is the CPU's at
// every step.
TEST_CASE("loopGroupsAndGraphsMatchCpu") {
  SKIP_WITHOUT_GPU();
  const MiniStep mini = gpt2MiniStep();
  const ir::Graph& graph = mini.step.graph;
  const auto carries = stepCarries(mini.step);
  REQUIRE(carries.size() >= 3 * 28);  // params, AdamW's two moments
  auto cpuExe = lowerForCuda(graph);
  REQUIRE(cpuExe.ok());
  constexpr int kSteps = 6;
  std::vector<std::vector<runtime::BufferPtr>> cpuIn{mini.inputs}, cpuOut;
  for (int s = 0; s < kSteps; ++s) {
    auto out = (*cpuExe)->run(cpuIn.back());
    REQUIRE_MESSAGE(out.ok(), out.error().message);
    std::vector<runtime::BufferPtr> next = cpuIn.back();
    for (auto [o, i] : carries) next[i] = (*out)[o];
    cpuOut.push_back(std::move(*out));
    cpuIn.push_back(std::move(next));
  }
  for (bool on : {true, false}) {
    CAPTURE(on);
    auto exe = compileCuda(graph, on ? "gpt2_mini_grouped_graphs" : "gpt2_mini_alone_eager", on, on);
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    cuda::Device& dev = (*exe)->device();
    std::vector<std::vector<cuda::DeviceBufferPtr>> sets(2);
    for (auto& set : sets)
      for (ir::ValueId v : graph.inputs()) {
        auto b = dev.allocate(graph.aval(v).bytes());
        REQUIRE(b.ok());
        set.push_back(*b);
      }
    for (int s = 0; s < kSteps; ++s) {
      CAPTURE(s);
      const auto& set = sets[static_cast<size_t>(s % 2)];
      for (size_t i = 0; i < set.size(); ++i)
        REQUIRE(dev.upload(set[i]->data(), cpuIn[static_cast<size_t>(s)][i]->data(), graph.aval(graph.inputs()[i]).bytes()).ok());
      auto outs = (*exe)->run(set);
      REQUIRE_MESSAGE(outs.ok(), outs.error().message);
      requireOutputsMatch(**exe, graph, *outs, cpuOut[static_cast<size_t>(s)], 2e-3, 2e-5);
    }
    const std::string described = (*exe)->describe();
    MESSAGE(described.substr(0, described.find('\n', described.find('\n') + 1)));
    if (on) {
      REQUIRE((*exe)->groupedLoops() >= 28);
      REQUIRE((*exe)->loopGroupLaunches() < (*exe)->groupedLoops());
      TSR_COMPARE((*exe)->graphCaptures(), 2);
      TSR_COMPARE((*exe)->graphReplays(), kSteps - 3);
    } else {
      TSR_COMPARE((*exe)->loopGroupLaunches(), 0);
      TSR_COMPARE((*exe)->graphCaptures(), 0);
      REQUIRE(described.find("runs kernel by kernel") != std::string::npos);
    }
  }
}

// A training loop on the GPU: each step's parameters and optimizer state go back in as the next step's inputs
// (the executable hands the buffers the loop has dropped out again, so two graphs replay in turn). Grouped and
// replayed, the state after six steps is the state kernel by kernel.
TEST_CASE("graphsFollowATrainingLoop") {
  SKIP_WITHOUT_GPU();
  const MiniStep mini = gpt2MiniStep();
  const ir::Graph& graph = mini.step.graph;
  const auto carries = stepCarries(mini.step);
  constexpr int kSteps = 6;
  std::vector<std::vector<runtime::BufferPtr>> last;
  for (bool on : {true, false}) {
    auto exe = compileCuda(graph, on ? "gpt2_mini_loop_graphs" : "gpt2_mini_loop_eager", on, on);
    REQUIRE_MESSAGE(exe.ok(), exe.error().message);
    std::vector<cuda::DeviceBufferPtr> cur;
    for (size_t i = 0; i < mini.inputs.size(); ++i) {
      auto d = cuda::toDevice((*exe)->device(), *mini.inputs[i], graph.aval(graph.inputs()[i]).bytes());
      REQUIRE(d.ok());
      cur.push_back(*d);
    }
    std::vector<runtime::BufferPtr> outsHost;
    for (int s = 0; s < kSteps; ++s) {
      auto outs = (*exe)->run(cur);
      REQUIRE_MESSAGE(outs.ok(), outs.error().message);
      for (auto [o, i] : carries) cur[i] = (*outs)[o];
      if (s == kSteps - 1)
        for (size_t o = 0; o < outs->size(); ++o) {
          auto h = cuda::toHost((*exe)->device(), *(*outs)[o], graph.aval(graph.outputs()[o]).bytes());
          REQUIRE(h.ok());
          outsHost.push_back(*h);
        }
    }
    if (on) {
      TSR_COMPARE((*exe)->graphCaptures(), 2);
      TSR_COMPARE((*exe)->graphReplays(), kSteps - 3);
    }
    last.push_back(std::move(outsHost));
  }
  for (size_t o = 0; o < last[0].size(); ++o) {
    const Aval& a = graph.aval(graph.outputs()[o]);
    const std::string d = compareTensors(fromBuffer(last[0][o], a), fromBuffer(last[1][o], a), 1e-3, 1e-5);
    REQUIRE_MESSAGE(d.empty(), "output " << o << ": " << d);
  }
}

// A program with a kernel on host copies (reduce_prod runs its CPU kernel) never becomes a graph: describe()
// says why, and its runs are the CPU's.
TEST_CASE("hostKernelsRunEagerly") {
  SKIP_WITHOUT_GPU();
  const ir::Graph g = hostKernelGraph();
  auto exe = compileCuda(g, "host_kernel");
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  auto cpuExe = lowerForCuda(g);
  REQUIRE(cpuExe.ok());
  std::mt19937 rng(3);
  const auto inputs = randomInputs(g, rng, 0.5, 1);
  auto want = (*cpuExe)->run(inputs);
  REQUIRE(want.ok());
  for (int run = 0; run < 3; ++run) {
    auto got = (*exe)->runHost(inputs);
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    for (size_t o = 0; o < want->size(); ++o) {
      const Aval& a = g.aval(g.outputs()[o]);
      const std::string d = compareTensors(fromBuffer((*got)[o], a), fromBuffer((*want)[o], a), 1e-5, 1e-6);
      REQUIRE_MESSAGE(d.empty(), "output " << o << ": " << d);
    }
  }
  TSR_COMPARE((*exe)->graphCaptures(), 0);
  REQUIRE_MESSAGE((*exe)->describe().find("runs its CPU kernel on host copies") != std::string::npos,
                  (*exe)->describe());
}
