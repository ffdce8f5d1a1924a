#pragma once
// Shared pieces of vjp and batching rules, so that each op's rules stay a few lines.
#include <vector>

#include "engine/ir/op_def.h"
#include "engine/transform/api.h"

namespace tsr::ops {

// Moves x's batch dim from `from` to `to`; an unbatched x (from = -1) is broadcast to `size` examples.
Array moveBatchDim(const Array& x, int from, int to, int64_t size);

// Elementwise ops: every operand gets its batch dim in front (unbatched ones are broadcast), the op is applied
// as is, and every result is batched on dim 0.
ir::BatchResult batchElementwise(ir::OpCode op, const ir::BatchArgs& args);

// A cotangent if present, else zeros of the result: for multi-result ops whose rules need every cotangent.
Array cotangentOrZeros(const ir::VjpArgs& args, size_t result);

// Reduces `ct` (of the broadcast result's shape) back to the operand shape of a broadcast_in_dim.
Array unbroadcast(const Array& ct, const Aval& operand, const std::vector<int64_t>& broadcastDims);

}  // namespace tsr::ops
