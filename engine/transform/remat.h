#pragma once
// remat (jax.checkpoint): a function whose intermediates the backward pass recomputes instead of keeping alive
// from the forward pass, trading compute for memory. Calling the result runs the function (one remat_call op,
// inlined when compiling, so the forward pass costs nothing extra); differentiating it recomputes the function
// in the backward pass, behind an optimization_barrier that keeps the compiler from merging the recomputation
// with the forward pass (CSE) or running it before the cotangent it serves exists. The policy says what is
// saved all the same, as jax.checkpoint_policies does.
#include <functional>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"

namespace tsr {

struct ClosedGraph;

enum class RematPolicy : uint8_t {
  None,                // no remat: intermediates are kept (as without checkpoint)
  NothingSaveable,     // everything inside is recomputed (jax.checkpoint's default)
  DotsSaveable,        // dot_general results are kept, the rest (norms, activations, softmax) recomputed
  EverythingSaveable,  // everything is kept: the same as no remat
};

// "nothing_saveable", "dots_saveable", "everything_saveable", "none".
const char* rematPolicyName(RematPolicy policy);
// The names above; an error lists them.
Result<RematPolicy> parseRematPolicy(std::string_view name);

// The flat form: f's graph as one remat_call on `operands`, its outputs returned. None and EverythingSaveable
// call f as it is.
std::vector<Array> rematCall(const ArrayFn& f, const std::vector<Array>& operands, RematPolicy policy, TSR_LOC);

// The op itself: `g`, traced on the operands' avals, as one remat_call on them (g's consts become further
// operands), its last numSaved outputs the values `policy` saved. The last numConstOperands operands are values
// the function closed over too (the recomputation reads them as they are). Returns every output.
std::vector<Array> bindRematCall(ClosedGraph g, const std::vector<Array>& operands, int64_t numSaved,
                                 RematPolicy policy, int64_t numConstOperands = 0, TSR_LOC);

// checkpoint(f): f with its intermediates recomputed for the gradient. Inputs and outputs are Trees.
std::function<Tree(const Tree&)> remat(std::function<Tree(const Tree&)> f,
                                       RematPolicy policy = RematPolicy::NothingSaveable, TSR_LOC);

// jax.lax.optimization_barrier: the identity on each value, which no optimisation looks through or moves
// values across: all the results exist only once all the operands do.
std::vector<Array> optimizationBarrier(const std::vector<Array>& values, TSR_LOC);

}  // namespace tsr
