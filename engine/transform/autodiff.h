#pragma once
// Reverse-mode autodiff on the IR: f is traced once, its graph is replayed in the current context (eagerly,
// or into an enclosing trace), and the pullback walks the nodes backwards applying each op's vjp rule. Since
// rules are written with the Array API, the result composes: jit(grad(f)), grad(grad(f)), vmap(grad(f)).
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/transform/array.h"

namespace tsr {

struct ClosedGraph;

using ArrayFn = std::function<std::vector<Array>(const std::vector<Array>&)>;

struct VjpOutput {
  std::vector<Array> outputs;
  // Maps one cotangent per output (an invalid Array means zero) to one cotangent per primal input.
  std::function<std::vector<Array>(const std::vector<Array>& cotangents)> pullback;
};

// Raises tsr::Exception on errors in f (inside jit/makeGraph/capture they become Results).
VjpOutput vjp(const ArrayFn& f, const std::vector<Array>& primals);

// vjp of a traced graph, replayed on `primals` (its first inputs; its consts follow). `known`, indexed by the
// graph's value ids (shorter, or an invalid Array: not known), holds values the replay takes as they are: a node
// whose results are all known is not run again, though its vjp rule still runs (remat's saved values). The
// pullback gives an invalid Array for a primal that gets no cotangent.
VjpOutput vjpOfGraph(std::shared_ptr<const ClosedGraph> graph, const std::vector<Array>& primals,
                     std::vector<Array> known = {});

// Gradient of a scalar loss with respect to a Tree of parameters; the gradients come back as a Tree with the
// same paths. `aux` (valueAndGradWithAux) is a Tree the loss function returns beside the loss.
struct ValueAndGrad {
  Array value;
  Tree grads;
  Tree aux;
};
using LossFn = std::function<Array(const Tree& params)>;
using LossWithAuxFn = std::function<std::pair<Array, Tree>(const Tree& params)>;

std::function<Tree(const Tree&)> grad(LossFn f);
std::function<ValueAndGrad(const Tree&)> valueAndGrad(LossFn f);
std::function<ValueAndGrad(const Tree&)> valueAndGradWithAux(LossWithAuxFn f);

// Scalar-to-scalar (or any array -> scalar) functions, so grad composes with itself: gradOf(gradOf(f)).
using ScalarFn = std::function<Array(const Array&)>;
ScalarFn gradOf(ScalarFn f);

}  // namespace tsr
