#pragma once
// Scheduling: the order in which kernels run. Any topological order computes the same values; they differ in
// how many intermediates are alive at once. A list scheduler (after XLA's memory-aware schedulers): among the
// kernels whose inputs are ready, run the one that frees the most bytes net of what it allocates, ties going to
// the earlier kernel of the given order (which follows the traced program).
#include <cstdint>
#include <vector>

namespace tsr::cpu {

struct ScheduleItem {
  std::vector<int> reads;    // values the kernel reads (ids in [0, numValues))
  std::vector<int> writes;   // values it defines
  bool ordered = false;      // an effect (a host callback that prints): runs after the effects before it
};

// Returns a permutation of the items. bytes[v]: size of value v; pinned[v]: never freed (inputs, outputs,
// constants), so it counts neither as allocated nor as freed. `items` must be in a valid topological order.
std::vector<int> scheduleForMemory(const std::vector<ScheduleItem>& items, const std::vector<int64_t>& bytes,
                                   const std::vector<bool>& pinned);

}  // namespace tsr::cpu
