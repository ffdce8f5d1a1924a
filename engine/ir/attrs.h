#pragma once
// Typed op attributes. Each struct lists its fields once in fields(), which the printer, the parser and the
// verifier all walk, so print -> parse -> print is exact for every op by construction. Field types: int64_t,
// bool, Ints, DType, Literal, std::string (quoted) and GraphPtr (a nested region, printed as a function of its
// own).
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "engine/core/shape.h"

namespace tsr::ir {

class Graph;  // graph.h; control-flow attrs hold their bodies as nested graphs

using Ints = std::vector<int64_t>;

// A dense constant: aval + row-major bytes (shared, immutable).
struct Literal {
  Aval aval;
  std::shared_ptr<const std::vector<uint8_t>> data;

  const void* bytes() const { return data ? data->data() : nullptr; }
  bool operator==(const Literal& o) const;
  // Reads element i converted to double (for printing and folding).
  double elementAsDouble(int64_t i) const;
  static Literal scalar(DType dtype, double value);
  static Literal fromBytes(Aval aval, const void* bytes);
};

struct NoAttrs {
  template <class V> void fields(V&) {}
  bool operator==(const NoAttrs&) const = default;
};
// convert / bitcast_convert: the result dtype.
struct ConvertAttrs {
  DType dtype = DType::F32;
  template <class V> void fields(V& v) { v("dtype", dtype); }
  bool operator==(const ConvertAttrs&) const = default;
};
// Operand dim i goes to result dim broadcastDims[i]; other result dims are broadcast.
struct BroadcastInDimAttrs {
  Ints shape;
  Ints broadcastDims;
  template <class V> void fields(V& v) { v("shape", shape); v("broadcast_dims", broadcastDims); }
  bool operator==(const BroadcastInDimAttrs&) const = default;
};
struct ReshapeAttrs {
  Ints shape;
  template <class V> void fields(V& v) { v("shape", shape); }
  bool operator==(const ReshapeAttrs&) const = default;
};
// result.shape[i] = operand.shape[perm[i]]
struct TransposeAttrs {
  Ints perm;
  template <class V> void fields(V& v) { v("perm", perm); }
  bool operator==(const TransposeAttrs&) const = default;
};
struct SliceAttrs {
  Ints starts, limits, strides;
  template <class V> void fields(V& v) { v("starts", starts); v("limits", limits); v("strides", strides); }
  bool operator==(const SliceAttrs&) const = default;
};
// Operands: x, then one scalar integer start index per dim (clamped into range, as in XLA).
struct DynamicSliceAttrs {
  Ints sizes;
  template <class V> void fields(V& v) { v("sizes", sizes); }
  bool operator==(const DynamicSliceAttrs&) const = default;
};
struct ConcatenateAttrs {
  int64_t axis = 0;
  template <class V> void fields(V& v) { v("axis", axis); }
  bool operator==(const ConcatenateAttrs&) const = default;
};
// Operands: x, padding value (scalar). Negative low/high crop.
struct PadAttrs {
  Ints low, high, interior;
  template <class V> void fields(V& v) { v("low", low); v("high", high); v("interior", interior); }
  bool operator==(const PadAttrs&) const = default;
};
struct IotaAttrs {
  Ints shape;
  DType dtype = DType::I32;
  int64_t dimension = 0;
  template <class V> void fields(V& v) { v("shape", shape); v("dtype", dtype); v("dimension", dimension); }
  bool operator==(const IotaAttrs&) const = default;
};
struct RevAttrs {
  Ints dims;
  template <class V> void fields(V& v) { v("dims", dims); }
  bool operator==(const RevAttrs&) const = default;
};
// The reduced axes are removed from the result.
struct ReduceAttrs {
  Ints axes;
  template <class V> void fields(V& v) { v("axes", axes); }
  bool operator==(const ReduceAttrs&) const = default;
};
struct ArgReduceAttrs {
  int64_t axis = 0;
  DType indexDtype = DType::I32;
  template <class V> void fields(V& v) { v("axis", axis); v("index_dtype", indexDtype); }
  bool operator==(const ArgReduceAttrs&) const = default;
};
// integer_pow: x^exponent, the exponent fixed (negative only for floating x).
struct IntegerPowAttrs {
  int64_t exponent = 2;
  template <class V> void fields(V& v) { v("exponent", exponent); }
  bool operator==(const IntegerPowAttrs&) const = default;
};
// cumsum, cumprod, cummax, cumlogsumexp: along `axis` (normalised to [0, rank)), from the end when reverse.
struct CumulativeAttrs {
  int64_t axis = 0;
  bool reverse = false;
  template <class V> void fields(V& v) { v("axis", axis); v("reverse", reverse); }
  bool operator==(const CumulativeAttrs&) const = default;
};
// sort: every operand (of one shape) reordered along `dimension` by the first numKeys operands, compared
// lexicographically (floats: NaN after every number, as numpy); equal keys keep their order when isStable.
struct SortAttrs {
  int64_t dimension = 0;
  bool isStable = true;
  int64_t numKeys = 1;
  template <class V> void fields(V& v) { v("dimension", dimension); v("is_stable", isStable); v("num_keys", numKeys); }
  bool operator==(const SortAttrs&) const = default;
};
// top_k: the k largest elements along the last dim, largest first (NaN counts as the largest; ties: the lower
// index first), and their i32 indices.
struct TopKAttrs {
  int64_t k = 1;
  template <class V> void fields(V& v) { v("k", k); }
  bool operator==(const TopKAttrs&) const = default;
};
// dot_product_attention and its gradient: softmax(q k^T / sqrt(head_dim)) v per batch and head; with `causal`,
// query position t attends to key positions <= t.
struct AttentionAttrs {
  bool causal = false;
  template <class V> void fields(V& v) { v("causal", causal); }
  bool operator==(const AttentionAttrs&) const = default;
};
// batch_norm_training and batch_norm_grad (XLA's BatchNormTraining and BatchNormGrad): statistics per feature
// (dim featureIndex) over every other dim, the variance biased, normalised with 1 / sqrt(var + epsilon).
struct BatchNormAttrs {
  Literal epsilon = Literal::scalar(DType::F64, 1e-5);  // an f64 scalar
  int64_t featureIndex = 0;
  template <class V> void fields(V& v) { v("epsilon", epsilon); v("feature_index", featureIndex); }
  bool operator==(const BatchNormAttrs&) const = default;
};
// triangular_solve (a [..., m, m], b): solves op(a) x = b (left_side) or x op(a) = b, op(a) = a^T when
// transposeA; only the lower (lower) or upper triangle of a is read, its diagonal taken as ones when
// unitDiagonal (jax.lax.linalg.triangular_solve).
struct TriangularSolveAttrs {
  bool leftSide = false;
  bool lower = false;
  bool transposeA = false;
  bool unitDiagonal = false;
  template <class V> void fields(V& v) {
    v("left_side", leftSide);
    v("lower", lower);
    v("transpose_a", transposeA);
    v("unit_diagonal", unitDiagonal);
  }
  bool operator==(const TriangularSolveAttrs&) const = default;
};
// svd and qr (a [..., m, n], k = min(m, n)): fullMatrices gives square u [m, m] and vt [n, n] (svd) or q [m, m]
// and r [m, n] (qr), otherwise u [m, k], vt [k, n], q [m, k], r [k, n]; computeUv false gives svd's singular
// values alone (jax.lax.linalg.svd / qr).
struct DecompositionAttrs {
  bool fullMatrices = false;
  bool computeUv = true;
  template <class V> void fields(V& v) {
    v("full_matrices", fullMatrices);
    v("compute_uv", computeUv);
  }
  bool operator==(const DecompositionAttrs&) const = default;
};
// Result dims: batch dims, then lhs free dims, then rhs free dims (XLA order).
struct DotGeneralAttrs {
  Ints lhsContracting, rhsContracting, lhsBatch, rhsBatch;
  template <class V> void fields(V& v) {
    v("lhs_contracting", lhsContracting);
    v("rhs_contracting", rhsContracting);
    v("lhs_batch", lhsBatch);
    v("rhs_batch", rhsBatch);
  }
  bool operator==(const DotGeneralAttrs&) const = default;
};
// gather(x, idx): like tf.gather(x, idx, axis, batch_dims). The first batchDims dims of x and idx match;
// result = x.shape[:axis] + idx.shape[batchDims:] + x.shape[axis+1:]. Out-of-range indices are clamped.
// scatter_add(x, idx, updates): the transpose: adds updates into x at the gathered positions
// (out-of-range updates are dropped). scatter, scatter_mul, scatter_min and scatter_max take the same attrs and
// write, multiply, take the minimum or the maximum instead (a repeated index: scatter keeps the last update).
struct GatherAttrs {
  int64_t axis = 0;
  int64_t batchDims = 0;
  template <class V> void fields(V& v) { v("axis", axis); v("batch_dims", batchDims); }
  bool operator==(const GatherAttrs&) const = default;
};
struct ConstantAttrs {
  Literal value;
  template <class V> void fields(V& v) { v("value", value); }
  bool operator==(const ConstantAttrs&) const = default;
};

// A nested graph (a region): closed, its values numbered within it; it sees no value of the enclosing graph.
// Equality compares structure (ops, attrs, avals, wiring, provenance), not value ids or pointers.
using GraphPtr = std::shared_ptr<const Graph>;
bool sameGraph(const GraphPtr& a, const GraphPtr& b);

// scan: operands consts..., carries..., xs... (each x: [length, ...]); results: final carries..., ys...
// (each y: [length, ...]). The body maps (consts..., carries..., x slices...) -> (new carries..., y slices...)
// and runs `length` times, over steps length-1 .. 0 when reverse; ys[t] always holds step t's output.
struct ScanAttrs {
  int64_t length = 0;
  int64_t numConsts = 0;
  int64_t numCarry = 0;
  bool reverse = false;
  GraphPtr body;
  template <class V> void fields(V& v) {
    v("length", length);
    v("num_consts", numConsts);
    v("num_carry", numCarry);
    v("reverse", reverse);
    v("body", body);
  }
  bool operator==(const ScanAttrs& o) const;
};
// cond: operands pred (a scalar bool or integer; nonzero is true), then the branch operands. Both branches take
// the branch operands and return the same avals, which are the results.
struct CondAttrs {
  GraphPtr trueBranch;
  GraphPtr falseBranch;
  template <class V> void fields(V& v) { v("true_branch", trueBranch); v("false_branch", falseBranch); }
  bool operator==(const CondAttrs& o) const;
};
// while_loop: operands consts..., carries...; results: the final carries. cond maps (consts..., carries...) to a
// scalar bool, body maps them to new carries of the carries' avals; body runs while cond holds, possibly never
// (jax.lax.while_loop). Each graph takes every const and ignores those the other closed over.
struct WhileAttrs {
  int64_t numConsts = 0;
  GraphPtr cond;
  GraphPtr body;
  template <class V> void fields(V& v) { v("num_consts", numConsts); v("cond", cond); v("body", body); }
  bool operator==(const WhileAttrs& o) const;
};
// custom_vjp_call: a function with a gradient of the user's (jax.custom_vjp). Operands: the primals (the first
// numPrimals), then the values the three graphs closed over; results: primal's outputs. primal: (operands...) ->
// outputs; fwd: (operands...) -> (outputs..., residuals...); bwd: (operands..., residuals..., one cotangent per
// output...) -> one cotangent per primal. Run, it is primal (inlined before compiling); differentiated, fwd and
// bwd replace autodiff of primal.
struct CustomVjpAttrs {
  int64_t numPrimals = 0;
  GraphPtr primal;
  GraphPtr fwd;
  GraphPtr bwd;
  template <class V> void fields(V& v) { v("num_primals", numPrimals); v("primal", primal); v("fwd", fwd); v("bwd", bwd); }
  bool operator==(const CustomVjpAttrs& o) const;
};

// remat_call (jax.checkpoint): a function whose intermediates the backward pass recomputes instead of keeping.
// Operands: the function's arguments, then the values it closed over (the last numConsts); results: the body's
// outputs, of which the last numSaved are values the policy keeps ("dots_saveable": the dot_general results),
// which the recomputation reads instead of computing again. Run, it is the body (inlined before compiling);
// differentiated, its vjp rule replays the body behind an optimization_barrier and differentiates that.
struct RematAttrs {
  int64_t numConsts = 0;
  int64_t numSaved = 0;
  std::string policy;  // "nothing_saveable" or "dots_saveable" (what saved the last numSaved results)
  GraphPtr body;
  template <class V> void fields(V& v) {
    v("num_consts", numConsts);
    v("num_saved", numSaved);
    v("policy", policy);
    v("body", body);
  }
  bool operator==(const RematAttrs& o) const;
};

// Collectives (engine/ops/collective.cpp): per-device ops of an SPMD program, run by every device of the mesh.
// Positions are flat mesh indices (dist::DeviceContext::position). `groups` lists the groups one after another,
// groupSize positions each, every group in chunk order (member i owns chunk i); a position is in at most one
// group, and a device in none fails at run time. The sum is taken in group order: ((x0 + x1) + x2) + ...
// (bf16/f16 in f32, rounded once), so every member gets bit-identical values.
//
// all_reduce: the sum over my group; same aval.
struct AllReduceAttrs {
  Ints groups;
  int64_t groupSize = 1;
  template <class V> void fields(V& v) { v("groups", groups); v("group_size", groupSize); }
  bool operator==(const AllReduceAttrs&) const = default;
};
// all_gather: the members' operands concatenated along `dim` in group order (dim grows groupSize times).
// reduce_scatter: the operand's `dim` splits into groupSize chunks; the result is the sum over members of their
// chunk at my index in the group (dim shrinks groupSize times).
struct AllGatherAttrs {
  Ints groups;
  int64_t groupSize = 1;
  int64_t dim = 0;
  template <class V> void fields(V& v) { v("groups", groups); v("group_size", groupSize); v("dim", dim); }
  bool operator==(const AllGatherAttrs&) const = default;
};
// all_to_all: the operand splits along splitDim into groupSize chunks, chunk j goes to member j; the chunks
// received are concatenated along concatDim in member order (splitDim shrinks, concatDim grows groupSize times).
struct AllToAllAttrs {
  Ints groups;
  int64_t groupSize = 1;
  int64_t splitDim = 0;
  int64_t concatDim = 0;
  template <class V> void fields(V& v) {
    v("groups", groups);
    v("group_size", groupSize);
    v("split_dim", splitDim);
    v("concat_dim", concatDim);
  }
  bool operator==(const AllToAllAttrs&) const = default;
};
// collective_permute: pairs (source, target), flattened; each position is a source at most once and a target at
// most once. The result is my source's operand, or zeros when no pair targets me; same aval.
struct CollectivePermuteAttrs {
  Ints pairs;
  template <class V> void fields(V& v) { v("pairs", pairs); }
  bool operator==(const CollectivePermuteAttrs&) const = default;
};
// device_table: no operands; a scalar of `dtype` holding table[my position] (a shard's offset, for example).
struct DeviceTableAttrs {
  Ints table;
  DType dtype = DType::I32;
  template <class V> void fields(V& v) { v("table", table); v("dtype", dtype); }
  bool operator==(const DeviceTableAttrs&) const = default;
};

// sharding_constraint: the identity, with the sharding its result must have (withShardingConstraint): the mesh
// (shape, axis names joined by ',', devices in mesh order) and a PartitionSpec in its text form ("(a,b),None").
struct ShardingConstraintAttrs {
  Ints meshShape;
  std::string meshAxes;
  Ints devices;
  std::string spec;
  template <class V> void fields(V& v) {
    v("mesh_shape", meshShape);
    v("mesh_axes", meshAxes);
    v("devices", devices);
    v("spec", spec);
  }
  bool operator==(const ShardingConstraintAttrs&) const = default;
};

// conv_general_dilated (XLA's ConvGeneralDilated): operands lhs, rhs. The specs name each operand's dims by
// role, as XLA's ConvDimensionNumbers: lhs_spec = [batch, feature, spatial...], rhs_spec = [out feature,
// in feature, spatial...], out_spec = [batch, feature, spatial...]; "NCHW"/"OIHW" is [0, 1, 2, 3].
// Per spatial dim: window_strides, padding_lo/padding_hi (of the lhs dilated by lhs_dilation; negative crops),
// lhs_dilation and rhs_dilation. feature_group_count splits lhs features and out features into groups;
// batch_group_count splits the lhs batch and the out features (at most one of the two is above 1).
struct ConvAttrs {
  Ints windowStrides, paddingLo, paddingHi, lhsDilation, rhsDilation;
  int64_t featureGroupCount = 1;
  int64_t batchGroupCount = 1;
  Ints lhsSpec, rhsSpec, outSpec;
  template <class V> void fields(V& v) {
    v("window_strides", windowStrides);
    v("padding_lo", paddingLo);
    v("padding_hi", paddingHi);
    v("lhs_dilation", lhsDilation);
    v("rhs_dilation", rhsDilation);
    v("feature_group_count", featureGroupCount);
    v("batch_group_count", batchGroupCount);
    v("lhs_spec", lhsSpec);
    v("rhs_spec", rhsSpec);
    v("out_spec", outSpec);
  }
  bool operator==(const ConvAttrs&) const = default;
};

// reduce_window_sum / _max / _min (lax.reduce_window with the monoid fixed, as JAX's reduce_window_*_p) and
// select_and_scatter_add: one window per result element, placed over the operand. One entry per operand dim:
// window_dimensions (>= 1), window_strides (>= 1), padding_lo / padding_hi (>= 0; padded elements hold the
// monoid's identity and are never selected), window_dilation (>= 1). Dims with window 1, stride 1 and no
// padding are batch-like: they pass through (vmap and sharding rely on it).
struct WindowAttrs {
  Ints windowDimensions, windowStrides, paddingLo, paddingHi, windowDilation;
  template <class V> void fields(V& v) {
    v("window_dimensions", windowDimensions);
    v("window_strides", windowStrides);
    v("padding_lo", paddingLo);
    v("padding_hi", paddingHi);
    v("window_dilation", windowDilation);
  }
  bool operator==(const WindowAttrs&) const = default;
};

// host_callback: calls a function of the host program (host_callback.h) with the operands; the results are its.
// `callback` is the function's id in this process, which the text form prints; `fn` holds the function while a
// graph does (a parsed graph finds it by id, while it lives).
struct HostCallback;
using HostCallbackPtr = std::shared_ptr<const HostCallback>;
struct HostCallbackAttrs {
  int64_t callback = 0;
  HostCallbackPtr fn;
  template <class V> void fields(V& v) { v("callback", callback); }
  bool operator==(const HostCallbackAttrs& o) const { return callback == o.callback; }
};

using Attrs = std::variant<NoAttrs, ConvertAttrs, BroadcastInDimAttrs, ReshapeAttrs, TransposeAttrs, SliceAttrs,
                           DynamicSliceAttrs, ConcatenateAttrs, PadAttrs, IotaAttrs, RevAttrs, ReduceAttrs,
                           ArgReduceAttrs, DotGeneralAttrs, GatherAttrs, ConstantAttrs, ScanAttrs, CondAttrs,
                           WhileAttrs, CustomVjpAttrs, RematAttrs,
                           AllReduceAttrs, AllGatherAttrs, AllToAllAttrs, CollectivePermuteAttrs, DeviceTableAttrs,
                           ShardingConstraintAttrs, IntegerPowAttrs, CumulativeAttrs, SortAttrs, TopKAttrs,
                           ConvAttrs, WindowAttrs, AttentionAttrs, BatchNormAttrs, TriangularSolveAttrs,
                           DecompositionAttrs, HostCallbackAttrs>;

// Name of the struct held by attrs ("DotGeneralAttrs"), for messages.
const char* attrsTypeName(const Attrs& attrs);
const char* attrsTypeNameAt(size_t index);

}  // namespace tsr::ir
