#include "engine/inspect/roofline.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/backends/cpu/machine_peaks.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/bytes.h"

namespace tsr::inspect {

double Roofs::at(double intensity) const {
  if (flopsPerSecond <= 0 || bytesPerSecond <= 0) return 0;
  return std::min(flopsPerSecond, bytesPerSecond * intensity);
}

Roofs measureRoofs(int threads) {
  if (threads <= 0) threads = cpu::configuredThreads();
  // Sizes past the caches, small enough to take well under a second on two cores.
  const cpu::SgemmPeak sgemm = cpu::measureSgemm(1024, 3, threads);
  const cpu::CopyBandwidth copy = cpu::measureCopyBandwidth(int64_t(64) << 20, 3, threads);
  Roofs r;
  r.flopsPerSecond = sgemm.gflops * 1e9;
  r.bytesPerSecond = copy.gbs * 1e9;
  if (!sgemm.error.empty()) r.how = fmt::format("SGEMM not measured ({}); ", sgemm.error);
  r.how += fmt::format("SGEMM {}^3 on {} threads: {:.1f} GFLOP/s; copy of {}: {:.1f} GB/s (read + written)", sgemm.n,
                      threads, sgemm.gflops, formatBytes(copy.bytes), copy.gbs);
  return r;
}

Roofline rooflineOf(const ProfileTimes& profile, const Roofs& roofs) {
  Roofline out;
  for (size_t k = 0; k < profile.kernels.size(); ++k) {
    const KernelTime& t = profile.kernels[k];
    if (t.totalNs <= 0) continue;
    if (t.flops <= 0 || t.bytes <= 0) {
      ++out.withoutFlops;
      continue;
    }
    RooflinePoint p;
    p.kernel = static_cast<int>(k);
    p.name = t.name;
    p.kind = t.kind;
    p.nodes = t.nodes;
    p.intensity = t.flops / t.bytes;
    p.flopsPerSecond = t.flops / (static_cast<double>(t.totalNs) * 1e-9);
    p.share = profile.totalNs > 0 ? static_cast<double>(t.totalNs) / static_cast<double>(profile.totalNs) : 0;
    const double roof = roofs.at(p.intensity);
    p.ofRoof = roof > 0 ? p.flopsPerSecond / roof : 0;
    out.points.push_back(std::move(p));
  }
  return out;
}

}  // namespace tsr::inspect
