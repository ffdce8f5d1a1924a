#pragma once
// customVjp, as jax.custom_vjp: a function with a gradient of the user's. f(primals) -> outputs; fwd(primals) ->
// (outputs, residuals); bwd(residuals, output cotangents) -> one cotangent per primal. Calling the result runs f
// (one custom_vjp_call op, whose three graphs are traced once; compiling inlines f, so it costs nothing at run
// time); grad and vjp use fwd and bwd instead of differentiating f (a numerically stable gradient, a clipped
// one); vmap batches all three. Primals, outputs and residuals are Trees.
#include <functional>
#include <utility>
#include <vector>

#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"

namespace tsr {

using CustomFn = std::function<Tree(const Tree& primals)>;
using CustomFwd = std::function<std::pair<Tree, Tree>(const Tree& primals)>;        // (outputs, residuals)
using CustomBwd = std::function<Tree(const Tree& residuals, const Tree& cotangents)>;  // -> primals' cotangents

// bwd returns a Tree of the primals' structure; an empty Array (Array()) stands for a zero cotangent, as None
// does in JAX.
std::function<Tree(const Tree& primals)> customVjp(CustomFn f, CustomFwd fwd, CustomBwd bwd, TSR_LOC);

// The flat form, which the Python front end and the batching rule use. f: (operands...) -> outputs; fwd:
// (operands...) -> (outputs..., residuals...); bwd: (operands..., residuals..., output cotangents...) -> one
// cotangent per primal, the first numPrimals operands (the others get none). Values the functions close over
// become further operands of the op.
std::vector<Array> customVjpCall(const ArrayFn& f, const ArrayFn& fwd, const ArrayFn& bwd,
                                 const std::vector<Array>& operands, size_t numPrimals, TSR_LOC);

}  // namespace tsr
