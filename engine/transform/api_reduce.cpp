// Reductions, contractions, indexing and compositions (softmax & co.) of the Array API.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string_view>

#include "engine/transform/api.h"
#include "engine/transform/autocast.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {

// Axis `axis` of x, negative counting from the end; out of range, an error naming the op ("take: axis 3 is out of
// range for f32[2,3]"). `what` names the parameter where the op calls it otherwise ("dimension").
int axisOf(std::string_view op, const Array& x, int64_t axis, const std::source_location& loc,
           std::string_view what = "axis") {
  const int a = normalizeAxis(axis, x.rank());
  if (a < 0) raiseAt(loc, makeError("{}: {} {} is out of range for {}", op, what, axis, x.aval().toString()));
  return a;
}

// Normalises reduction axes (empty = all), sorted and unique.
Axes reductionAxes(const Array& x, Axes axes, const char* op, const std::source_location& loc) {
  if (axes.empty()) {
    axes.resize(static_cast<size_t>(x.rank()));
    std::iota(axes.begin(), axes.end(), 0);
    return axes;
  }
  for (auto& a : axes) a = axisOf(op, x, a, loc);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    raiseAt(loc, makeError("{}: repeated axis in [{}]", op, joinInts(axes)));
  return axes;
}

Array reduce(OpCode op, const Array& x, Axes axes, bool keepDims, const std::source_location& loc) {
  Axes ax = reductionAxes(x, std::move(axes), ir::coreOpName(op), loc);
  Array r = bind1(op, {x}, ir::ReduceAttrs{ax}, loc);
  if (!keepDims) return r;
  auto dims = x.shape().dims();
  for (int64_t a : ax) dims[static_cast<size_t>(a)] = 1;
  return reshape(r, dims, loc);
}

Array argReduce(OpCode op, const Array& x, int64_t axis, DType indexDtype, const std::source_location& loc) {
  return bind1(op, {x}, ir::ArgReduceAttrs{axisOf(ir::coreOpName(op), x, axis, loc), indexDtype}, loc);
}

}  // namespace

Array sum(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceSum, x, std::move(axes), keepDims, loc);
}
Array max(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceMax, x, std::move(axes), keepDims, loc);
}
Array min(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceMin, x, std::move(axes), keepDims, loc);
}
Array prod(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceProd, x, std::move(axes), keepDims, loc);
}
Array all(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceAnd, x, std::move(axes), keepDims, loc);
}
Array any(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  return reduce(OpCode::ReduceOr, x, std::move(axes), keepDims, loc);
}

namespace {
Array cumulative(OpCode op, const Array& x, int64_t axis, bool reverse, const std::source_location& loc) {
  return bind1(op, {x}, ir::CumulativeAttrs{axisOf(ir::coreOpName(op), x, axis, loc), reverse}, loc);
}
}  // namespace

Array cumsum(const Array& x, int64_t axis, bool reverse, std::source_location loc) {
  return cumulative(OpCode::Cumsum, x, axis, reverse, loc);
}
Array cumprod(const Array& x, int64_t axis, bool reverse, std::source_location loc) {
  return cumulative(OpCode::Cumprod, x, axis, reverse, loc);
}
Array cummax(const Array& x, int64_t axis, bool reverse, std::source_location loc) {
  return cumulative(OpCode::Cummax, x, axis, reverse, loc);
}
Array cumlogsumexp(const Array& x, int64_t axis, bool reverse, std::source_location loc) {
  return cumulative(OpCode::Cumlogsumexp, x, axis, reverse, loc);
}
std::vector<Array> sort(const std::vector<Array>& operands, int64_t dimension, bool isStable, int64_t numKeys,
                        std::source_location loc) {
  if (operands.empty()) raiseAt(loc, makeError("sort: needs at least one operand"));
  const int d = axisOf("sort", operands[0], dimension, loc, "dimension");
  return bind(OpCode::Sort, operands, ir::SortAttrs{d, isStable, numKeys}, loc);
}
Array sort(const Array& x, int64_t axis, std::source_location loc) { return sort(std::vector<Array>{x}, axis, true, 1, loc)[0]; }
Array argsort(const Array& x, int64_t axis, DType indexDtype, std::source_location loc) {
  const int d = axisOf("argsort", x, axis, loc);
  return sort({x, iota(x.shape(), d, indexDtype, loc)}, d, true, 1, loc)[1];
}
std::pair<Array, Array> topK(const Array& x, int64_t k, std::source_location loc) {
  auto r = bind(OpCode::TopK, {x}, ir::TopKAttrs{k}, loc);
  return {r[0], r[1]};
}

Array mean(const Array& x, Axes axes, bool keepDims, std::source_location loc) {
  Array xf = isFloating(x.dtype()) ? x : astype(x, DType::F32, loc);
  Axes ax = reductionAxes(xf, std::move(axes), "mean", loc);
  int64_t count = 1;
  for (int64_t a : ax) count *= xf.shape()[static_cast<int>(a)];
  Array s = reduce(OpCode::ReduceSum, xf, ax, keepDims, loc);
  return div(s, scalarLike(s, static_cast<double>(count), loc), loc);
}

Array argmax(const Array& x, int64_t axis, DType indexDtype, std::source_location loc) {
  return argReduce(OpCode::Argmax, x, axis, indexDtype, loc);
}
Array argmin(const Array& x, int64_t axis, DType indexDtype, std::source_location loc) {
  return argReduce(OpCode::Argmin, x, axis, indexDtype, loc);
}

Array dotGeneral(const Array& a0, const Array& b0, const DotDims& d, std::source_location loc) {
  // Under autocast both f32 operands are read in the compute dtype, and only floats are (an integer product
  // stays exact).
  const bool floats = isFloating(a0.dtype()) && isFloating(b0.dtype());
  const Array a = floats ? autocastOperand(a0, loc) : a0, b = floats ? autocastOperand(b0, loc) : b0;
  DType t = promoteTypes(a.dtype(), b.dtype());
  return bind1(OpCode::DotGeneral, {astype(a, t, loc), astype(b, t, loc)},
               ir::DotGeneralAttrs{d.lhsContracting, d.rhsContracting, d.lhsBatch, d.rhsBatch}, loc);
}

Array matmul(const Array& a, const Array& b, std::source_location loc) {
  if (a.rank() == 0 || b.rank() == 0)
    raiseAt(loc, makeError("matmul: operands must have rank >= 1, got {} and {}", a.aval().toString(), b.aval().toString()));
  if (a.rank() == 1 && b.rank() == 1) return dotGeneral(a, b, {{0}, {0}, {}, {}}, loc);
  if (a.rank() == 1) return squeeze(matmul(expandDims(a, 0, loc), b, loc), {-2}, loc);
  if (b.rank() == 1) return squeeze(matmul(a, expandDims(b, 1, loc), loc), {-1}, loc);
  int64_t k = a.rank() - 1;
  if (a.shape()[static_cast<int>(k)] != b.shape()[b.rank() - 2])
    raiseAt(loc, makeError("matmul: inner dimensions differ: {} @ {} ({} vs {})", a.aval().toString(),
                           b.aval().toString(), a.shape()[static_cast<int>(k)], b.shape()[b.rank() - 2]));
  // x[..., M, K] @ W[K, N]: contract directly, no batch dims, so W is never broadcast.
  if (b.rank() == 2) return dotGeneral(a, b, {{k}, {0}, {}, {}}, loc);
  std::vector<int64_t> batchA(a.shape().dims().begin(), a.shape().dims().end() - 2);
  std::vector<int64_t> batchB(b.shape().dims().begin(), b.shape().dims().end() - 2);
  Shape batch = broadcastShapes(Shape(batchA), Shape(batchB), "matmul");
  auto withBatch = [&](const Array& x) {
    auto dims = batch.dims();
    dims.push_back(x.shape()[x.rank() - 2]);
    dims.push_back(x.shape()[x.rank() - 1]);
    return broadcastTo(x, Shape(dims), loc);
  };
  Array x = withBatch(a), y = withBatch(b);
  Axes bd(static_cast<size_t>(batch.rank()));
  std::iota(bd.begin(), bd.end(), 0);
  return dotGeneral(x, y, {{batch.rank() + 1}, {batch.rank()}, bd, bd}, loc);
}

Array einsum(const std::string& spec, const Array& a, const Array& b, std::source_location loc) {
  auto arrow = spec.find("->");
  auto comma = spec.find(',');
  if (arrow == std::string::npos || comma == std::string::npos || comma > arrow)
    raiseAt(loc, makeError("einsum: spec '{}' must look like 'ij,jk->ik'", spec));
  std::string sa = spec.substr(0, comma), sb = spec.substr(comma + 1, arrow - comma - 1), so = spec.substr(arrow + 2);
  if (static_cast<int>(sa.size()) != a.rank() || static_cast<int>(sb.size()) != b.rank())
    raiseAt(loc, makeError("einsum: '{}' does not match operand ranks {} and {}", spec, a.rank(), b.rank()));
  auto has = [](const std::string& s, char c) { return s.find(c) != std::string::npos; };
  if (std::set<char>(sa.begin(), sa.end()).size() != sa.size() || std::set<char>(sb.begin(), sb.end()).size() != sb.size() ||
      std::set<char>(so.begin(), so.end()).size() != so.size())
    raiseAt(loc, makeError("einsum: repeated subscripts within one operand are not supported in '{}'", spec));
  for (char c : so)
    if (!has(sa, c) && !has(sb, c)) raiseAt(loc, makeError("einsum: output subscript '{}' is in no input", c));
  // Letters in one operand only and not in the output are summed out first.
  Array x = a, y = b;
  auto sumOut = [&](Array& arr, std::string& s, const std::string& other) {
    Axes axes;
    std::string kept;
    for (size_t i = 0; i < s.size(); ++i) {
      if (!has(other, s[i]) && !has(so, s[i])) axes.push_back(static_cast<int64_t>(i));
      else kept += s[i];
    }
    if (!axes.empty()) { arr = sum(arr, axes, false, loc); s = kept; }
  };
  sumOut(x, sa, sb);
  sumOut(y, sb, sa);
  DotDims d;
  std::string batch, freeA, freeB;
  for (size_t i = 0; i < sa.size(); ++i) {
    char c = sa[i];
    if (has(sb, c) && has(so, c)) {
      batch += c;
      d.lhsBatch.push_back(static_cast<int64_t>(i));
      d.rhsBatch.push_back(static_cast<int64_t>(sb.find(c)));
    } else if (has(sb, c)) {
      d.lhsContracting.push_back(static_cast<int64_t>(i));
      d.rhsContracting.push_back(static_cast<int64_t>(sb.find(c)));
    } else {
      freeA += c;
    }
  }
  for (char c : sb)
    if (!has(sa, c)) freeB += c;
  Array r = dotGeneral(x, y, d, loc);
  std::string got = batch + freeA + freeB;
  Axes perm;
  for (char c : so) perm.push_back(static_cast<int64_t>(got.find(c)));
  return transpose(r, perm, loc);
}

Array take(const Array& x, const Array& indices, int64_t axis, std::source_location loc) {
  const int a = axisOf("take", x, axis, loc);
  return bind1(OpCode::Gather, {x, indices}, ir::GatherAttrs{a, 0}, loc);
}

Array takeAlongAxis(const Array& x, const Array& indices, int64_t axis, std::source_location loc) {
  const int a = axisOf("takeAlongAxis", x, axis, loc);
  const int last = x.rank() - 1;
  // The gather picks along x's last dim with the dims before it as batch dims, so `axis` moves last in x, and in
  // indices where they have it too (numpy's form), and back in the result.
  Axes perm;
  for (int i = 0; i < x.rank(); ++i)
    if (i != a) perm.push_back(i);
  perm.push_back(a);
  if (indices.rank() != x.rank()) {
    if (indices.rank() != last)
      raiseAt(loc, makeError("takeAlongAxis: indices {} must have x's rank {} (or one less), got {}",
                             indices.aval().toString(), x.rank(), indices.rank()));
    return bind1(OpCode::Gather, {transpose(x, perm, loc), indices}, ir::GatherAttrs{last, last}, loc);
  }
  // numpy's form: the dims other than axis broadcast against each other.
  std::vector<int64_t> xDims = x.shape().dims(), iDims = indices.shape().dims();
  for (int i = 0; i < x.rank(); ++i) {
    if (i == a || xDims[i] == iDims[i]) continue;
    if (xDims[i] != 1 && iDims[i] != 1)
      raiseAt(loc, makeError("takeAlongAxis: x {} and indices {} do not broadcast in dim {}", x.aval().toString(),
                             indices.aval().toString(), i));
    xDims[i] = iDims[i] = std::max(xDims[i], iDims[i]);
  }
  Array xt = transpose(broadcastTo(x, Shape(xDims), loc), perm, loc);
  Array it = transpose(broadcastTo(indices, Shape(iDims), loc), perm, loc);
  Array r = bind1(OpCode::Gather, {xt, it}, ir::GatherAttrs{last, last}, loc);
  Axes back(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return transpose(r, back, loc);
}

Array scatterAdd(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims,
                 std::source_location loc) {
  const int a = axisOf("scatterAdd", x, axis, loc);
  return bind1(OpCode::ScatterAdd, {x, indices, updates}, ir::GatherAttrs{a, batchDims}, loc);
}

Array scatter(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims,
              std::source_location loc) {
  const int a = axisOf("scatter", x, axis, loc);
  return bind1(OpCode::Scatter, {x, indices, updates}, ir::GatherAttrs{a, batchDims}, loc);
}

Array scatterMul(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims,
                 std::source_location loc) {
  const int a = axisOf("scatterMul", x, axis, loc);
  return bind1(OpCode::ScatterMul, {x, indices, updates}, ir::GatherAttrs{a, batchDims}, loc);
}

Array scatterMin(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims,
                 std::source_location loc) {
  const int a = axisOf("scatterMin", x, axis, loc);
  return bind1(OpCode::ScatterMin, {x, indices, updates}, ir::GatherAttrs{a, batchDims}, loc);
}

Array scatterMax(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims,
                 std::source_location loc) {
  const int a = axisOf("scatterMax", x, axis, loc);
  return bind1(OpCode::ScatterMax, {x, indices, updates}, ir::GatherAttrs{a, batchDims}, loc);
}

Array oneHot(const Array& indices, int64_t depth, DType dtype, std::source_location loc) {
  auto dims = indices.shape().dims();
  dims.push_back(depth);
  Shape s(dims);
  Array classes = iota(s, s.rank() - 1, indices.dtype(), loc);
  Array idx = broadcastInDim(indices, s, [&] {
    Axes d(static_cast<size_t>(indices.rank()));
    std::iota(d.begin(), d.end(), 0);
    return d;
  }(), loc);
  return astype(equal(idx, classes, loc), dtype, loc);
}

// The max that keeps exp in range carries no gradient (stop_gradient, as in jax.nn): the result does not depend
// on it, and differentiating through it would add a reduce_max backward (an equality mask the size of x, and a
// select) whose contributions cancel exactly.
// Under autocast these three read bf16 widened to f32 and give f32, as torch.autocast runs them.
Array softmax(const Array& x0, int64_t axis, std::source_location loc) {
  const Array x = autocastWiden(x0, loc);
  Array m = stopGradient(max(x, {axis}, true, loc), loc);
  Array e = exp(sub(x, m, loc), loc);
  return div(e, sum(e, {axis}, true, loc), loc);
}

Array logSoftmax(const Array& x0, int64_t axis, std::source_location loc) {
  const Array x = autocastWiden(x0, loc);
  Array shifted = sub(x, stopGradient(max(x, {axis}, true, loc), loc), loc);
  return sub(shifted, log(sum(exp(shifted, loc), {axis}, true, loc), loc), loc);
}

// The op takes f32, f64 and bf16 (autocast's activations, read as they are); f16 operands are widened and the
// output narrowed back to q's dtype, as PyTorch's scaled_dot_product_attention keeps its inputs' dtype.
Array dotProductAttention(const Array& q, const Array& k, const Array& v, bool causal, std::source_location loc) {
  const DType t = q.dtype();
  if (t != DType::F16)
    return bind(OpCode::DotProductAttention, {q, k, v}, ir::AttentionAttrs{causal}, loc)[0];
  auto wide = [&](const Array& x) { return astype(x, DType::F32, loc); };
  return astype(bind(OpCode::DotProductAttention, {wide(q), wide(k), wide(v)}, ir::AttentionAttrs{causal}, loc)[0], t,
                loc);
}

Array logsumexp(const Array& x0, Axes axes, bool keepDims, std::source_location loc) {
  const Array x = autocastWiden(x0, loc);
  Array m = stopGradient(max(x, axes, true, loc), loc);
  Array r = add(log(sum(exp(sub(x, m, loc), loc), axes, true, loc), loc), m, loc);
  if (keepDims) return r;
  return squeeze(r, reductionAxes(x, axes, "logsumexp", loc), loc);
}

Array softmaxCrossEntropyWithIntegerLabels(const Array& logits, const Array& labels, std::source_location loc) {
  // bf16 logits go in as they are (the op computes in f32 and gives f32 losses); f16 is widened.
  const Array x = logits.dtype() == DType::F16 ? astype(logits, DType::F32, loc) : logits;
  return bind(OpCode::SoftmaxCrossEntropy, {x, labels}, ir::NoAttrs{}, loc)[0];
}

}  // namespace tsr
