// The simplifier's rules, one entry each. A rule returns the value that replaces the node's result, or kNone.
// A replacement must have the result's aval; ifSameAval() guards the rules that return an operand.
#include "engine/passes/simplify.h"

#include <utility>

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

// add(pad(x, 0), pad(y, 0)) where the pads place x and y side by side along one dim and pad nothing else:
// pad(concatenate(x, y), 0) over their union, or the concatenate alone where that covers the result. The
// gradient of slices of one tensor has this form (attention's q, k, v split): one copy instead of a padded
// tensor per slice plus adds. Operands that are single-use concatenates along the same dim are spliced in, so
// three slices give one concatenate of three. x + 0 -> x as in "add(x, 0) -> x".
ValueId padsToConcatenate(RuleContext& c) {
  const ir::Node* pa = c.producer(0, OpCode::Pad);
  const ir::Node* pb = c.producer(1, OpCode::Pad);
  if (!pa || !pb || c.numUses(c.operand(0)) != 1 || c.numUses(c.operand(1)) != 1) return kNone;
  struct Placed {
    ValueId x;
    ir::PadAttrs at;
  };
  Placed a{pa->operands[0], std::get<ir::PadAttrs>(pa->attrs)}, b{pb->operands[0], std::get<ir::PadAttrs>(pb->attrs)};
  const ValueId zero = pa->operands[1];
  if (!c.isSplatValue(zero, 0) || !c.isSplatValue(pb->operands[1], 0)) return kNone;
  const size_t rank = static_cast<size_t>(c.result().rank());
  int64_t dim = -1;
  for (size_t d = 0; d < rank; ++d) {
    for (const Placed* p : {&a, &b})
      if (p->at.interior[d] != 0 || p->at.low[d] < 0 || p->at.high[d] < 0) return kNone;
    if (a.at.low[d] == 0 && a.at.high[d] == 0 && b.at.low[d] == 0 && b.at.high[d] == 0) continue;
    if (dim >= 0) return kNone;  // padded along two dims
    dim = static_cast<int64_t>(d);
  }
  if (dim < 0) return kNone;
  const size_t d = static_cast<size_t>(dim);
  if (a.at.low[d] + c.aval(a.x).shape[static_cast<int>(d)] != b.at.low[d]) std::swap(a, b);
  if (a.at.low[d] + c.aval(a.x).shape[static_cast<int>(d)] != b.at.low[d]) return kNone;  // a gap or an overlap
  std::vector<ValueId> parts;
  for (ValueId v : {a.x, b.x}) {
    const ir::Node* cat = c.producerOf(v, OpCode::Concatenate);
    if (cat && std::get<ir::ConcatenateAttrs>(cat->attrs).axis == dim && c.numUses(v) == 1)
      parts.insert(parts.end(), cat->operands.begin(), cat->operands.end());
    else
      parts.push_back(v);
  }
  ValueId joined = c.insert(OpCode::Concatenate, parts, ir::ConcatenateAttrs{dim});
  if (joined == kNone) return kNone;
  if (a.at.low[d] == 0 && b.at.high[d] == 0) return c.aval(joined) == c.result() ? joined : kNone;
  ir::PadAttrs at{ir::Ints(rank, 0), ir::Ints(rank, 0), ir::Ints(rank, 0)};
  at.low[d] = a.at.low[d];
  at.high[d] = b.at.high[d];
  return c.insert(OpCode::Pad, {joined, zero}, at);
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
      {OpCode::Add, "add(pad(x, 0), pad(y, 0)) side by side -> pad(concatenate(x, y), 0)", padsToConcatenate},
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
      {OpCode::Pad, "pad(x) by nothing -> x",
       [](RuleContext& c) {
         const auto& at = c.attrs<ir::PadAttrs>();
         for (size_t d = 0; d < at.low.size(); ++d)
           if (at.low[d] || at.high[d] || at.interior[d]) return kNone;
         return ifSameAval(c);
       }},
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
