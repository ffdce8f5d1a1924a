#pragma once
// How an op's dimensions correspond under sharding, after Shardy's OpShardingRule: a list of factors, each a
// set of operand and result dimensions that are split alike. One generic propagation pass and one generic
// partitioner read these rules; an op states only its dimension mapping (and how its attrs change when its
// shapes become per-device shapes).
#include <functional>
#include <span>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/ir/attrs.h"

namespace tsr::ir {

enum class FactorKind : uint8_t {
  // Appears in results (and usually operands): splitting it splits the results the same way, with no
  // communication. Elementwise dims, dot_general's batch and free dims, a gather's index dims.
  PassThrough,
  // Appears in operands only and is summed over (a contraction, reduce_sum's axes, scatter_add's update
  // positions): splitting it leaves each device a partial sum, completed by an all_reduce or reduce_scatter.
  Reduction,
};

struct ShardingRule {
  std::vector<FactorKind> factors;
  // [operand][dim] and [result][dim] -> factor index, or -1: that dim must be whole on every device (a
  // sliced, reversed or concatenated dim, reduce_max's axes, an iota's counting dim).
  std::vector<std::vector<int>> operandDims;
  std::vector<std::vector<int>> resultDims;
  // For ops whose attrs hold shapes (broadcast_in_dim, reshape, iota, slice limits): the attrs of the
  // per-device op, given its per-device operand and result avals. Empty: the attrs stay as they are.
  std::function<Attrs(const Attrs& global, std::span<const Aval> localOperands, std::span<const Aval> localResults)>
      localAttrs;

  int addFactor(FactorKind kind) {
    factors.push_back(kind);
    return static_cast<int>(factors.size()) - 1;
  }
};

// The op's rule for these operand and result avals. An op without one is partitioned conservatively: every
// operand gathered whole, every result computed whole on each device.
using ShardRule = std::function<Result<ShardingRule>(std::span<const Aval> operands, std::span<const Aval> results,
                                                     const Attrs& attrs)>;

}  // namespace tsr::ir
