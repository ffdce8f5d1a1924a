// Attention on the GPU: the f32 flash kernel against softmax(q k^T) v worked in double, and FlashAttention-2's
// tensor-core kernels (forward and backward, f32 and bf16 arrays) against the op's CPU kernels. Part of the
// test_cuda_backend program; without a GPU every test skips with the reason.
#include "tests/check.h"

#include <cmath>
#include <iomanip>
#include <random>

#include "engine/backends/cuda/device.h"
#include "engine/backends/cuda/flash_attention.h"
#include "engine/ops/registry.h"
#include "tests/cuda/cuda_test_util.h"

using namespace tsr;

TEST_CASE("flashAttentionMatchesNaive") {
  SKIP_WITHOUT_GPU();
  const int64_t B = 2, H = 3, T = 200, D = 64;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t n = B * T * H * D;
  std::vector<float> q(static_cast<size_t>(n)), k(q.size()), v(q.size());
  for (auto* x : {&q, &k, &v})
    for (auto& e : *x) e = nd(rng);
  auto dev = cuda::Device::get(0);
  REQUIRE(dev.ok());
  cuda::Device& d = **dev;
  auto dq = d.allocate(n * 4), dk = d.allocate(n * 4), dv = d.allocate(n * 4), dout = d.allocate(n * 4);
  REQUIRE((dq.ok() && dk.ok() && dv.ok() && dout.ok()));
  REQUIRE(d.upload((*dq)->data(), q.data(), n * 4).ok());
  REQUIRE(d.upload((*dk)->data(), k.data(), n * 4).ok());
  REQUIRE(d.upload((*dv)->data(), v.data(), n * 4).ok());
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
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    std::vector<float> got(static_cast<size_t>(n));
    REQUIRE(d.download(got.data(), (*dout)->data(), n * 4).ok());
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
    MESSAGE("flash attention (causal " << causal << "): max abs error " << std::setprecision(3) << worst);
    REQUIRE(worst < 1e-4);
  }
}

// dot_product_attention and its gradient on FlashAttention-2's tensor-core kernels against the op's CPU kernels
// (double accumulation) on the same bf16-rounded q, k, v and dout: what remains is the rounding of P and dS to
// bf16 and the f32 sums, a few 1e-3 of the largest value; a wrong fragment layout or mask is off by O(1). Each
// problem runs with f32 arrays and with bf16 ones (autocast's: the same values, results rounded to bf16).
TEST_CASE("tensorCoreFlashAttention") {
  SKIP_WITHOUT_GPU();
  auto dev = cuda::Device::get(0);
  REQUIRE(dev.ok());
  cuda::Device& d = **dev;
  const ir::OpDef& fwd = ops::registry().get(ir::OpCode::DotProductAttention);
  const ir::OpDef& bwd = ops::registry().get(ir::OpCode::DotProductAttentionGrad);
  struct Config {
    int64_t b, t, s, h, d;
    bool causal;
  };
  for (const Config c : {Config{2, 200, 200, 3, 64, true}, Config{2, 200, 200, 3, 64, false},
                         Config{1, 100, 150, 2, 32, false}, Config{1, 64, 64, 1, 16, true},
                         Config{3, 33, 33, 2, 48, true}}) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    const Aval qa{Shape{c.b, c.t, c.h, c.d}, DType::F32}, ka{Shape{c.b, c.s, c.h, c.d}, DType::F32},
        ra{Shape{c.b, c.h, c.t}, DType::F32};
    auto random = [&](const Aval& a, bool rounded) {  // rounded: bf16 values (to nearest even), as floats
      std::vector<float> x(static_cast<size_t>(a.numel()));
      for (auto& e : x) e = rounded ? static_cast<float>(bf16(u(rng))) : u(rng);
      return x;
    };
    std::vector<float> q = random(qa, true), k = random(ka, true), v = random(ka, true), dout = random(qa, true),
                       dlse = random(ra, false);
    // The references: the CPU kernels.
    std::vector<float> out(q.size()), lse(dlse.size()), dq(q.size()), dk(k.size()), dv(v.size());
    const ir::Attrs attrs = ir::AttentionAttrs{c.causal};
    {
      std::vector<ir::TensorView> in = {{q.data(), qa}, {k.data(), ka}, {v.data(), ka}};
      std::vector<ir::MutableTensorView> res = {{out.data(), qa}, {lse.data(), ra}};
      fwd.cpu(ir::CpuKernelArgs{in, res, attrs});
      std::vector<ir::TensorView> bin = {{q.data(), qa},   {k.data(), ka},    {v.data(), ka},   {out.data(), qa},
                                         {lse.data(), ra}, {dout.data(), qa}, {dlse.data(), ra}};
      std::vector<ir::MutableTensorView> bres = {{dq.data(), qa}, {dk.data(), ka}, {dv.data(), ka}};
      bwd.cpu(ir::CpuKernelArgs{bin, bres, attrs});
    }
    for (const bool bf16Io : {false, true}) {
      // q, k, v, out, dout and the gradients as f32 or bf16 on the device (`io`); lse and dlse f32 (`row`).
      auto upload = [&](const std::vector<float>& x, bool io) {
        std::vector<uint16_t> half;
        const void* src = x.data();
        if (io && bf16Io) {
          for (float e : x) half.push_back(bf16(e).bits);
          src = half.data();
        }
        const int64_t bytes = static_cast<int64_t>(x.size()) * (io && bf16Io ? 2 : 4);
        auto b = d.allocate(bytes);
        REQUIRE(b.ok());
        REQUIRE(d.upload((*b)->data(), src, bytes).ok());
        return std::move(b).value();
      };
      auto download = [&](const cuda::DeviceBufferPtr& b, size_t n, bool io) {
        std::vector<float> x(n);
        if (io && bf16Io) {
          std::vector<bf16> half(n);
          REQUIRE(d.download(half.data(), b->data(), static_cast<int64_t>(n * 2)).ok());
          for (size_t i = 0; i < n; ++i) x[i] = half[i];
        } else {
          REQUIRE(d.download(x.data(), b->data(), static_cast<int64_t>(n * 4)).ok());
        }
        REQUIRE(d.synchronize().ok());
        return x;
      };
      auto gq = upload(q, true), gk = upload(k, true), gv = upload(v, true), gdout = upload(dout, true),
           gdlse = upload(dlse, false);
      auto gout = upload(out, true), glse = upload(lse, false);  // results
      auto rout = upload(out, true), rlse = upload(lse, false);  // the reference's, which the gradient reads
      auto gdq = upload(dq, true), gdk = upload(dk, true), gdv = upload(dv, true);
      auto f = [](const cuda::DeviceBufferPtr& b) { return static_cast<float*>(b->data()); };
      const cuda::AttentionProblem p{c.b, c.h, c.t, c.s, c.d, c.causal, bf16Io};
      const int64_t ioBytes = bf16Io ? 2 : 4;
      REQUIRE(d.memset(gout->data(), 0, static_cast<int64_t>(out.size()) * ioBytes).ok());
      Status st = cuda::flashAttentionForward(d, gq->data(), gk->data(), gv->data(), gout->data(), f(glse), p);
      REQUIRE_MESSAGE(st.ok(), st.error().message);
      REQUIRE(d.memset(gdq->data(), 0, static_cast<int64_t>(dq.size()) * ioBytes).ok());
      st = cuda::flashAttentionBackward(d, gq->data(), gk->data(), gv->data(), rout->data(), f(rlse), gdout->data(),
                                        f(gdlse), gdq->data(), gdk->data(), gdv->data(), p);
      REQUIRE_MESSAGE(st.ok(), st.error().message);
      // max |got - want| / max |want|
      auto err = [](const std::vector<float>& got, const std::vector<float>& want) {
        double worst = 0, scale = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
          scale = std::max(scale, std::fabs(double(want[i])));
        }
        return worst / std::max(scale, 1e-30);
      };
      const double eOut = err(download(gout, out.size(), true), out);
      const double eLse = err(download(glse, lse.size(), false), lse);
      const double eDq = err(download(gdq, dq.size(), true), dq), eDk = err(download(gdk, dk.size(), true), dk),
                   eDv = err(download(gdv, dv.size(), true), dv);
      MESSAGE("flash attention on tensor cores, " << (bf16Io ? "bf16" : "f32") << " arrays [" << c.b << "," << c.t
                  << "," << c.h << "," << c.d << "] keys " << c.s << (c.causal ? " causal" : "")
                  << ": relative error out " << eOut << ", lse " << eLse << ", dq " << eDq << ", dk " << eDk
                  << ", dv " << eDv);
      CHECK(eOut < 1e-2);
      CHECK(eLse < 1e-3);
      CHECK(eDq < 3e-2);
      CHECK(eDk < 3e-2);
      CHECK(eDv < 3e-2);
    }
  }
}

