#pragma once
// Dead-code elimination (after XLA's HloDCE): removes nodes none of whose results reaches a graph output,
// unless the op may have side effects (ops outside the core list). Graph inputs stay, used or not: they are
// the function's signature. Nested graphs (scan bodies) are cleaned with their outputs kept.
#include "engine/passes/pass.h"

namespace tsr::passes {

class DeadCodeElimination : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

}  // namespace tsr::passes
