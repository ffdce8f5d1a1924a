#pragma once
// Row views: slices and concatenates that the CPU executable leaves to the ops around them instead of copying.
// An op whose CPU kernel takes rows lying a stride apart (OpDef::cpuRowViewDims: attention's [H, D] rows) reads a
// slice of a wider value where it lies, and writes its results into their places in the concatenate that joins
// them, as PyTorch's kernels take strided views and XLA assigns a concatenate's operands slices of its buffer.
// GPT-2's q, k and v are the three column blocks of one projection, and their gradients are concatenated back
// into that projection's: the three slices and the concatenate copied about 90 ms of a 2.2 s step.
//
//   - a slice read in place: a slice of one axis (every other dim whole, stride 1), each of whose readers,
//     through reshapes, is a row-view op whose rows (its trailing cpuRowViewDims dims) are the slice's rows (its
//     extent along the axis times the dims after it); the slice's result is then a view of its operand (an
//     offset, rows the operand's extent along the axis times the dims after it apart). GPT-2's [B, T, 3C]
//     projection is cut along its last dim, the heads layout's [B, T, 3, H, D] along dim 2;
//   - a concatenate written in place: along any axis, each operand, through reshapes, the only use of a result
//     of one row-view op that writes its results whole; those results are then views of the concatenate's
//     result, which that op's kernel defines.
// Views never escape the program (no view, nor a reshape of one, is a graph output). Only the CPU executable
// plans them (its kernels read TensorView::rowStride); a program lowered for another backend keeps its copies.
#include <cstdint>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/ir/op_def.h"
#include "engine/passes/fusion.h"

namespace tsr::cpu {

struct RowView {
  ir::ValueId value = ir::kNone;  // the slice's result, or the writing op's result
  ir::ValueId of = ir::kNone;     // the sliced value, or the concatenate's result
  int64_t offset = 0;             // elements from the start of `of` to the view's first
  int64_t rowStride = 0;          // elements from one row of the view to the next: the last dim of `of`
};

struct RowViewPlan {
  std::vector<bool> elided;  // per fusion group: its kernel (a slice or a concatenate) is replaced by views
  std::vector<RowView> views;
};

RowViewPlan planRowViews(const ir::Graph& g, const ir::OpRegistry& reg, const passes::FusionPlan& plan);

}  // namespace tsr::cpu
