#pragma once
// Constant folding: a node whose operands are all constants is evaluated at compile time with the op's CPU
// reference kernel (so a folded value is bit-identical to a computed one) and replaced by a constant, when
// the result is at most PassOptions::maxFoldBytes. Two forms are never expanded into literals, whatever
// their size, because they are the compact spelling of big constants (as in XLA): iota, and broadcast_in_dim
// (of a scalar or of a small constant). An elementwise op whose operands are all splats (a broadcast of a
// scalar constant) is computed on the scalars and stays a splat: add(bcast(2), bcast(3)) -> bcast(5), at any
// size. Control flow (scan, cond) and ops outside the core list are not evaluated.
#include <span>
#include <vector>

#include "engine/passes/pass.h"

namespace tsr::passes {

class ConstantFolding : public Pass {
 public:
  std::string_view name() const override { return "constant_folding"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

// Runs one op on literal operands with its CPU kernel.
Result<std::vector<ir::Literal>> evaluateOp(const ir::OpDef& def, std::span<const ir::Literal> operands,
                                            const ir::Attrs& attrs);

}  // namespace tsr::passes
