#include "engine/backends/cpu/machine_peaks.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "engine/runtime/blas_workspace.h"

namespace tsr::cpu {

namespace {

template <class F>
double bestSeconds(int repeats, F&& run) {
  run();
  double best = 0;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (best == 0 || s < best) best = s;
  }
  return best;
}

}  // namespace

SgemmPeak measureSgemm(int64_t n, int repeats, int threads) {
  SgemmPeak peak{n, 0, "", ""};
  if (n <= 0) return peak;
  if (const char* core = openblas_get_corename()) peak.kernels = core;
  runtime::BlasThreads blas(threads);  // its workspaces reserved: a GEMM that cannot get them would hang
  if (!blas.status().ok()) return SgemmPeak{0, 0, peak.kernels, blas.status().error().message};
  auto count = static_cast<size_t>(n * n);
  std::vector<float> a(count), b(count), c(count, 0.0f);
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (size_t i = 0; i < count; ++i) a[i] = d(gen), b[i] = d(gen);
  auto dim = static_cast<int>(n);
  const double s = bestSeconds(std::max(repeats, 1), [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, a.data(), dim, b.data(), dim, 0.0f,
                c.data(), dim);
  });
  peak.gflops = s > 0 ? 2.0 * static_cast<double>(n) * static_cast<double>(n * n) / s / 1e9 : 0;
  return peak;
}

CopyBandwidth measureCopyBandwidth(int64_t bytes, int repeats, int threads) {
  CopyBandwidth bw{bytes, 0};
  if (bytes <= 0) return bw;
  threads = std::max(threads, 1);
  auto size = static_cast<size_t>(bytes);
  std::unique_ptr<char[]> src(new char[size]), dst(new char[size]);
  std::memset(src.get(), 1, size);
  const double s = bestSeconds(std::max(repeats, 1), [&] {
    std::vector<std::thread> pool;
    const size_t chunk = (size + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t) {
      const size_t from = std::min(size, static_cast<size_t>(t) * chunk), to = std::min(size, from + chunk);
      pool.emplace_back([&, from, to] { std::memcpy(dst.get() + from, src.get() + from, to - from); });
    }
    for (auto& th : pool) th.join();
  });
  bw.gbs = s > 0 ? 2.0 * static_cast<double>(bytes) / s / 1e9 : 0;
  return bw;
}

}  // namespace tsr::cpu
