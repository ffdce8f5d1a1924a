// dot_general's bf16 CPU kernels (engine/ops/matmul_onednn.h): oneDNN's matmul and the operands widened for SGEMM,
// each as TESSERA_CPU_BF16_MATMUL picks it, in the op's kernel and in a compiled program (the CPU executable's
// product groups): batched products with transposed and strided operands against a double loop over the same bf16
// values, and oneDNN taking the problem (no reference implementation) wherever the CPU has bf16 instructions, so
// the fast path cannot silently vanish.
#include "tests/check.h"

#include <cmath>
#include <functional>
#include <random>

#include <dnnl.hpp>

#include "engine/backends/cpu/gemm.h"
#include "engine/compile/jit.h"
#include "engine/core/env_options.h"
#include "engine/ops/matmul_onednn.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"

using namespace tsr;

namespace {

bool cpuHasBf16() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16Isa = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (isa & bf16Isa) == bf16Isa;
}

std::vector<bf16> randomBf16(int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<bf16> x(static_cast<size_t>(n));
  for (bf16& e : x) e = bf16(u(rng));
  return x;
}

double wide(bf16 x) { return static_cast<double>(static_cast<float>(x)); }

// Runs body once with each of TESSERA_CPU_BF16_MATMUL's kernels (onednn, f32), then restores the default.
template <class F>
void forEachBf16Kernel(F body) {
  for (const std::string kernel : {"onednn", "f32"}) {
    setenv("TESSERA_CPU_BF16_MATMUL", kernel.c_str(), 1);
    reloadEnvOptions();
    REQUIRE(ops::bf16ProductsOnOneDnn() == (kernel == "onednn"));
    INFO("TESSERA_CPU_BF16_MATMUL=" << kernel);
    body();
  }
  unsetenv("TESSERA_CPU_BF16_MATMUL");
  reloadEnvOptions();
}

// dot_general's CPU kernel on bf16 operands.
std::vector<bf16> product(const std::vector<bf16>& l, const Shape& ls, const std::vector<bf16>& r, const Shape& rs,
                          const ir::DotGeneralAttrs& at, const Shape& out) {
  std::vector<bf16> got(static_cast<size_t>(out.numel()));
  const ir::TensorView in[2] = {{l.data(), Aval{ls, DType::BF16}}, {r.data(), Aval{rs, DType::BF16}}};
  const ir::MutableTensorView res[1] = {{got.data(), Aval{out, DType::BF16}}};
  ops::registry().get(ir::OpCode::DotGeneral).cpu(ir::CpuKernelArgs{in, res, ir::Attrs(at)});
  return got;
}

// A result's error in units of what one bf16 rounding of an f32 sum of k products allows: half a bf16 ulp (2^-9
// relative, 2^-8 with margin) and the f32 sum's own error.
double errorUnits(bf16 got, double want, int64_t k) {
  return std::fabs(wide(got) - want) / (std::fabs(want) * std::ldexp(1.0, -8) + 1e-6 * static_cast<double>(k));
}

// Random bf16 operands [m, k] and [k, n] as arrays, and their values in double.
struct Operands {
  int64_t m, k, n;
  std::vector<double> l, r;
  Array lhs, rhs;
  // Row i of lhs times column j of rhs in double; `size` gets the sum of the products' magnitudes.
  double dot(int64_t i, int64_t j, double* size = nullptr) const {
    double sum = 0, mag = 0;
    for (int64_t p = 0; p < k; ++p) {
      const double t = l[static_cast<size_t>(i * k + p)] * r[static_cast<size_t>(p * n + j)];
      sum += t;
      mag += std::fabs(t);
    }
    if (size) *size = mag;
    return sum;
  }
};
Operands randomOperands(int64_t m, int64_t k, int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Operands o{m, k, n, std::vector<double>(static_cast<size_t>(m * k)), std::vector<double>(static_cast<size_t>(k * n)),
             {}, {}};
  for (double& e : o.l) e = wide(bf16(static_cast<float>(u(rng))));
  for (double& e : o.r) e = wide(bf16(static_cast<float>(u(rng))));
  o.lhs = Array::fromVector(o.l, Shape{m, k}, DType::BF16);
  o.rhs = Array::fromVector(o.r, Shape{k, n}, DType::BF16);
  return o;
}

}  // namespace

// lhs [B, M, K] x rhs [B, N, K] contracted over K (a transposed rhs, as q k^T), and lhs [K, M] (transposed) x
// rhs [K, N], each through the op's CPU kernel.
TEST_CASE("bf16ProductsMatchADoubleLoop") {
  forEachBf16Kernel([] {
  std::mt19937 rng(5);
  struct Config {
    int64_t b, m, n, k;
    bool transposeLhs;  // lhs stored [K, M] (one batch) rather than [B, M, K]
  };
  for (const Config c : {Config{3, 70, 130, 300, false}, Config{1, 257, 65, 513, true}, Config{2, 1, 33, 17, false}}) {
    const Shape ls = c.transposeLhs ? Shape{c.k, c.m} : Shape{c.b, c.m, c.k};
    const Shape rs = c.transposeLhs ? Shape{c.k, c.n} : Shape{c.b, c.n, c.k};
    ir::DotGeneralAttrs at;
    if (c.transposeLhs) {
      at.lhsContracting = {0};
      at.rhsContracting = {0};
    } else {
      at.lhsBatch = at.rhsBatch = {0};
      at.lhsContracting = at.rhsContracting = {2};
    }
    const std::vector<bf16> l = randomBf16(ls.numel(), rng), r = randomBf16(rs.numel(), rng);
    const std::vector<bf16> got =
        product(l, ls, r, rs, at, c.transposeLhs ? Shape{c.m, c.n} : Shape{c.b, c.m, c.n});
    double worst = 0;
    for (int64_t bi = 0; bi < c.b; ++bi)
      for (int64_t i = 0; i < c.m; ++i)
        for (int64_t j = 0; j < c.n; ++j) {
          double want = 0;
          for (int64_t p = 0; p < c.k; ++p) {
            const size_t li = static_cast<size_t>(c.transposeLhs ? p * c.m + i : (bi * c.m + i) * c.k + p);
            const size_t ri = static_cast<size_t>(c.transposeLhs ? p * c.n + j : (bi * c.n + j) * c.k + p);
            want += wide(l[li]) * wide(r[ri]);
          }
          worst = std::max(worst, errorUnits(got[static_cast<size_t>((bi * c.m + i) * c.n + j)], want, c.k));
        }
    INFO("[" << c.b << "," << c.m << "," << c.n << "," << c.k << "]" << (c.transposeLhs ? " transposed lhs" : ""));
    CHECK(worst <= 1.0);
  }
  });
}

// The same products compiled: a bf16 product the CPU executable reads in place runs on oneDNN through the op's
// kernel or, widened, on its pool's SGEMMs (runGemmWidened); the result is the same bf16 rounding of an f32 sum.
TEST_CASE("compiledBf16ProductsMatchADoubleLoop") {
  const int64_t m = 96, k = 200, n = 130;
  const Operands o = randomOperands(m, k, n, 9);
  forEachBf16Kernel([&] {
    Jit product = jit([](const std::vector<Array>& a) { return std::vector<Array>{matmul(a[0], a[1])}; });
    auto got = product({o.lhs, o.rhs});
    REQUIRE_MESSAGE(got.ok(), got.error().message);
    REQUIRE((*got)[0].dtype() == DType::BF16);
    const std::vector<double> out = (*got)[0].toDoubles();
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        worst = std::max(worst,
                         errorUnits(bf16(static_cast<float>(out[static_cast<size_t>(i * n + j)])), o.dot(i, j), k));
    CHECK(worst <= 1.0);
  });
}

// A compiled product with an epilogue (a convert to f32) that also outputs the bf16 product. The bf16 output is
// the double loop's sum rounded once, either way. The convert reads the product unrounded where it runs on the
// widened SGEMM under excess precision (TESSERA_BF16_EXCESS_PRECISION=on, the default): the f32 sum, within f32's
// rounding of the double sum; on oneDNN, or with excess precision off, it reads the bf16 product.
TEST_CASE("compiledBf16EpiloguesReadTheProductsAsTheyLeaveTheKernel") {
  const int64_t m = 64, k = 300, n = 72;
  const Operands o = randomOperands(m, k, n, 11);
  for (const char* excess : {"on", "off"}) {
    setenv("TESSERA_BF16_EXCESS_PRECISION", excess, 1);
    forEachBf16Kernel([&] {
      const bool unrounded = std::string(excess) == "on" && !ops::bf16ProductsOnOneDnn();
      INFO("TESSERA_BF16_EXCESS_PRECISION=" << excess);
      Jit f = jit([](const std::vector<Array>& a) {
        Array y = matmul(a[0], a[1]);
        return std::vector<Array>{y, astype(y, DType::F32)};
      });
      auto got = f({o.lhs, o.rhs});
      REQUIRE_MESSAGE(got.ok(), got.error().message);
      const std::vector<double> y = (*got)[0].toDoubles(), y32 = (*got)[1].toDoubles();
      int differ = 0;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>(i * n + j);
          double size = 0;
          const double want = o.dot(i, j, &size);
          REQUIRE(errorUnits(bf16(static_cast<float>(y[e])), want, k) <= 1.0);
          if (unrounded)
            REQUIRE_MESSAGE(std::fabs(y32[e] - want) <= std::ldexp(double(k), -24) * size, "element " << e);
          else REQUIRE_MESSAGE(y32[e] == y[e], "element " << e);
          differ += y32[e] != y[e];
        }
      if (unrounded) CHECK(differ > m * n / 2);
    });
  }
  unsetenv("TESSERA_BF16_EXCESS_PRECISION");
  reloadEnvOptions();
}

// cpu::runGemmWidened over the contracted dim in panels (64 of 300 at a time: five SGEMMs summed in f32), whole,
// and, without an epilogue and with the f32 result over the budget, in blocks of 16 rows of A (16, 16 and 5), each
// layout of A and B, two batches (B also shared by both): every bf16 result against a double loop, and the f32
// results an epilogue gets within f32's summation error of it.
TEST_CASE("widenedProductsInPanelsMatchADoubleLoop") {
  const int64_t batch = 2, m = 37, n = 29, k = 300;
  std::mt19937 rng(12);
  struct Mode {
    int64_t panelFloats;
    bool epilogue, sharedB;
  };
  const Mode modes[] = {{batch * (m + n) * 64, true, false},
                        {cpu::kWidenedPanelFloats, true, false},
                        {1000, false, false},
                        {1000, false, true}};
  for (bool transA : {false, true})
    for (bool transB : {false, true})
      for (const Mode& mode : modes) {
        cpu::GemmPlan p;
        p.batch = batch;
        p.m = m;
        p.n = n;
        p.k = k;
        p.transA = transA;
        p.transB = transB;
        p.lda = transA ? m : k;
        p.ldb = transB ? k : n;
        p.strideA = m * k;
        p.strideB = mode.sharedB ? 0 : k * n;
        const std::vector<bf16> a = randomBf16(batch * m * k, rng), b = randomBf16(batch * k * n, rng);
        std::vector<bf16> c(static_cast<size_t>(batch * m * n));
        std::vector<float> f32;
        std::function<void(const float*)> epilogue;
        if (mode.epilogue) epilogue = [&](const float* w) { f32.assign(w, w + batch * m * n); };
        cpu::runGemmWidened(p, a.data(), b.data(), c.data(), epilogue, mode.panelFloats);
        INFO("transA " << transA << " transB " << transB << " panel floats " << mode.panelFloats << " shared B "
                       << mode.sharedB);
        REQUIRE(f32.size() == (mode.epilogue ? c.size() : 0));
        for (int64_t bi = 0; bi < batch; ++bi)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double want = 0, size = 0;
              for (int64_t q = 0; q < k; ++q) {
                const bf16 x = a[static_cast<size_t>(bi * m * k + (transA ? q * m + i : i * k + q))];
                const bf16 y = b[static_cast<size_t>(bi * p.strideB + (transB ? j * k + q : q * n + j))];
                want += wide(x) * wide(y);
                size += std::fabs(wide(x) * wide(y));
              }
              const size_t e = static_cast<size_t>((bi * m + i) * n + j);
              REQUIRE(errorUnits(c[e], want, k) <= 1.0);
              if (mode.epilogue) REQUIRE(std::fabs(f32[e] - want) <= std::ldexp(double(k), -24) * size);
            }
      }
}

// Attention's scores as a model writes them without the fused op: q [B, T, H, D] and k [B, S, H, D] contracted over
// D with batch dims B and H, which lie apart in memory (strides T*H*D and D): one primitive reads them in place.
TEST_CASE("bf16ProductsOverBatchDimsAsTheyLie") {
  forEachBf16Kernel([] {
  std::mt19937 rng(6);
  const int64_t b = 2, t = 37, s = 29, h = 3, d = 64;
  const Shape qs{b, t, h, d}, ks{b, s, h, d};
  const std::vector<bf16> q = randomBf16(qs.numel(), rng), k = randomBf16(ks.numel(), rng);
  ir::DotGeneralAttrs at;
  at.lhsBatch = at.rhsBatch = {0, 2};
  at.lhsContracting = at.rhsContracting = {3};
  const std::vector<bf16> got = product(q, qs, k, ks, at, Shape{b, h, t, s});
  double worst = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < t; ++i)
        for (int64_t j = 0; j < s; ++j) {
          double want = 0;
          for (int64_t e = 0; e < d; ++e)
            want += wide(q[static_cast<size_t>(((bi * t + i) * h + hi) * d + e)]) *
                    wide(k[static_cast<size_t>(((bi * s + j) * h + hi) * d + e)]);
          worst = std::max(worst, errorUnits(got[static_cast<size_t>(((bi * h + hi) * t + i) * s + j)], want, d));
        }
  CHECK(worst <= 1.0);
  // The same operands as the kernel reads them (k as [D, S] matrices): oneDNN takes them as they lie.
  const ops::StridedMatrices qm{q.data(), {b, h}, {t * h * d, d}, t, d, h * d, 1};
  const ops::StridedMatrices km{k.data(), {b, h}, {s * h * d, d}, d, s, 1, h * d};
  const std::string impl = ops::oneDnnBf16MatmulImplementation(qm, km);
  MESSAGE("heads in place: " << (impl.empty() ? "refused" : impl));
  if (cpuHasBf16()) CHECK((!impl.empty() && impl.rfind("ref", 0) != 0));
  });
}

TEST_CASE("oneDnnTakesBf16ProductsWhereTheCpuHasBf16Instructions") {
  std::vector<bf16> buffer(64 * 64);
  const ops::StridedMatrices a{buffer.data(), {}, {}, 64, 64, 64, 1};
  const std::string impl = ops::oneDnnBf16MatmulImplementation(a, a);
  MESSAGE("oneDNN's bf16 matmul on this CPU: " << (impl.empty() ? "refused" : impl));
  if (!cpuHasBf16()) TSR_SKIP("no AVX512_BF16 here: bf16 products widen to f32 for OpenBLAS");
  CHECK(!impl.empty());
  CHECK(impl.rfind("ref", 0) != 0);
  std::vector<bf16> out(64 * 64);
  CHECK(ops::oneDnnBf16Matmul(a, a, out.data()));
}

// auto takes oneDNN only where the CPU's bf16 products outrun f32 ones (AMX, or AMD's AVX512_BF16).
TEST_CASE("autoTakesOneDnnWhereBf16ProductsOutrunF32") {
  unsetenv("TESSERA_CPU_BF16_MATMUL");
  reloadEnvOptions();
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto amx = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_amx);
  const bool want = (isa & amx) == amx || (cpuHasBf16() && __builtin_cpu_is("amd"));
  MESSAGE("bf16 products on this CPU: " << (ops::bf16ProductsOnOneDnn() ? "oneDNN" : "widened to f32 for SGEMM"));
  CHECK(ops::bf16ProductsOnOneDnn() == want);
}
