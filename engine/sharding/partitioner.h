#pragma once
// The SPMD partitioner: a global graph with a sharding plan becomes one per-device program. Each op runs on its
// local shards with per-device shapes; where an operand is not split the way the op needs it, a reshard is
// inserted: a local dynamic_slice where a device already holds what it needs (no communication), else the
// collective that moves the data: all_reduce or reduce_scatter to complete partial sums, all_to_all to move a
// split from one dim to another, all_gather to make a dim whole, collective_permute to reorder devices. A scan or
// cond whose nested graphs were planned (ShardingPlan::regions) runs over their per-device programs; collectives
// inside a scan's body run once per step.
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/sharding/propagation.h"

namespace tsr::sharding {

// One collective of the per-device program, and why the math needs it.
struct CollectiveInfo {
  ir::OpCode op{};
  std::string opName;       // "all_reduce"
  std::vector<int> axes;    // the mesh axes it runs over
  std::string axisNames;    // "'batch'", "('a', 'b')"
  int64_t bytes = 0;        // per device: the operand's bytes
  ir::NodeId globalNode = ir::kNone;  // the global op whose operand or result it reshards
  std::string reason;       // "complete the partial sum of dot_general (result 0)"
  std::string toString() const;
};

struct PartitionResult {
  ir::Graph local;  // the program each device runs (inputs and outputs: the local shards)
  std::vector<TensorSharding> inputShardings;
  std::vector<TensorSharding> outputShardings;
  std::vector<CollectiveInfo> collectives;
};

Result<PartitionResult> partition(const ir::Graph& global, const ir::OpRegistry& reg, const ShardingPlan& plan);

// The groups of mesh devices that differ only in their coordinates along `axes` (major to minor), each group
// ordered by those coordinates: the member at index i holds piece i of a dim split over `axes`. Flattened.
std::vector<int64_t> deviceGroups(const Mesh& mesh, const std::vector<int>& axes);

}  // namespace tsr::sharding
