#include "engine/ops/shard_rules.h"

#include <algorithm>
#include <optional>

#include "engine/ops/op_helpers.h"
#include "engine/ops/window_geometry.h"

namespace tsr::ops {
namespace {

using ir::FactorKind;
using ir::ShardingRule;
using Avals = std::span<const Aval>;

std::vector<int> wholeDims(const Aval& a) { return std::vector<int>(static_cast<size_t>(a.rank()), -1); }

// A rule with every dim of every operand and result whole; callers then map the dims that may be split.
ShardingRule wholeRule(Avals in, Avals out) {
  ShardingRule r;
  for (const Aval& a : in) r.operandDims.push_back(wholeDims(a));
  for (const Aval& a : out) r.resultDims.push_back(wholeDims(a));
  return r;
}

// One pass-through factor per dim of result 0, shared by the same dim of every operand and result of that rank.
ShardingRule sameDimsRule(Avals in, Avals out) {
  ShardingRule r = wholeRule(in, out);
  const int rank = out.empty() ? 0 : out[0].rank();
  for (int d = 0; d < rank; ++d) {
    int f = r.addFactor(FactorKind::PassThrough);
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].rank() == rank) r.operandDims[i][static_cast<size_t>(d)] = f;
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i].rank() == rank) r.resultDims[i][static_cast<size_t>(d)] = f;
  }
  return r;
}

// Maps operand 0's dim d and result 0's dim d to one factor where `passes(d)`; other dims stay whole.
template <class Pred>
ShardingRule sameDimsWhere(Avals in, Avals out, Pred passes) {
  ShardingRule r = wholeRule(in, out);
  for (int d = 0; d < out[0].rank(); ++d) {
    if (!passes(d)) continue;
    int f = r.addFactor(FactorKind::PassThrough);
    r.operandDims[0][static_cast<size_t>(d)] = f;
    r.resultDims[0][static_cast<size_t>(d)] = f;
  }
  return r;
}

// Attrs whose only shape field is the result shape.
template <class A>
ir::Attrs withResultShape(const ir::Attrs& global, Avals, Avals localResults) {
  A a = attrsAs<A>(global);
  a.shape = localResults[0].shape.dims();
  return a;
}

}  // namespace

ir::ShardRule elementwiseShardRule() {
  return [](Avals in, Avals out, const ir::Attrs&) -> Result<ShardingRule> { return sameDimsRule(in, out); };
}

ir::ShardRule replicatedShardRule() {
  return [](Avals in, Avals out, const ir::Attrs&) -> Result<ShardingRule> { return wholeRule(in, out); };
}

ir::ShardRule broadcastInDimShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::BroadcastInDimAttrs>(attrs);
    ShardingRule r = wholeRule(in, out);
    for (auto& f : r.resultDims[0]) f = r.addFactor(FactorKind::PassThrough);
    for (size_t i = 0; i < a.broadcastDims.size(); ++i) {
      auto d = static_cast<size_t>(a.broadcastDims[i]);
      // A size-1 dim stretched by the broadcast is whole; a dim kept as is follows the result's.
      if (in[0].shape[static_cast<int>(i)] == out[0].shape[static_cast<int>(d)]) r.operandDims[0][i] = r.resultDims[0][d];
    }
    r.localAttrs = withResultShape<ir::BroadcastInDimAttrs>;
    return r;
  };
}

// Splits the two shapes into blocks of dims with equal products ([B, T, C] -> [B, T, H, D]: B | T | C~(H, D)).
// The major non-unit dims of a block share a factor: splitting the major dim splits the block's elements into
// the same contiguous runs on both sides. Minor dims of a block that merges or splits must be whole.
ir::ShardRule reshapeShardRule() {
  return [](Avals in, Avals out, const ir::Attrs&) -> Result<ShardingRule> {
    ShardingRule r = wholeRule(in, out);
    const Shape& a = in[0].shape;
    const Shape& b = out[0].shape;
    int i = 0, j = 0;
    while (i < a.rank() && j < b.rank()) {
      int i0 = i, j0 = j;
      int64_t pa = a[i++], pb = b[j++];
      while (pa != pb) {
        if (pa < pb && i < a.rank()) pa *= a[i++];
        else if (pb < pa && j < b.rank()) pb *= b[j++];
        else break;
      }
      if (pa != pb || pa == 0) break;  // an empty array: nothing to split
      while (i0 < i && a[i0] == 1) ++i0;
      while (j0 < j && b[j0] == 1) ++j0;
      if (i0 < i && j0 < j) {
        int f = r.addFactor(FactorKind::PassThrough);
        r.operandDims[0][static_cast<size_t>(i0)] = f;
        r.resultDims[0][static_cast<size_t>(j0)] = f;
      }
    }
    r.localAttrs = withResultShape<ir::ReshapeAttrs>;
    return r;
  };
}

ir::ShardRule transposeShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& perm = attrsAs<ir::TransposeAttrs>(attrs).perm;
    ShardingRule r = wholeRule(in, out);
    for (size_t d = 0; d < perm.size(); ++d) {
      int f = r.addFactor(FactorKind::PassThrough);
      r.resultDims[0][d] = f;
      r.operandDims[0][static_cast<size_t>(perm[d])] = f;
    }
    return r;
  };
}

ir::ShardRule sliceShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::SliceAttrs>(attrs);
    ShardingRule r = sameDimsWhere(in, out, [&](int d) {
      auto k = static_cast<size_t>(d);
      return a.starts[k] == 0 && a.limits[k] == in[0].shape[d] && (a.strides.empty() || a.strides[k] == 1);
    });
    r.localAttrs = [](const ir::Attrs& global, Avals localIn, Avals) -> ir::Attrs {
      ir::SliceAttrs s = attrsAs<ir::SliceAttrs>(global);
      // A dim taken whole is now the local dim, taken whole.
      for (size_t d = 0; d < s.limits.size(); ++d)
        s.limits[d] = std::min(s.limits[d], localIn[0].shape[static_cast<int>(d)]);
      return s;
    };
    return r;
  };
}

ir::ShardRule padShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::PadAttrs>(attrs);
    return sameDimsWhere(in, out, [&](int d) {
      auto k = static_cast<size_t>(d);
      return a.low[k] == 0 && a.high[k] == 0 && (a.interior.empty() || a.interior[k] == 0);
    });
  };
}

ir::ShardRule revShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& dims = attrsAs<ir::RevAttrs>(attrs).dims;
    return sameDimsWhere(in, out, [&](int d) { return std::find(dims.begin(), dims.end(), d) == dims.end(); });
  };
}

ir::ShardRule cumulativeShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const int64_t axis = attrsAs<ir::CumulativeAttrs>(attrs).axis;
    return sameDimsWhere(in, out, [&](int d) { return d != axis; });
  };
}

ir::ShardRule dynamicSliceShardRule() {
  return [](Avals in, Avals out, const ir::Attrs&) -> Result<ShardingRule> {
    ShardingRule r = sameDimsWhere(in, out, [&](int d) { return out[0].shape[d] == in[0].shape[d]; });
    r.localAttrs = [](const ir::Attrs& global, Avals, Avals localOut) -> ir::Attrs {
      ir::DynamicSliceAttrs s = attrsAs<ir::DynamicSliceAttrs>(global);
      s.sizes = localOut[0].shape.dims();
      return s;
    };
    return r;
  };
}

ir::ShardRule dynamicUpdateSliceShardRule() {
  return [](Avals in, Avals out, const ir::Attrs&) -> Result<ShardingRule> {
    ShardingRule r = sameDimsWhere(in, out, [&](int d) { return in[1].shape[d] == in[0].shape[d]; });
    for (size_t d = 0; d < r.resultDims[0].size(); ++d) r.operandDims[1][d] = r.resultDims[0][d];
    return r;
  };
}

ir::ShardRule concatenateShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    ShardingRule r = sameDimsRule(in, out);
    auto axis = static_cast<size_t>(attrsAs<ir::ConcatenateAttrs>(attrs).axis);
    for (auto& dims : r.operandDims) dims[axis] = -1;
    r.resultDims[0][axis] = -1;
    return r;
  };
}

ir::ShardRule iotaShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    auto counting = static_cast<size_t>(attrsAs<ir::IotaAttrs>(attrs).dimension);
    ShardingRule r = wholeRule(in, out);
    for (size_t d = 0; d < r.resultDims[0].size(); ++d)
      if (d != counting) r.resultDims[0][d] = r.addFactor(FactorKind::PassThrough);
    r.localAttrs = withResultShape<ir::IotaAttrs>;
    return r;
  };
}

ir::ShardRule reduceShardRule(bool partialSums) {
  return [partialSums](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& axes = attrsAs<ir::ReduceAttrs>(attrs).axes;
    ShardingRule r = wholeRule(in, out);
    size_t kept = 0;
    for (int d = 0; d < in[0].rank(); ++d) {
      bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
      if (reduced) {
        if (partialSums) r.operandDims[0][static_cast<size_t>(d)] = r.addFactor(FactorKind::Reduction);
      } else {
        int f = r.addFactor(FactorKind::PassThrough);
        r.operandDims[0][static_cast<size_t>(d)] = f;
        r.resultDims[0][kept++] = f;
      }
    }
    return r;
  };
}

ir::ShardRule argReduceShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    auto axis = static_cast<int>(attrsAs<ir::ArgReduceAttrs>(attrs).axis);
    ShardingRule r = wholeRule(in, out);
    size_t kept = 0;
    for (int d = 0; d < in[0].rank(); ++d) {
      if (d == axis) continue;
      int f = r.addFactor(FactorKind::PassThrough);
      r.operandDims[0][static_cast<size_t>(d)] = f;
      r.resultDims[0][kept++] = f;
    }
    return r;
  };
}

// Result dims: batch, lhs free, rhs free (XLA order); contracting dims are reduction factors.
// conv_general_dilated: the lhs batch dim passes through to the result's batch dim (without batch groups, which
// mix batch and features); with no groups at all the rhs out-feature dim passes through to the result's
// feature dim. Features in, and every spatial dim (windows overlap), stay whole.
ir::ShardRule convShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::ConvAttrs>(attrs);
    ShardingRule r = wholeRule(in, out);
    if (a.batchGroupCount == 1) {
      int f = r.addFactor(FactorKind::PassThrough);
      r.operandDims[0][static_cast<size_t>(a.lhsSpec[0])] = f;
      r.resultDims[0][static_cast<size_t>(a.outSpec[0])] = f;
    }
    if (a.batchGroupCount == 1 && a.featureGroupCount == 1) {
      int f = r.addFactor(FactorKind::PassThrough);
      r.operandDims[1][static_cast<size_t>(a.rhsSpec[0])] = f;
      r.resultDims[0][static_cast<size_t>(a.outSpec[1])] = f;
    }
    return r;
  };
}

ir::ShardRule windowShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::WindowAttrs>(attrs);
    ShardingRule r = wholeRule(in, out);
    for (size_t d = 0; d < a.windowDimensions.size(); ++d) {
      if (isWindowed(a, d)) continue;
      int f = r.addFactor(FactorKind::PassThrough);
      for (auto& dims : r.operandDims) dims[d] = f;
      r.resultDims[0][d] = f;
    }
    return r;
  };
}

ir::ShardRule dotGeneralShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    const auto& a = attrsAs<ir::DotGeneralAttrs>(attrs);
    ShardingRule r = wholeRule(in, out);
    auto& lhs = r.operandDims[0];
    auto& rhs = r.operandDims[1];
    size_t next = 0;
    for (size_t i = 0; i < a.lhsBatch.size(); ++i) {
      int f = r.addFactor(FactorKind::PassThrough);
      lhs[static_cast<size_t>(a.lhsBatch[i])] = f;
      rhs[static_cast<size_t>(a.rhsBatch[i])] = f;
      r.resultDims[0][next++] = f;
    }
    for (size_t i = 0; i < a.lhsContracting.size(); ++i) {
      int f = r.addFactor(FactorKind::Reduction);
      lhs[static_cast<size_t>(a.lhsContracting[i])] = f;
      rhs[static_cast<size_t>(a.rhsContracting[i])] = f;
    }
    auto isIn = [](const ir::Ints& v, int64_t d) { return std::find(v.begin(), v.end(), d) != v.end(); };
    for (int d = 0; d < in[0].rank(); ++d)
      if (!isIn(a.lhsBatch, d) && !isIn(a.lhsContracting, d))
        lhs[static_cast<size_t>(d)] = r.resultDims[0][next++] = r.addFactor(FactorKind::PassThrough);
    for (int d = 0; d < in[1].rank(); ++d)
      if (!isIn(a.rhsBatch, d) && !isIn(a.rhsContracting, d))
        rhs[static_cast<size_t>(d)] = r.resultDims[0][next++] = r.addFactor(FactorKind::PassThrough);
    return r;
  };
}

namespace {

// gather(x, idx) and scatter_add(x, idx, updates) share the layout: result (or updates) = x.shape[:axis] +
// idx.shape[batchDims:] + x.shape[axis+1:]. x's dims other than `axis` pass through; `axis` itself is
// indexed and must be whole. idxKind: how idx's own dims map (pass-through for gather, where each index gives
// a result row; reduction for scatter_add, where updates at many positions are summed into one table; none for the
// other scatters, whose updates' index dims stay whole).
void mapGatherDims(const ir::GatherAttrs& a, Avals in, ShardingRule& r, std::vector<int>& gathered,
                   std::optional<FactorKind> idxKind) {
  auto axis = static_cast<size_t>(a.axis);
  auto batch = static_cast<size_t>(a.batchDims);
  const auto idxRank = static_cast<size_t>(in[1].rank());
  for (size_t d = 0; d < static_cast<size_t>(in[0].rank()); ++d) {
    if (d == axis) continue;
    int f = r.addFactor(FactorKind::PassThrough);
    r.operandDims[0][d] = f;
    gathered[d < axis ? d : d - 1 + idxRank - batch] = f;
    if (d < batch) r.operandDims[1][d] = f;
  }
  if (!idxKind) return;
  for (size_t j = batch; j < idxRank; ++j) {
    int f = r.addFactor(*idxKind);
    r.operandDims[1][j] = f;
    gathered[axis + j - batch] = f;
  }
}

}  // namespace

ir::ShardRule gatherShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    ShardingRule r = wholeRule(in, out);
    std::vector<int> res = r.resultDims[0];
    mapGatherDims(attrsAs<ir::GatherAttrs>(attrs), in, r, res, FactorKind::PassThrough);
    r.resultDims[0] = std::move(res);
    return r;
  };
}

ir::ShardRule scatterAddShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    ShardingRule r = wholeRule(in, out);
    std::vector<int> updates = r.operandDims[2];
    mapGatherDims(attrsAs<ir::GatherAttrs>(attrs), in, r, updates, FactorKind::Reduction);
    r.operandDims[2] = std::move(updates);
    r.resultDims[0] = r.operandDims[0];
    return r;
  };
}

ir::ShardRule scatterShardRule() {
  return [](Avals in, Avals out, const ir::Attrs& attrs) -> Result<ShardingRule> {
    ShardingRule r = wholeRule(in, out);
    std::vector<int> updates = r.operandDims[2];
    mapGatherDims(attrsAs<ir::GatherAttrs>(attrs), in, r, updates, std::nullopt);
    r.operandDims[2] = std::move(updates);
    r.resultDims[0] = r.operandDims[0];
    return r;
  };
}

}  // namespace tsr::ops
