#pragma once
// The row of every kernel table: the launches of one kernel summed. `tessera profile` and `bench --top` list them
// by name, the timeline's range statistics by name within a range, the inspector's profile times by fusion id
// with the graph nodes each ran.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/ir/graph.h"

namespace tsr::runtime {

struct KernelSummary {
  std::string name;              // "fusion.64 reduction[reduce_max] f32[8,64,512]"
  std::string kind;              // "loop", "reduction", "gemm", "opaque", "copy"
  int64_t fusion = -1;           // the profiler's fusion id, where the table is per kernel of one executable
  std::vector<ir::NodeId> nodes; // the graph nodes it ran, where known
  int64_t count = 0;             // launches
  int64_t totalNs = 0;
  double flops = 0, bytes = 0;   // summed over the launches
  double share = 0;              // of the table's summed time, where the table gives it (range statistics)

  double meanNs() const { return count ? static_cast<double>(totalNs) / static_cast<double>(count) : 0; }
};

}  // namespace tsr::runtime
