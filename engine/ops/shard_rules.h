#pragma once
// Sharding rules (shard_rule.h) of the core op families, one function per kind of dimension mapping. The family
// files set each OpDef's `shard` from these, so an op's rules stay together in its registration.
#include "engine/ir/op_def.h"

namespace tsr::ops {

// Every dim of every operand and result of equal rank is one factor (scalar operands have none).
ir::ShardRule elementwiseShardRule();
ir::ShardRule broadcastInDimShardRule();
ir::ShardRule reshapeShardRule();
ir::ShardRule transposeShardRule();
// slice, pad, rev, dynamic_slice, dynamic_update_slice: dims taken whole pass through; the others must be
// whole on every device.
ir::ShardRule sliceShardRule();
ir::ShardRule padShardRule();
ir::ShardRule revShardRule();
// cumsum & co.: the scanned axis whole, the other dims pass through.
ir::ShardRule cumulativeShardRule();
ir::ShardRule dynamicSliceShardRule();
ir::ShardRule dynamicUpdateSliceShardRule();
ir::ShardRule concatenateShardRule();
ir::ShardRule iotaShardRule();
// reduce_sum: the reduced axes are reduction factors (partial sums); reduce_max/min/prod and argmax/argmin
// need their reduced axes whole.
ir::ShardRule reduceShardRule(bool partialSums);
ir::ShardRule argReduceShardRule();
ir::ShardRule dotGeneralShardRule();
ir::ShardRule convShardRule();
// reduce_window_* and select_and_scatter_add: batch-like dims (window 1, stride 1, no padding) pass through
// every operand and the result; windowed dims must be whole.
ir::ShardRule windowShardRule();
ir::ShardRule gatherShardRule();
ir::ShardRule scatterAddShardRule();
// scatter, scatter_mul, scatter_min, scatter_max: as scatter_add, but the updates' index dims stay whole (updates
// on several devices cannot be combined by a sum).
ir::ShardRule scatterShardRule();
// Every dim whole (constants).
ir::ShardRule replicatedShardRule();

}  // namespace tsr::ops
