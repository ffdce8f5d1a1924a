#pragma once
// Inlines every custom_vjp_call (engine/ops/custom_vjp.cpp): its primal graph's nodes take the call's place, so
// the passes after it and the backends see ordinary ops (fusible, shardable) and never need to know about the
// call. Its fwd and bwd graphs matter only to the vjp rule, which ran when the gradient was traced. Nested graphs
// (a scan's body) are inlined too, and a primal graph that itself calls custom_vjp is inlined until none is left.
#include "engine/passes/pass.h"

namespace tsr::passes {

class InlineCustomVjp : public Pass {
 public:
  std::string_view name() const override { return "inline_custom_vjp"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

}  // namespace tsr::passes
