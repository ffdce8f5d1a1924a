#pragma once
// Inlines every call whose body is a nested graph that runs as it is: custom_vjp_call (its primal graph;
// engine/ops/custom_vjp.cpp) and remat_call (its body; engine/ops/remat.cpp). The body's nodes take the call's
// place, so the passes after it, the sharding planner and the backends see ordinary ops (fusible, shardable) and
// never need to know about the call. What the calls carry for differentiation (custom_vjp's fwd and bwd, remat's
// policy) mattered only to their vjp rules, which ran when the gradient was traced; a remat's recomputation is
// already in the graph, behind its optimization_barrier. Nested graphs (a scan's body) are inlined too, and a body
// that itself holds calls is inlined until none is left.
#include "engine/passes/pass.h"

namespace tsr::passes {

class InlineCalls : public Pass {
 public:
  std::string_view name() const override { return "inline_calls"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;
};

}  // namespace tsr::passes
