// Elementwise benchmark: y = gelu(x * a + b) (tanh approximation) over n f32 values through jit, against a plain
// memory copy of the same bytes. Both move 8 n bytes (read x, write y); the figure of merit is the chain's
// bandwidth as a fraction of the copy's. A fused chain reads x once and writes y once, so it can approach the
// copy; an op-by-op evaluation moves every intermediate through memory too.
//   bench_elementwise [--n N] [--steps S] [--json]    (default N = 64M floats, 256 MiB)
// Also checks a sample of the results against a double-precision reference (max_abs_err in the output).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/backends/backends.h"
#include "engine/backends/cpu/native_compiler.h"
#include "engine/transform/api.h"
#include "engine/compile/jit.h"

using namespace tsr;

namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string jsonList(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += fmt::format("{}{:.6g}", i ? ", " : "", v[i]);
  return s + "]";
}

double geluReference(double x) {
  double c = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

}  // namespace

int main(int argc, char** argv) {
  tsr::registerBackends();
  int64_t n = 64LL * 1024 * 1024;
  int steps = 5;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--n" && i + 1 < argc) n = std::stoll(argv[++i]);
    else if (arg == "--steps" && i + 1 < argc) steps = std::max(1, std::stoi(argv[++i]));
    else if (arg == "--json") json = true;
    else {
      std::cerr << "usage: bench_elementwise [--n N] [--steps S] [--json]\n";
      return 2;
    }
  }
  const float a = 1.5f, b = 0.25f;
  std::vector<float> host(static_cast<size_t>(n));
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  for (auto& v : host) v = normal(gen);

  // Native code from the first call (the compile is part of the first call's time), unless TESSERA_CPU_CODEGEN
  // says otherwise.
  if (!std::getenv("TESSERA_CPU_CODEGEN")) cpu::setNativeMode(cpu::NativeMode::Sync);
  // The chain through jit: x: [n], a and b scalars.
  Jit chain = jit([](const std::vector<Array>& xs) { return std::vector<Array>{gelu(xs[0] * xs[1] + xs[2], true)}; },
                  "gelu_chain");
  Array x = Array::fromVector(host, Shape{n});
  std::vector<Array> args{x, Array::scalar(a), Array::scalar(b)};
  auto t0 = std::chrono::steady_clock::now();
  auto first = chain(args);
  if (!first.ok()) {
    std::cerr << "bench_elementwise: " << first.error().message << "\n";
    return 1;
  }
  double firstSeconds = seconds(t0);
  // Two untimed calls: the allocator settles on reusing the output's pages.
  for (int i = 0; i < 2; ++i)
    if (!chain(args).ok()) return 1;
  std::vector<double> chainTimes;
  Array y;
  for (int i = 0; i < steps; ++i) {
    t0 = std::chrono::steady_clock::now();
    auto out = chain(args);
    chainTimes.push_back(seconds(t0));
    if (!out.ok()) {
      std::cerr << "bench_elementwise: " << out.error().message << "\n";
      return 1;
    }
    y = (*out)[0];
  }

  // Check 4096 evenly spaced results (a full host copy would cost as much as the benchmark).
  std::vector<float> result = y.toFloats();
  double maxErr = 0;
  for (int64_t i = 0; i < n; i += std::max<int64_t>(1, n / 4096))
    maxErr = std::max(maxErr, std::abs(result[static_cast<size_t>(i)] - geluReference(double(host[i]) * a + b)));

  // The copy: the same bytes with memcpy, into a destination whose pages are already mapped.
  std::vector<float> dst(static_cast<size_t>(n), 1.0f);
  std::memcpy(dst.data(), host.data(), host.size() * sizeof(float));
  std::vector<double> copyTimes;
  for (int i = 0; i < steps; ++i) {
    host[static_cast<size_t>(i)] += 1.0f;  // keep the copies from being merged
    t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), host.data(), host.size() * sizeof(float));
    copyTimes.push_back(seconds(t0));
  }
  if (dst[0] != host[0]) return 1;

  double bytes = 8.0 * static_cast<double>(n);  // read 4 n, write 4 n
  double chainGbs = bytes / median(chainTimes) / 1e9, copyGbs = bytes / median(copyTimes) / 1e9;
  if (json) {
    std::cout << fmt::format(
        "{{\"workload\": \"elementwise\", \"n\": {}, \"bytes_per_step\": {}, \"first_step_s\": {:.6g}, "
        "\"step_times_s\": {}, \"median_step_s\": {:.6g}, \"min_step_s\": {:.6g}, \"gbytes_per_s\": {:.6g}, "
        "\"copy_step_times_s\": {}, \"copy_median_s\": {:.6g}, \"copy_gbytes_per_s\": {:.6g}, "
        "\"copy_fraction\": {:.6g}, \"max_abs_err\": {:.3g}, \"cpu_codegen\": \"{}\", \"native_kernels\": {}}}\n",
        n, static_cast<int64_t>(bytes), firstSeconds, jsonList(chainTimes), median(chainTimes),
        *std::min_element(chainTimes.begin(), chainTimes.end()), chainGbs, jsonList(copyTimes), median(copyTimes),
        copyGbs, chainGbs / copyGbs, maxErr, cpu::nativeModeName(cpu::nativeMode()), cpu::nativeStats().kernels);
    return 0;
  }
  std::cout << fmt::format("gelu(x * a + b) over {} floats ({:.0f} MiB in, the same out)\n", n, 4.0 * n / 1048576);
  std::cout << fmt::format("  jit        median {:.2f} ms = {:.2f} GB/s (first call {:.3f} s, max abs error {:.2g})\n",
                           median(chainTimes) * 1e3, chainGbs, firstSeconds, maxErr);
  std::cout << fmt::format("  memcpy     median {:.2f} ms = {:.2f} GB/s\n", median(copyTimes) * 1e3, copyGbs);
  std::cout << fmt::format("  fraction   {:.1f}% of copy bandwidth\n", 100.0 * chainGbs / copyGbs);
  std::cout << fmt::format("  kernels    {} native ({})\n", cpu::nativeStats().kernels, cpu::nativeModeName(cpu::nativeMode()));
  return 0;
}
