#pragma once
// Recompute: copies cheap elementwise values into the kernels that read them, so that the kernel that computed
// them need not store them (rematerialisation within fusion, as XLA's fusion duplicates cheap producers into
// their consumers and PyTorch's GeluBackward recomputes from the input).
//
// A traced training step reads many values of the forward pass in its backward pass: gelu's vjp reads x*x,
// 1 + tanh(...), 0.5x, 1 - tanh^2 and more, each a full activation that the forward kernel writes and the
// backward kernel reads back. Each of those is a few adds and multiplies away from x and tanh(...). The pass
// plans fusion as it stands, and for each kernel C and each full-size value v that C reads from another kernel
// where an add, sub, mul, neg, square, abs, max, min, relu, sign or clamp computed it, it follows v's producers
// through such ops (never through exp, tanh, divisions or reductions, which cost more to repeat than to read) to
// the values they start from, and weighs the bytes: C's reads of the values it would no longer read, and the
// writes their kernels would no longer make, against the reads of the values it would start from and the writes
// of those not yet stored; and the step's peak memory may not grow: a value kept alive longer for the copies
// needs a stored value at least as big that goes and was alive over the same stretch. Where that holds and the
// bytes are fewer, the ops are copied (with their provenance) just before their first reader in C and C's members
// read the copies; the fusion planner then keeps the copies out of their producers' kernel and fuses them into C
// (FusionReason::Recomputed).
// Gelu's backward kernel in GPT-2 then reads x and tanh(...) instead of seven values, and its forward kernel
// writes three instead of seven.
//
// The pass runs last in the standard pipeline (after cse, which would merge the copies back) and only over the
// top-level graph. TESSERA_RECOMPUTE=off switches it off.
#include "engine/passes/fusion.h"
#include "engine/passes/pass.h"

namespace tsr::passes {

class Recompute : public Pass {
 public:
  explicit Recompute(FusionOptions options = {}) : m_options(options) {}
  std::string_view name() const override { return "recompute"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;

 private:
  FusionOptions m_options;
};

}  // namespace tsr::passes
