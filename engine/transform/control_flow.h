#pragma once
// Control flow, as jax.lax has it: scan (a loop with a carry and per-step inputs and outputs), whileLoop (a loop
// whose condition is computed on the device), foriLoop and cond. Each body is traced once, on per-step avals, into
// the nested graph of one scan, while_loop or cond op: a stack of 12
// identical layers written with scan is one block in the IR whatever its depth. Works eagerly (the op's kernel
// runs the body), under jit (the op is recorded), under grad and vmap (the op's vjp and batching rules).
#include <functional>
#include <utility>
#include <vector>

#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

namespace tsr {

// f: (carry, x) -> (new carry, y), with the new carry of the same structure, shapes and dtypes as the carry.
// Every leaf of xs is scanned over its leading dim, which must be `length` (length = -1 takes it from xs; with no
// xs it must be given). Returns the final carry and the ys, each y leaf stacked as [length, ...].
// reverse: the steps run length-1 .. 0; ys[t] is still the output of step t (as in jax.lax.scan).
using ScanBody = std::function<std::pair<Tree, Tree>(const Tree& carry, const Tree& x)>;
std::pair<Tree, Tree> scan(const ScanBody& f, const Tree& init, const Tree& xs, int64_t length = -1,
                           bool reverse = false, TSR_LOC);

// while (condFn(carry)) carry = bodyFn(carry), as jax.lax.while_loop: condFn returns a scalar bool, bodyFn a carry
// of the same structure, shapes and dtypes. The number of iterations is known only at run time, so grad refuses
// it (use scan or foriLoop with static bounds); vmap with a batched predicate runs until every example is done.
using LoopCond = std::function<Array(const Tree& carry)>;
using LoopStep = std::function<Tree(const Tree& carry)>;
Tree whileLoop(const LoopCond& condFn, const LoopStep& bodyFn, const Tree& init, TSR_LOC);

// for (i = lower; i < upper; ++i) carry = body(i, carry), with i an i32 scalar. With static bounds a scan without
// xs (differentiable); with traced bounds (scalar integer Arrays) a while_loop, whose trip count is known only at
// run time (as jax.lax.fori_loop does).
using LoopBody = std::function<Tree(const Array& i, const Tree& carry)>;
Tree foriLoop(int64_t lower, int64_t upper, const LoopBody& body, const Tree& init, TSR_LOC);
Tree foriLoop(const Array& lower, const Array& upper, const LoopBody& body, const Tree& init, TSR_LOC);

// pred ? trueFn(operands) : falseFn(operands), pred a scalar bool or integer (nonzero is true). Both branches
// must return the same structure, shapes and dtypes. One branch runs; under vmap with a batched pred both run and
// the results are selected per example (as in JAX).
using Branch = std::function<Tree(const Tree& operands)>;
Tree cond(const Array& pred, const Branch& trueFn, const Branch& falseFn, const Tree& operands, TSR_LOC);

// Flat forms, which the transformation rules use. body: (consts..., carries..., x slices...) ->
// (new carries..., y slices...); consts are passed to every step unchanged. Values the body closes over become
// further consts of the scan op.
std::vector<Array> scanFlat(const ArrayFn& body, const std::vector<Array>& consts, const std::vector<Array>& carries,
                            const std::vector<Array>& xs, int64_t length, bool reverse, TSR_LOC);
std::vector<Array> condFlat(const Array& pred, const ArrayFn& trueFn, const ArrayFn& falseFn,
                            const std::vector<Array>& operands, TSR_LOC);
// condFn: (consts..., carries...) -> bool[]; bodyFn: (consts..., carries...) -> new carries.
std::vector<Array> whileLoopFlat(const ArrayFn& condFn, const ArrayFn& bodyFn, const std::vector<Array>& consts,
                                 const std::vector<Array>& carries, TSR_LOC);

// Functions traced separately that become the nested graphs of one op share what they closed over: graph k takes
// its first `lead` traced inputs, then every graph's closed-over values in graph order (its own, and the others'
// as inputs it ignores), then the rest of its traced inputs. `consts` are those values, which the op takes as
// operands in that place.
struct SharedCaptures {
  std::vector<ir::GraphPtr> graphs;
  std::vector<Array> consts;
};
SharedCaptures shareCaptures(const std::vector<const ClosedGraph*>& traced, size_t lead);

// Replays a closed graph node by node with bind (eagerly, or into the current trace); inputs in its order.
std::vector<Array> bindGraph(const ir::Graph& g, const std::vector<Array>& inputs);
ArrayFn graphFn(ir::GraphPtr g);

// Tree::unflatten for the transformations' own bookkeeping (leaves they flattened themselves): raises instead of
// returning an error.
Tree unflattenOrRaise(const TreeDef& def, std::vector<Array> leaves);

}  // namespace tsr
