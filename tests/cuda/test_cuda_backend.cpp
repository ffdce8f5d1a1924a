// The CUDA backend on a GPU: every conformance case against its independent reference, a GPT-2 mini training
// step against the CPU executable, cuBLASLt at each matmul precision against a naive double-precision product,
// the timeline's events, and NCCL's all_reduce on one GPU. Without a GPU every test skips with the reason.
#include <QtTest>

#include <cmath>

#include "engine/backends/cuda/executable.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/backends/cuda/gemm.h"
#include "engine/backends/cuda/nccl_communicator.h"
#include "engine/ops/registry.h"
#include "engine/runtime/profiler.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

#define SKIP_WITHOUT_GPU()                                              \
  do {                                                                  \
    std::string why = cuda::unavailableReason();                        \
    if (!why.empty()) QSKIP(qPrintable("CUDA backend tests: " + QString::fromStdString(why))); \
  } while (0)

Result<std::unique_ptr<cuda::Executable>> compileCuda(const ir::Graph& g, const std::string& name) {
  TSR_ASSIGN(passes::FusionPlan plan, passes::planFusion(g, ops::registry()));
  cuda::CompileOptions o;
  o.name = name;
  return cuda::Executable::compile(g, ops::registry(), plan, o);
}

}  // namespace

class TestCudaBackend : public QObject {
  Q_OBJECT
 private slots:
  void conformance() {
    SKIP_WITHOUT_GPU();
    const auto& reg = ops::registry();
    QStringList failures;
    int runs = 0;
    for (const OpCase& c : allCases()) {
      std::vector<HostTensor> want = c.reference(c.inputs);
      for (bool transposed : {false, true}) {
        if (transposed && (c.inputs.empty() || c.inputs[0].aval.rank() != 2)) continue;
        ir::Graph g;
        std::vector<runtime::BufferPtr> feeds;
        std::vector<ir::ValueId> operands;
        for (size_t i = 0; i < c.inputs.size(); ++i) {
          const HostTensor& t = c.inputs[i];
          if (transposed && i == 0) {
            HostTensor tt = HostTensor::zeros(Aval{Shape{t.aval.shape[1], t.aval.shape[0]}, t.aval.dtype});
            for (int64_t r = 0; r < t.aval.shape[0]; ++r)
              for (int64_t q = 0; q < t.aval.shape[1]; ++q)
                tt.setBits(q * t.aval.shape[0] + r, t.getBits(r * t.aval.shape[1] + q));
            ir::ValueId in = g.addInput(tt.aval);
            feeds.push_back(toBuffer(tt));
            auto tr = g.addNode(reg, ir::OpCode::Transpose, {in}, ir::TransposeAttrs{{1, 0}});
            QVERIFY(tr.ok());
            operands.push_back((*tr)[0]);
          } else {
            operands.push_back(g.addInput(t.aval));
            feeds.push_back(toBuffer(t));
          }
        }
        auto res = g.addNode(reg, c.op, operands, c.attrs);
        QVERIFY2(res.ok(), c.label.c_str());
        g.setOutputs(*res);
        const std::string tag = c.label + (transposed ? " (transposed input)" : "");
        auto exe = compileCuda(g, c.label);
        if (!exe.ok()) {
          failures << QString::fromStdString(tag + ": " + exe.error().message);
          continue;
        }
        auto outs = (*exe)->runHost(feeds);
        if (!outs.ok()) {
          failures << QString::fromStdString(tag + ": " + outs.error().message);
          continue;
        }
        for (size_t r = 0; r < want.size(); ++r) {
          std::string d = compareWithReference(fromBuffer((*outs)[r], g.aval((*res)[r])), want[r], c);
          if (!d.empty()) failures << QString::fromStdString(tag + " result " + std::to_string(r) + ": " + d);
        }
        ++runs;
      }
    }
    for (int i = 0; i < std::min<int>(40, static_cast<int>(failures.size())); ++i) qWarning("%s", qPrintable(failures[i]));
    qInfo("%d graphs run on the GPU, %lld failures", runs, static_cast<long long>(failures.size()));
    QVERIFY2(failures.isEmpty(), qPrintable(QString("%1 conformance failures on CUDA").arg(failures.size())));
  }

  // The whole GPT-2 mini training step (forward, backward, clipping, AdamW) on the GPU against the CPU executable
  // on the same inputs.
  void gpt2MiniStepMatchesCpu() {
    SKIP_WITHOUT_GPU();
    auto cg = projectStepGraph("gpt2_mini", 4, 64);
    QVERIFY2(cg.ok(), cg.ok() ? "" : cg.error().message.c_str());
    std::mt19937 rng(7);
    auto inputs = randomInputs(cg->graph, rng, 0.05, 512);
    auto cpuExe = lowerForCuda(cg->graph);
    QVERIFY(cpuExe.ok());
    auto want = (*cpuExe)->run(inputs);
    QVERIFY2(want.ok(), want.ok() ? "" : want.error().message.c_str());
    auto exe = compileCuda(cg->graph, "gpt2_mini_step");
    QVERIFY2(exe.ok(), exe.ok() ? "" : exe.error().message.c_str());
    qInfo("%s", (*exe)->describe().substr(0, 200).c_str());
    auto got = (*exe)->runHost(inputs);
    QVERIFY2(got.ok(), got.ok() ? "" : got.error().message.c_str());
    for (size_t i = 0; i < want->size(); ++i) {
      const Aval& a = cg->graph.aval(cg->graph.outputs()[i]);
      std::string d = compareTensors(fromBuffer((*got)[i], a), fromBuffer((*want)[i], a), 2e-3, 2e-5);
      QVERIFY2(d.empty(), ("output " + std::to_string(i) + ": " + d).c_str());
    }
  }

  // C = A B for A [256, 384], B [384, 512] at each precision against a double-precision loop: f32 is exact to
  // f32 rounding, tf32 and bf16 lose input mantissa bits (relative errors near 2^-11 and 2^-8), so the
  // setting is seen to take effect.
  void matmulPrecisionModes() {
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
    QVERIFY(dev.ok());
    cuda::Device& d = **dev;
    auto da = d.allocate(M * K * 4), db = d.allocate(K * N * 4), dc = d.allocate(M * N * 4);
    QVERIFY(da.ok() && db.ok() && dc.ok());
    QVERIFY(d.upload((*da)->data(), a.data(), M * K * 4).ok());
    QVERIFY(d.upload((*db)->data(), b.data(), K * N * 4).ok());
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
      QVERIFY2(g.ok(), g.ok() ? "" : g.error().message.c_str());
      QVERIFY((*g)->run((*da)->data(), (*db)->data(), (*dc)->data()).ok());
      std::vector<float> c(static_cast<size_t>(M * N));
      QVERIFY(d.download(c.data(), (*dc)->data(), M * N * 4).ok());
      double e = 0;
      for (size_t i = 0; i < c.size(); ++i) e = std::max(e, std::fabs(c[i] - ref[i]) / (1.0 + std::fabs(ref[i])));
      err[static_cast<int>(p)] = e;
    }
    qInfo("max relative error: f32 %.3g, tf32 %.3g, bf16 %.3g", err[0], err[1], err[2]);
    QVERIFY(err[0] < 1e-5);
    QVERIFY(err[1] < 1e-2 && err[1] > 4 * err[0]);
    QVERIFY(err[2] < 5e-2 && err[2] > err[1]);
  }

  // Every kernel of a run is one event on cuda:0 with the executable's fusion id, inside the host's window
  // around the run, in launch order and without overlap (one stream).
  void timelineEvents() {
    SKIP_WITHOUT_GPU();
    auto cg = projectStepGraph("mlp_sharding", 8, 0);
    QVERIFY(cg.ok());
    auto exe = compileCuda(cg->graph, "mlp_step");
    QVERIFY2(exe.ok(), exe.ok() ? "" : exe.error().message.c_str());
    std::mt19937 rng(1);
    auto inputs = randomInputs(cg->graph, rng, 0.05, 10);
    QVERIFY((*exe)->runHost(inputs).ok());  // warm
    runtime::Profiler prof;
    int64_t before = 0, after = 0;
    {
      runtime::ProfilerScope scope(prof);
      before = runtime::Profiler::nowNs();
      QVERIFY((*exe)->runHost(inputs).ok());
      after = runtime::Profiler::nowNs();
    }
    auto events = prof.events();
    QCOMPARE(events.size(), (*exe)->lowered().loweredKernels().size());
    int64_t last = before;
    for (const auto& e : events) {
      QCOMPARE(e.device, std::string("cuda:0"));
      QVERIFY(prof.hasFusion(e.fusion));
      QVERIFY2(e.startNs >= last - 1000, e.name.c_str());  // launch order; 1 us for the clocks' rounding
      QVERIFY(e.durationNs >= 0);
      last = e.startNs + e.durationNs;
    }
    QVERIFY(last <= after + 1000);
  }

  // A batch copied on the copy stream from pinned memory is what the next kernels on the compute stream read
  // (the compute stream waits for the copy; the copy waits for the fence of the buffer's previous reader).
  void asyncBatchUpload() {
    SKIP_WITHOUT_GPU();
    const auto& reg = ops::registry();
    const int64_t n = 1 << 20;
    ir::Graph g;
    ir::ValueId x = g.addInput(Aval{Shape{n}, DType::F32});
    auto y = g.addNode(reg, ir::OpCode::Add, {x, x}, ir::NoAttrs{});
    QVERIFY(y.ok());
    g.setOutputs(*y);
    auto exe = compileCuda(g, "double");
    QVERIFY(exe.ok());
    cuda::Device& d = (*exe)->device();
    auto pinned = cuda::PinnedBuffer::allocate(n * 4);
    QVERIFY(pinned.ok());
    auto buf = d.allocate(n * 4);
    QVERIFY(buf.ok());
    for (int round = 0; round < 3; ++round) {
      float* p = static_cast<float*>((*pinned)->data());
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000) + round;
      auto fence = d.computeFence();
      QVERIFY(fence.ok());
      QVERIFY(d.uploadAsync((*buf)->data(), p, n * 4, *fence).ok());
      std::vector<cuda::DeviceBufferPtr> in = {*buf};
      auto out = (*exe)->run(in);
      QVERIFY(out.ok());
      std::vector<float> host(static_cast<size_t>(n));
      QVERIFY(d.download(host.data(), (*out)[0]->data(), n * 4).ok());
      for (int64_t i = 0; i < n; i += 4099) QCOMPARE(host[static_cast<size_t>(i)], 2.0f * (static_cast<float>(i % 1000) + round));
    }
  }

  // Sums of squares over rows long enough to be split across blocks, against a double-precision loop.
  void chunkedRowSums() {
    SKIP_WITHOUT_GPU();
    const auto& reg = ops::registry();
    const int64_t rows = 3, cols = 1000003;
    ir::Graph g;
    ir::ValueId x = g.addInput(Aval{Shape{rows, cols}, DType::F32});
    auto sq = g.addNode(reg, ir::OpCode::Mul, {x, x}, ir::NoAttrs{});
    QVERIFY(sq.ok());
    auto sum = g.addNode(reg, ir::OpCode::ReduceSum, {(*sq)[0]}, ir::ReduceAttrs{{1}});
    QVERIFY(sum.ok());
    g.setOutputs(*sum);
    std::mt19937 rng(9);
    auto in = randomInputs(g, rng, 1.0, 0);
    std::vector<double> want(static_cast<size_t>(rows), 0.0);
    const float* p = static_cast<const float*>(in[0]->data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) want[static_cast<size_t>(r)] += double(p[r * cols + c]) * p[r * cols + c];
    auto exe = compileCuda(g, "chunked_sum");
    QVERIFY2(exe.ok(), exe.ok() ? "" : exe.error().message.c_str());
    auto got = (*exe)->runHost(in);
    QVERIFY2(got.ok(), got.ok() ? "" : got.error().message.c_str());
    for (int64_t r = 0; r < rows; ++r) {
      double v = static_cast<const float*>((*got)[0]->data())[r];
      QVERIFY2(std::fabs(v - want[static_cast<size_t>(r)]) <= 1e-4 * want[static_cast<size_t>(r)],
               qPrintable(QString("row %1: %2 vs %3").arg(r).arg(v).arg(want[static_cast<size_t>(r)])));
    }
  }

  // Flash attention against the textbook formula in double, at a length that is no multiple of the tiles.
  void flashAttentionMatchesNaive() {
    SKIP_WITHOUT_GPU();
    const int64_t B = 2, H = 3, T = 200, D = 64;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    const int64_t n = B * T * H * D;
    std::vector<float> q(static_cast<size_t>(n)), k(q.size()), v(q.size());
    for (auto* x : {&q, &k, &v})
      for (auto& e : *x) e = nd(rng);
    auto dev = cuda::Device::get(0);
    QVERIFY(dev.ok());
    cuda::Device& d = **dev;
    auto dq = d.allocate(n * 4), dk = d.allocate(n * 4), dv = d.allocate(n * 4), dout = d.allocate(n * 4);
    QVERIFY(dq.ok() && dk.ok() && dv.ok() && dout.ok());
    QVERIFY(d.upload((*dq)->data(), q.data(), n * 4).ok());
    QVERIFY(d.upload((*dk)->data(), k.data(), n * 4).ok());
    QVERIFY(d.upload((*dv)->data(), v.data(), n * 4).ok());
    auto at = [&](const std::vector<float>& x, int64_t b, int64_t t, int64_t h, int64_t e) {
      return double(x[static_cast<size_t>(((b * T + t) * H + h) * D + e)]);
    };
    for (bool causal : {true, false}) {
      cuda::AttentionShape s;
      s.batch = B;
      s.heads = H;
      s.seq = T;
      s.headDim = D;
      s.causal = causal;
      auto st = cuda::flashAttention(d, static_cast<const float*>((*dq)->data()), static_cast<const float*>((*dk)->data()),
                                     static_cast<const float*>((*dv)->data()), static_cast<float*>((*dout)->data()), s);
      QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
      std::vector<float> got(static_cast<size_t>(n));
      QVERIFY(d.download(got.data(), (*dout)->data(), n * 4).ok());
      double worst = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t) {
            const int64_t keys = causal ? t + 1 : T;
            std::vector<double> p(static_cast<size_t>(keys));
            double mx = -1e300, sum = 0;
            for (int64_t j = 0; j < keys; ++j) {
              double dot = 0;
              for (int64_t e = 0; e < D; ++e) dot += at(q, b, t, h, e) * at(k, b, j, h, e);
              p[static_cast<size_t>(j)] = dot / std::sqrt(double(D));
              mx = std::max(mx, p[static_cast<size_t>(j)]);
            }
            for (auto& x : p) sum += (x = std::exp(x - mx));
            for (int64_t e = 0; e < D; ++e) {
              double o = 0;
              for (int64_t j = 0; j < keys; ++j) o += p[static_cast<size_t>(j)] / sum * at(v, b, j, h, e);
              worst = std::max(worst, std::fabs(o - at(got, b, t, h, e)));
            }
          }
      qInfo("flash attention (causal %d): max abs error %.3g", causal, worst);
      QVERIFY(worst < 1e-4);
    }
  }

  void ncclAllReduceOneGpu() {
    SKIP_WITHOUT_GPU();
    auto comm = cuda::makeNcclCommunicator(1);
    if (!comm.ok() && comm.error().message.find("built without NCCL") != std::string::npos)
      QSKIP("built without NCCL");
    QVERIFY2(comm.ok(), comm.ok() ? "" : comm.error().message.c_str());
    auto dev = cuda::Device::get(0);
    QVERIFY(dev.ok());
    std::vector<float> x = {1.5f, -2.0f, 3.25f, 0.0f};
    auto buf = (*dev)->allocate(16);
    QVERIFY(buf.ok());
    QVERIFY((*dev)->upload((*buf)->data(), x.data(), 16).ok());
    int group[1] = {0};
    QVERIFY((*comm)->allReduce(0, group, (*buf)->data(), (*buf)->data(), 4, DType::F32).ok());
    std::vector<float> y(4);
    QVERIFY((*dev)->download(y.data(), (*buf)->data(), 16).ok());
    QCOMPARE(y, x);  // a group of one: the identity
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestCudaBackend)
#include "test_cuda_backend.moc"
