#pragma once
// Helpers shared by the op families: error messages that name the op and the operand avals, common cost
// rules, and registration shorthands so that a new op is a few lines.
#include <span>
#include <string>
#include <vector>

#include "engine/core/check.h"
#include "engine/ir/op_def.h"

namespace tsr::ops {

// "add: operands must have equal shapes, got f32[2,3] and f32[3]"
std::string describeAvals(std::span<const Aval> avals);
Error opError(std::string_view op, std::span<const Aval> operands, std::string_view what);
// "[0,2]": dims or axes as an error message writes them.
std::string bracket(const ir::Ints& v);

// Checks the operand count of an op; returns an error naming the op otherwise.
Status checkArity(std::string_view op, std::span<const Aval> operands, size_t n);

// Cost of an op that touches each input and output element once, with `flopsPerElement` per output element.
ir::Cost elementwiseCost(std::span<const Aval> in, std::span<const Aval> out, double flopsPerElement);
// Cost of pure data movement: reads inputs, writes outputs, no flops.
ir::Cost movementCost(std::span<const Aval> in, std::span<const Aval> out);

// gather and scatter_add as loops (every backend's kernels): x viewed as [batch, outer, axisSize, inner] around
// the gathered axis, the indices as [batch, indices].
struct GatherGeometry {
  int64_t batch = 1, outer = 1, axisSize = 1, inner = 1, indices = 1;
};
GatherGeometry gatherGeometry(const Shape& x, const Shape& idx, const ir::GatherAttrs& at);
// The gathered aval, x.shape[:axis] + idx.shape[batchDims:] + x.shape[axis+1:] with x's dtype, or an error
// naming `op` when the indices' dtype, batch_dims or axis do not fit (gather and every scatter).
Result<Aval> gatheredAval(std::string_view op, std::span<const Aval> operands, const Aval& x, const Aval& idx,
                          const ir::GatherAttrs& at);
// The indices of a gather or scatter, [batch, indices], as int64 (u32 indices stay non-negative).
std::vector<int64_t> loadGatherIndices(const ir::TensorView& idx);

// Adds the op, checking invariants of core registration (an internal error, not a user one).
void addCoreOp(ir::OpRegistry& reg, ir::OpDef def);

// Starts an OpDef for a core op with its name and attrs kind taken from op_list.inc.
ir::OpDef coreOp(ir::OpCode code, std::string family, ir::FusionKind fusion, int numOperands, int numResults = 1);

template <class A>
const A& attrsAs(const ir::Attrs& attrs) {
  return std::get<A>(attrs);
}

}  // namespace tsr::ops
