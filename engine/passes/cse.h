#pragma once
// Common-subexpression elimination: two nodes with the same op, equal attrs and the same operands compute the
// same values, so the later one is replaced by the earlier. Constants with equal literals (same aval, same
// bytes: -0.0 and 0.0 stay apart) merge the same way. Operands of commutative ops (add, mul, max, min, and,
// or, xor, eq, ne) match in either order. Ops that may have side effects (outside the core list) never merge.
#include "engine/passes/pass.h"

namespace tsr::passes {

class CommonSubexpressionElimination : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

// A hash of an op's attrs that agrees with Attrs equality (equal attrs hash alike). Walks fields(); a field
// type it does not know (a nested graph) adds nothing, leaving the decision to equality.
size_t hashAttrs(const ir::Attrs& attrs);

}  // namespace tsr::passes
