#pragma once
// A roofline of a profile: each kernel as a point (arithmetic intensity, FLOPs per byte moved, against achieved
// FLOP/s) under this machine's roofs, measured: the SGEMM peak and the copy bandwidth (engine/backends/cpu/
// machine_peaks.h). A point's roof is the lower of the two at its intensity; how far below it sits is what a
// better kernel could gain.
#include <string>
#include <vector>

#include "engine/inspect/profile_times.h"

namespace tsr::inspect {

struct Roofs {
  double flopsPerSecond = 0;  // the SGEMM peak
  double bytesPerSecond = 0;  // the copy bandwidth (read plus written)
  std::string how;            // "SGEMM 1024^3 on 2 threads: 180.2 GFLOP/s; copy of 64.0 MiB: 21.3 GB/s"
  // The roof at an intensity (FLOPs per byte).
  double at(double intensity) const;
  // The intensity where the two roofs meet.
  double ridge() const { return bytesPerSecond > 0 ? flopsPerSecond / bytesPerSecond : 0; }
};

// Measures both roofs on `threads` threads (the engine's when 0); about half a second.
Roofs measureRoofs(int threads = 0);

struct RooflinePoint {
  int kernel = -1;                // index into ProfileTimes::kernels
  std::string name, kind;
  std::vector<ir::NodeId> nodes;  // of the fusion stage's graph
  double intensity = 0;           // FLOPs per byte read or written
  double flopsPerSecond = 0;      // achieved, over every launch
  double share = 0;               // of the profile's kernel time
  double ofRoof = 0;              // achieved / the roof at its intensity (0 without roofs)
};

struct Roofline {
  std::vector<RooflinePoint> points;  // kernels with FLOPs, bytes and time
  int withoutFlops = 0;               // kernels that move bytes only (copies, gathers): no point on a log axis
};

Roofline rooflineOf(const ProfileTimes& profile, const Roofs& roofs);

}  // namespace tsr::inspect
