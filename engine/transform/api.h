#pragma once
// The numpy-like Array API. Every function works eagerly on concrete arrays and records IR on tracers.
// Binary functions broadcast numpy-style and promote dtypes (C++ scalars are weakly typed: x * 2.0 keeps
// x's dtype). Each call records the caller's source location as provenance; errors raise tsr::Exception with
// the op, the shapes and the call site.
#include <optional>
#include <string>
#include <utility>
#include <source_location>
#include <vector>

#include "engine/transform/array.h"

namespace tsr {

#define TSR_LOC std::source_location loc = std::source_location::current()
using Axes = std::vector<int64_t>;

// An Array operand that remembers where the expression using it was written (for operators, which cannot
// take a defaulted source_location themselves).
struct Located {
  Located(const Array& a, TSR_LOC) : array(a), where(loc) {}
  const Array& array;
  std::source_location where;
};

DType promoteTypes(DType a, DType b);
Shape broadcastShapes(const Shape& a, const Shape& b, const char* op = "broadcast");

// Elementwise unary
Array neg(const Array& x, TSR_LOC);
Array abs(const Array& x, TSR_LOC);
Array sign(const Array& x, TSR_LOC);
Array exp(const Array& x, TSR_LOC);
Array exp2(const Array& x, TSR_LOC);
Array log(const Array& x, TSR_LOC);
Array log1p(const Array& x, TSR_LOC);
Array expm1(const Array& x, TSR_LOC);
Array sqrt(const Array& x, TSR_LOC);
Array rsqrt(const Array& x, TSR_LOC);
Array tanh(const Array& x, TSR_LOC);
Array sigmoid(const Array& x, TSR_LOC);
Array sin(const Array& x, TSR_LOC);
Array cos(const Array& x, TSR_LOC);
Array tan(const Array& x, TSR_LOC);
Array erf(const Array& x, TSR_LOC);
Array erfInv(const Array& x, TSR_LOC);
Array floor(const Array& x, TSR_LOC);
Array ceil(const Array& x, TSR_LOC);
Array round(const Array& x, TSR_LOC);
Array isFinite(const Array& x, TSR_LOC);
Array logicalNot(const Array& x, TSR_LOC);
Array relu(const Array& x, TSR_LOC);
Array square(const Array& x, TSR_LOC);
Array integerPow(const Array& x, int64_t exponent, TSR_LOC);  // x^exponent; negative only for floats
Array lgamma(const Array& x, TSR_LOC);
Array digamma(const Array& x, TSR_LOC);
// The identity, whose gradient is zero (lax.stop_gradient).
Array stopGradient(const Array& x, TSR_LOC);
Array gelu(const Array& x, bool approximate = true, TSR_LOC);  // tanh approximation as in GPT-2

// Elementwise binary (broadcasting, promotion)
Array add(const Array& a, const Array& b, TSR_LOC);
Array sub(const Array& a, const Array& b, TSR_LOC);
Array mul(const Array& a, const Array& b, TSR_LOC);
Array div(const Array& a, const Array& b, TSR_LOC);
Array rem(const Array& a, const Array& b, TSR_LOC);
Array pow(const Array& a, const Array& b, TSR_LOC);
Array maximum(const Array& a, const Array& b, TSR_LOC);
Array minimum(const Array& a, const Array& b, TSR_LOC);
Array atan2(const Array& a, const Array& b, TSR_LOC);
Array bitwiseAnd(const Array& a, const Array& b, TSR_LOC);
Array bitwiseOr(const Array& a, const Array& b, TSR_LOC);
Array bitwiseXor(const Array& a, const Array& b, TSR_LOC);
Array shiftLeft(const Array& a, const Array& b, TSR_LOC);
Array shiftRightLogical(const Array& a, const Array& b, TSR_LOC);
Array shiftRightArithmetic(const Array& a, const Array& b, TSR_LOC);
Array equal(const Array& a, const Array& b, TSR_LOC);
Array notEqual(const Array& a, const Array& b, TSR_LOC);
Array less(const Array& a, const Array& b, TSR_LOC);
Array lessEqual(const Array& a, const Array& b, TSR_LOC);
Array greater(const Array& a, const Array& b, TSR_LOC);
Array greaterEqual(const Array& a, const Array& b, TSR_LOC);
Array where(const Array& cond, const Array& a, const Array& b, TSR_LOC);
Array clamp(const Array& x, const Array& lo, const Array& hi, TSR_LOC);

// A scalar of x's dtype (a weakly typed constant).
Array scalarLike(const Array& x, double value, TSR_LOC);
// x's aval filled with a value, built from a scalar constant and a broadcast so that traces stay small.
Array fullLike(const Array& x, double value, TSR_LOC);
Array zerosLike(const Array& x, TSR_LOC);
Array onesLike(const Array& x, TSR_LOC);

// Conversion
Array astype(const Array& x, DType dtype, TSR_LOC);
Array bitcast(const Array& x, DType dtype, TSR_LOC);

// Host callbacks (engine/ir/host_callback.h): calls the function with the operands, now when they are concrete,
// or when the traced program runs; returns its results.
std::vector<Array> hostCallback(const ir::HostCallbackPtr& callback, const std::vector<Array>& operands, TSR_LOC);

// Layout
Array broadcastTo(const Array& x, const Shape& shape, TSR_LOC);
Array broadcastInDim(const Array& x, const Shape& shape, const Axes& broadcastDims, TSR_LOC);
Array reshape(const Array& x, std::vector<int64_t> shape, TSR_LOC);  // one dim may be -1
Array transpose(const Array& x, Axes perm = {}, TSR_LOC);             // default: reverse the dims
Array swapAxes(const Array& x, int64_t a, int64_t b, TSR_LOC);
Array expandDims(const Array& x, int64_t axis, TSR_LOC);
Array squeeze(const Array& x, Axes axes = {}, TSR_LOC);               // default: all size-1 dims
Array slice(const Array& x, Axes starts, Axes limits, Axes strides = {}, TSR_LOC);
Array sliceAxis(const Array& x, int64_t axis, int64_t start, int64_t limit, TSR_LOC);
Array dynamicSlice(const Array& x, const std::vector<Array>& starts, Axes sizes, TSR_LOC);
Array dynamicUpdateSlice(const Array& x, const Array& update, const std::vector<Array>& starts, TSR_LOC);
Array concatenate(const std::vector<Array>& xs, int64_t axis, TSR_LOC);
Array stack(const std::vector<Array>& xs, int64_t axis = 0, TSR_LOC);
Array pad(const Array& x, Axes low, Axes high, double value = 0.0, Axes interior = {}, TSR_LOC);
Array iota(const Shape& shape, int64_t dimension, DType dtype = DType::I32, TSR_LOC);
Array arange(int64_t n, DType dtype = DType::I32, TSR_LOC);
Array flip(const Array& x, Axes axes, TSR_LOC);

// Reductions (axes may be negative; empty axes = all)
Array sum(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array mean(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array max(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array min(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array prod(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array argmax(const Array& x, int64_t axis, DType indexDtype = DType::I32, TSR_LOC);
// Logical and / or over bool x (numpy all / any).
Array all(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
Array any(const Array& x, Axes axes = {}, bool keepDims = false, TSR_LOC);
// Cumulative reductions along one axis (may be negative), from the end when reverse (lax.cumsum & co.).
Array cumsum(const Array& x, int64_t axis = 0, bool reverse = false, TSR_LOC);
Array cumprod(const Array& x, int64_t axis = 0, bool reverse = false, TSR_LOC);
Array cummax(const Array& x, int64_t axis = 0, bool reverse = false, TSR_LOC);
Array cumlogsumexp(const Array& x, int64_t axis = 0, bool reverse = false, TSR_LOC);
// Sorting (lax.sort, jnp.sort, jnp.argsort, lax.top_k). NaN sorts after every number, as in numpy.
// sort: operands of one shape reordered along `dimension` (may be negative) by the first numKeys of them.
std::vector<Array> sort(const std::vector<Array>& operands, int64_t dimension = -1, bool isStable = true,
                        int64_t numKeys = 1, TSR_LOC);
Array sort(const Array& x, int64_t axis = -1, TSR_LOC);
Array argsort(const Array& x, int64_t axis = -1, DType indexDtype = DType::I32, TSR_LOC);  // stable
// The k largest along the last axis, largest first, and their i32 indices.
std::pair<Array, Array> topK(const Array& x, int64_t k, TSR_LOC);
Array argmin(const Array& x, int64_t axis, DType indexDtype = DType::I32, TSR_LOC);

// Contractions
struct DotDims {
  Axes lhsContracting, rhsContracting, lhsBatch, rhsBatch;
};
Array dotGeneral(const Array& a, const Array& b, const DotDims& dims, TSR_LOC);
// numpy matmul: 1-D operands are promoted, leading dims broadcast.
Array matmul(const Array& a, const Array& b, TSR_LOC);
// einsum over single-letter subscripts, e.g. "bhtd,bhsd->bhts"; no ellipsis, no repeated output letters.
Array einsum(const std::string& spec, const Array& a, const Array& b, TSR_LOC);

// Convolutions (lax.conv_general_dilated). Dimension numbers as JAX's strings: lhs and out name N, C and one
// letter per spatial dim, rhs O, I and the same spatial letters ("NCHW", "OIHW", "NCHW"; "NHWC", "HWIO",
// "NHWC"); spatial dims pair up by letter, in the rhs string's order. Empty strings: NC..., OI..., NC....
struct ConvDimensionNumbers {
  std::string lhs, rhs, out;
};
// Padding: "SAME" (output size ceil(in / stride), the extra on the high side), "VALID" (none), or explicit
// (low, high) pairs per spatial dim in `pairs` (negative crops).
struct ConvPadding {
  std::string mode;  // "SAME", "VALID", or empty for `pairs`
  std::vector<std::pair<int64_t, int64_t>> pairs;
  ConvPadding(const char* m) : mode(m) {}
  ConvPadding(std::string m) : mode(std::move(m)) {}
  ConvPadding(std::vector<std::pair<int64_t, int64_t>> p) : pairs(std::move(p)) {}
};
// Empty strides and dilations: 1 for every spatial dim.
Array convGeneralDilated(const Array& lhs, const Array& rhs, Axes windowStrides, const ConvPadding& padding,
                         Axes lhsDilation = {}, Axes rhsDilation = {}, const ConvDimensionNumbers& dims = {},
                         int64_t featureGroupCount = 1, int64_t batchGroupCount = 1, TSR_LOC);
// lax.conv: NC... lhs, OI... rhs, NC... out.
Array conv(const Array& lhs, const Array& rhs, Axes windowStrides, const ConvPadding& padding, TSR_LOC);

// Windowed reductions (lax.reduce_window with lax.add, lax.max or lax.min and the monoid's identity as the init
// value: 0, -inf, +inf). One entry per dim of x in windowDimensions, windowStrides and windowDilation (empty: all
// 1); padding as convolutions' (padded positions hold the identity). Dims with window 1 and stride 1 are batch.
enum class WindowReduction { Sum, Max, Min };
Array reduceWindow(const Array& x, WindowReduction computation, Axes windowDimensions, Axes windowStrides,
                   const ConvPadding& padding, Axes windowDilation = {}, TSR_LOC);
// Max pooling's gradient (XLA's SelectAndScatter with `ge` and add): zeros of operand's shape, each window's
// source value added at the window's first maximum (NaN above every number). source: one element per window.
Array selectAndScatterAdd(const Array& source, const Array& operand, Axes windowDimensions, Axes windowStrides,
                          const ConvPadding& padding, Axes windowDilation = {}, TSR_LOC);
// Pooling as flax.linen's max_pool and avg_pool: x is [batch..., spatial..., features] (channels last), the
// window and strides (empty: 1) over the spatial dims, the len(windowShape) dims before the last.
Array maxPool(const Array& x, Axes windowShape, Axes strides = {}, const ConvPadding& padding = "VALID", TSR_LOC);
// The window sum over a count: with countIncludePad, every window counts its full size (padding as zeros, Flax's
// and PyTorch's default); without, only its positions inside x (so a border window averages what it covers).
Array avgPool(const Array& x, Axes windowShape, Axes strides = {}, const ConvPadding& padding = "VALID",
              bool countIncludePad = true, TSR_LOC);

// Indexing
Array take(const Array& x, const Array& indices, int64_t axis = 0, TSR_LOC);
Array takeAlongAxis(const Array& x, const Array& indices, int64_t axis, TSR_LOC);  // numpy's; or indices rank-1
Array scatterAdd(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims = 0,
                 TSR_LOC);
// lax.scatter and its combining variants on scatterAdd's layout: updates land on x at their indices along axis;
// scatter writes them (where an index repeats, the last update in index order stays), scatterMul multiplies,
// scatterMin and scatterMax keep the smaller or larger. Out-of-range indices are dropped.
Array scatter(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims = 0,
              TSR_LOC);
Array scatterMul(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims = 0,
                 TSR_LOC);
Array scatterMin(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims = 0,
                 TSR_LOC);
Array scatterMax(const Array& x, const Array& indices, const Array& updates, int64_t axis, int64_t batchDims = 0,
                 TSR_LOC);
Array oneHot(const Array& indices, int64_t depth, DType dtype = DType::F32, TSR_LOC);

// Compositions
Array softmax(const Array& x, int64_t axis = -1, TSR_LOC);
Array logSoftmax(const Array& x, int64_t axis = -1, TSR_LOC);
Array logsumexp(const Array& x, Axes axes = {-1}, bool keepDims = false, TSR_LOC);
// Each row's softmax cross-entropy against an integer label, as optax.softmax_cross_entropy_with_integer_labels:
// logits [..., V] and labels [...] -> [...], lse - logits[label] (NaN for a label outside [0, V)). One
// softmax_cross_entropy op (engine/ops/cross_entropy.cpp) that reads the logits once, and once for its gradient;
// bf16 logits are taken as f32.
Array softmaxCrossEntropyWithIntegerLabels(const Array& logits, const Array& labels, TSR_LOC);
// softmax(q k^T / sqrt(D)) v in one op (dot_product_attention, engine/ops/attention.cpp), as
// jax.nn.dot_product_attention: q [B, T, H, D], k and v [B, S, H, D] -> [B, T, H, D]; with `causal`, query t
// attends to keys <= t. A backend may run it without materialising the [T, S] scores.
Array dotProductAttention(const Array& q, const Array& k, const Array& v, bool causal = false, TSR_LOC);

// Linear algebra (engine/ops/linalg.cpp; jax.lax.linalg), f32 and f64, over the last two dims, batched over the
// leading ones. cholesky: the lower factor L of a [..., n, n] (L L^T = a; with symmetrizeInput, of (a + a^T) / 2,
// as JAX; NaNs where a is not positive definite). triangularSolve: x with op(a) x = b (leftSide) or x op(a) = b.
// lu: {lu (L below the unit diagonal, U on and above), i32 pivots [..., k], i32 permutation [..., m]} with
// a[perm] = L U, of a [..., m, n]. eigh: {v, w} with a = v diag(w) v^T, eigenvalues w ascending, of the lower
// triangle (with symmetrizeInput, of (a + a^T) / 2, as JAX). svd: {u, s, vt} (s alone without computeUv) with
// a = u diag(s) vt, s descending; qr: {q, r} with a = q r, q's columns orthonormal, r upper triangular. Of
// a [..., m, n], k = min(m, n): fullMatrices gives u [m, m], vt [n, n], q [m, m], r [m, n], otherwise
// u [m, k], vt [k, n], q [m, k], r [k, n].
Array cholesky(const Array& a, bool symmetrizeInput = true, TSR_LOC);
Array triangularSolve(const Array& a, const Array& b, bool leftSide = false, bool lower = false,
                      bool transposeA = false, bool unitDiagonal = false, TSR_LOC);
std::vector<Array> lu(const Array& a, TSR_LOC);
std::vector<Array> eigh(const Array& a, bool symmetrizeInput = true, TSR_LOC);
std::vector<Array> svd(const Array& a, bool fullMatrices = false, bool computeUv = true, TSR_LOC);
std::vector<Array> qr(const Array& a, bool fullMatrices = false, TSR_LOC);

// Random bits: the Threefry-2x32 block function on u32 arrays (keys broadcast against counters).
std::pair<Array, Array> threefry2x32(const Array& k0, const Array& k1, const Array& x0, const Array& x1, TSR_LOC);

// Operators (numpy semantics; comparisons give bool arrays)
Array operator-(Located x);
Array operator+(Located a, const Array& b);
Array operator-(Located a, const Array& b);
Array operator*(Located a, const Array& b);
Array operator/(Located a, const Array& b);
Array operator%(Located a, const Array& b);
Array operator+(Located a, double b);
Array operator-(Located a, double b);
Array operator*(Located a, double b);
Array operator/(Located a, double b);
Array operator+(double a, Located b);
Array operator-(double a, Located b);
Array operator*(double a, Located b);
Array operator/(double a, Located b);
Array operator<(Located a, const Array& b);
Array operator<=(Located a, const Array& b);
Array operator>(Located a, const Array& b);
Array operator>=(Located a, const Array& b);
Array operator==(Located a, const Array& b);
Array operator!=(Located a, const Array& b);
Array operator<(Located a, double b);
Array operator>(Located a, double b);

}  // namespace tsr
