// The simplifier's rules, one entry each. A rule returns the value that replaces the node's result, or kNone.
// A replacement must have the result's aval; ifSameAval() guards the rules that return an operand.
#include "engine/passes/simplify.h"

namespace tsr::passes {

namespace {

using ir::kNone;
using ir::OpCode;
using ir::ValueId;

bool isIdentityPerm(const ir::Ints& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// The operand itself when the node's result has exactly its aval (a no-op reshape, broadcast, convert, ...).
ValueId ifSameAval(RuleContext& c, size_t i = 0) { return c.aval(c.operand(i)) == c.result() ? c.operand(i) : kNone; }

// Reshape of x to the node's shape: x itself when it already has that shape.
ValueId reshapeOf(RuleContext& c, ValueId x) {
  return c.aval(x) == c.result() ? x : c.insert(OpCode::Reshape, {x}, ir::ReshapeAttrs{c.result().shape.dims()});
}

// transpose(transpose(x, inner), outer) == transpose(x, composed) with composed[i] = inner[outer[i]].
ValueId composeTransposes(RuleContext& c) {
  const ir::Node* t = c.producer(0, OpCode::Transpose);
  if (!t) return kNone;
  ValueId x = t->operands[0];
  const ir::Ints inner = std::get<ir::TransposeAttrs>(t->attrs).perm;
  const ir::Ints& outer = c.attrs<ir::TransposeAttrs>().perm;
  ir::Ints composed;
  for (int64_t p : outer) composed.push_back(inner[static_cast<size_t>(p)]);
  return isIdentityPerm(composed) ? x : c.insert(OpCode::Transpose, {x}, ir::TransposeAttrs{composed});
}

// broadcast_in_dim(broadcast_in_dim(x, inner), outer): x dim i lands on outer[inner[i]]. Sizes stay valid: a
// dim of x that is not 1 keeps its size through both broadcasts.
ValueId composeBroadcasts(RuleContext& c) {
  const ir::Node* b = c.producer(0, OpCode::BroadcastInDim);
  if (!b) return kNone;
  ValueId x = b->operands[0];
  const ir::Ints inner = std::get<ir::BroadcastInDimAttrs>(b->attrs).broadcastDims;
  const auto& outer = c.attrs<ir::BroadcastInDimAttrs>();
  ir::Ints dims;
  for (int64_t d : inner) dims.push_back(outer.broadcastDims[static_cast<size_t>(d)]);
  return c.insert(OpCode::BroadcastInDim, {x}, ir::BroadcastInDimAttrs{outer.shape, dims});
}

// transpose(dot_general(a, b)) that swaps the two free blocks of the product ([batch, a free, b free] ->
// [batch, b free, a free]) is dot_general(b, a): the product comes out in the wanted layout and no transpose is
// materialised (autodiff's weight gradients have this form). Only when the transpose is the product's sole use.
ValueId dotOperandSwap(RuleContext& c) {
  const ir::Node* d = c.producer(0, OpCode::DotGeneral);
  if (!d || c.numUses(c.operand(0)) != 1) return kNone;
  const auto at = std::get<ir::DotGeneralAttrs>(d->attrs);
  const int64_t nb = static_cast<int64_t>(at.lhsBatch.size());
  const int64_t lhsRank = c.aval(d->operands[0]).rank(), rhsRank = c.aval(d->operands[1]).rank();
  const int64_t nfa = lhsRank - nb - static_cast<int64_t>(at.lhsContracting.size());
  const int64_t nfb = rhsRank - nb - static_cast<int64_t>(at.rhsContracting.size());
  const ir::Ints& perm = c.attrs<ir::TransposeAttrs>().perm;
  ir::Ints want;
  for (int64_t i = 0; i < nb; ++i) want.push_back(i);
  for (int64_t i = 0; i < nfb; ++i) want.push_back(nb + nfa + i);
  for (int64_t i = 0; i < nfa; ++i) want.push_back(nb + i);
  if (perm != want) return kNone;
  ValueId a = d->operands[0], b = d->operands[1];
  ir::DotGeneralAttrs swapped{at.rhsContracting, at.lhsContracting, at.rhsBatch, at.lhsBatch};
  return c.insert(OpCode::DotGeneral, {b, a}, swapped);
}

bool isFullSlice(RuleContext& c) {
  const auto& a = c.attrs<ir::SliceAttrs>();
  const Shape& s = c.aval(c.operand(0)).shape;
  for (int i = 0; i < s.rank(); ++i)
    if (a.starts[static_cast<size_t>(i)] != 0 || a.limits[static_cast<size_t>(i)] != s[i] ||
        a.strides[static_cast<size_t>(i)] != 1)
      return false;
  return true;
}

bool exactZeroProduct(RuleContext& c) { return !isFloating(c.result().dtype); }

ValueId noAxes(RuleContext& c) { return c.attrs<ir::ReduceAttrs>().axes.empty() ? ifSameAval(c) : kNone; }

}  // namespace

const std::vector<SimplifyRule>& simplifyRules() {
  static const std::vector<SimplifyRule> rules = {
      // Arithmetic identities; the constant may be a literal or a broadcast of a scalar constant.
      {OpCode::Add, "add(x, 0) -> x", [](RuleContext& c) { return c.isSplat(1, 0) ? ifSameAval(c, 0) : kNone; }},
      {OpCode::Add, "add(0, x) -> x", [](RuleContext& c) { return c.isSplat(0, 0) ? ifSameAval(c, 1) : kNone; }},
      {OpCode::Sub, "sub(x, 0) -> x", [](RuleContext& c) { return c.isSplat(1, 0) ? ifSameAval(c, 0) : kNone; }},
      {OpCode::Mul, "mul(x, 1) -> x", [](RuleContext& c) { return c.isSplat(1, 1) ? ifSameAval(c, 0) : kNone; }},
      {OpCode::Mul, "mul(1, x) -> x", [](RuleContext& c) { return c.isSplat(0, 1) ? ifSameAval(c, 1) : kNone; }},
      {OpCode::Mul, "mul(x, 0) -> 0 (integers)",
       [](RuleContext& c) { return exactZeroProduct(c) && c.isSplat(1, 0) ? ifSameAval(c, 1) : kNone; }},
      {OpCode::Mul, "mul(0, x) -> 0 (integers)",
       [](RuleContext& c) { return exactZeroProduct(c) && c.isSplat(0, 0) ? ifSameAval(c, 0) : kNone; }},
      {OpCode::Div, "div(x, 1) -> x", [](RuleContext& c) { return c.isSplat(1, 1) ? ifSameAval(c, 0) : kNone; }},
      {OpCode::Neg, "neg(neg(x)) -> x",
       [](RuleContext& c) { auto* p = c.producer(0, OpCode::Neg); return p ? p->operands[0] : kNone; }},
      // Layout: drop no-ops, merge chains.
      {OpCode::Reshape, "reshape(x) to x's shape -> x", [](RuleContext& c) { return ifSameAval(c); }},
      {OpCode::Reshape, "reshape(reshape(x)) -> reshape(x)",
       [](RuleContext& c) {
         auto* p = c.producer(0, OpCode::Reshape);
         return p ? reshapeOf(c, p->operands[0]) : kNone;
       }},
      {OpCode::Transpose, "transpose(x) by the identity -> x",
       [](RuleContext& c) { return isIdentityPerm(c.attrs<ir::TransposeAttrs>().perm) ? ifSameAval(c) : kNone; }},
      {OpCode::Transpose, "transpose(transpose(x)) -> transpose(x) by the composed perm", composeTransposes},
      {OpCode::Transpose, "transpose(dot_general(a, b)) swapping the free dims -> dot_general(b, a)", dotOperandSwap},
      {OpCode::BroadcastInDim, "broadcast_in_dim(x) to x's shape -> x", [](RuleContext& c) { return ifSameAval(c); }},
      {OpCode::BroadcastInDim, "broadcast_in_dim(broadcast_in_dim(x)) -> broadcast_in_dim(x)", composeBroadcasts},
      {OpCode::Slice, "slice(x) of the full range -> x",
       [](RuleContext& c) { return isFullSlice(c) ? ifSameAval(c) : kNone; }},
      {OpCode::Concatenate, "concatenate(x) -> x",
       [](RuleContext& c) { return c.numOperands() == 1 ? ifSameAval(c) : kNone; }},
      // Conversion and selection.
      {OpCode::Convert, "convert(x) to x's dtype -> x", [](RuleContext& c) { return ifSameAval(c); }},
      {OpCode::Select, "select(p, x, x) -> x",
       [](RuleContext& c) { return c.operand(1) == c.operand(2) ? ifSameAval(c, 1) : kNone; }},
      // Reductions over no axes.
      {OpCode::ReduceSum, "reduce_sum(x) over no axes -> x", noAxes},
      {OpCode::ReduceMax, "reduce_max(x) over no axes -> x", noAxes},
      {OpCode::ReduceMin, "reduce_min(x) over no axes -> x", noAxes},
      {OpCode::ReduceProd, "reduce_prod(x) over no axes -> x", noAxes},
  };
  return rules;
}

}  // namespace tsr::passes
