// conv_general_dilated: XLA's general convolution (lax.conv_general_dilated).
//
// The CPU kernel runs f32 (and bf16/f16, widened to f32 and rounded once) through oneDNN on the operands as they
// lie: the forward convolution and the two gradients the vjp below produces map to oneDNN's forward, backward-data
// and backward-weights primitives (conv_onednn.h). What oneDNN cannot take (batch groups, negative padding, a
// strided transposed convolution) and f64 put the operands in the canonical layouts lhs [N, C, spatial...], rhs
// [O, I, spatial...] (a copy unless the specs already say so), compute out [N / batch_groups, O, spatial...] as
// im2col + a BLAS GEMM per (example, group), and permute it to out_spec.
//
// vjp and batching follow JAX (jax/_src/lax/convolution.py): both cotangents are themselves convolutions, and
// vmap folds a batched operand's batch dim into N or into the feature groups.
#include <cblas.h>
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "engine/ops/conv_geometry.h"
#include "engine/ops/conv_onednn.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/runtime/blas_workspace.h"
#include "engine/transform/trace.h"

namespace tsr::ops {
namespace {

using ir::ConvAttrs;
constexpr const char* kConv = "conv_general_dilated";

// ---- shape rule ----

bool isPermutation(const ir::Ints& spec, int rank) {
  if (static_cast<int>(spec.size()) != rank) return false;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : spec) {
    if (d < 0 || d >= rank || seen[static_cast<size_t>(d)]) return false;
    seen[static_cast<size_t>(d)] = true;
  }
  return true;
}

Status checkAttrs(std::span<const Aval> ops, const ConvAttrs& at, int rank) {
  const auto nsp = static_cast<size_t>(rank - 2);
  auto spec = [&](const char* name, const ir::Ints& s) -> Status {
    if (!isPermutation(s, rank))
      return opError(kConv, ops, fmt::format("{} [{}] must be a permutation of the {} dims", name, joinInts(s), rank));
    return {};
  };
  TSR_TRY(spec("lhs_spec", at.lhsSpec));
  TSR_TRY(spec("rhs_spec", at.rhsSpec));
  TSR_TRY(spec("out_spec", at.outSpec));
  auto perDim = [&](const char* name, const ir::Ints& v, int64_t least) -> Status {
    if (v.size() != nsp)
      return opError(kConv, ops, fmt::format("{} [{}] must have one entry per spatial dim ({})", name, joinInts(v), nsp));
    for (int64_t x : v)
      if (x < least) return opError(kConv, ops, fmt::format("{} [{}] must be at least {}", name, joinInts(v), least));
    return {};
  };
  TSR_TRY(perDim("window_strides", at.windowStrides, 1));
  TSR_TRY(perDim("lhs_dilation", at.lhsDilation, 1));
  TSR_TRY(perDim("rhs_dilation", at.rhsDilation, 1));
  TSR_TRY(perDim("padding_lo", at.paddingLo, INT64_MIN));
  TSR_TRY(perDim("padding_hi", at.paddingHi, INT64_MIN));
  if (at.featureGroupCount < 1 || at.batchGroupCount < 1)
    return opError(kConv, ops, fmt::format("feature_group_count {} and batch_group_count {} must be at least 1",
                                           at.featureGroupCount, at.batchGroupCount));
  if (at.featureGroupCount > 1 && at.batchGroupCount > 1)
    return opError(kConv, ops, fmt::format("feature_group_count {} and batch_group_count {}: at most one may be above 1",
                                           at.featureGroupCount, at.batchGroupCount));
  return {};
}

Result<std::vector<Aval>> inferConv(std::span<const Aval> ops, const ir::Attrs& attrs) {
  TSR_TRY(checkArity(kConv, ops, 2));
  const auto& at = attrsAs<ConvAttrs>(attrs);
  const Aval& lhs = ops[0];
  const Aval& rhs = ops[1];
  if (lhs.dtype != rhs.dtype) return opError(kConv, ops, "operands must have equal dtypes");
  if (!isFloating(lhs.dtype)) return opError(kConv, ops, "operands must be floating point (f32, f64, bf16, f16)");
  if (lhs.rank() != rhs.rank()) return opError(kConv, ops, "lhs and rhs must have the same rank");
  if (lhs.rank() < 3 || lhs.rank() > 5)
    return opError(kConv, ops, fmt::format("rank {}: 1 to 3 spatial dims are supported (rank 3 to 5)", lhs.rank()));
  TSR_TRY(checkAttrs(ops, at, lhs.rank()));
  ConvGeometry g = convGeometry(lhs.shape, rhs.shape, at);
  if (g.c != g.i * at.featureGroupCount)
    return opError(kConv, ops,
                   fmt::format("lhs features ({}) must be rhs in-features ({}) x feature_group_count ({})", g.c, g.i,
                               at.featureGroupCount));
  if (g.o % at.featureGroupCount != 0)
    return opError(kConv, ops, fmt::format("rhs out-features ({}) must be a multiple of feature_group_count ({})", g.o,
                                           at.featureGroupCount));
  if (g.o % at.batchGroupCount != 0)
    return opError(kConv, ops, fmt::format("rhs out-features ({}) must be a multiple of batch_group_count ({})", g.o,
                                           at.batchGroupCount));
  if (g.n % at.batchGroupCount != 0)
    return opError(kConv, ops, fmt::format("lhs batch ({}) must be a multiple of batch_group_count ({})", g.n,
                                           at.batchGroupCount));
  for (size_t d = 0; d < g.k.size(); ++d)
    if (g.k[d] < 1) return opError(kConv, ops, fmt::format("rhs spatial dim {} has size 0 (an empty window)", d));
  std::vector<int64_t> dims(static_cast<size_t>(lhs.rank()));
  dims[static_cast<size_t>(at.outSpec[0])] = g.n / at.batchGroupCount;
  dims[static_cast<size_t>(at.outSpec[1])] = g.o;
  for (size_t d = 0; d < g.out.size(); ++d) dims[static_cast<size_t>(at.outSpec[d + 2])] = g.out[d];
  return std::vector<Aval>{Aval{Shape(std::move(dims)), lhs.dtype}};
}

ir::Cost costConv(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs& attrs) {
  ConvGeometry g = convGeometry(in[0].shape, in[1].shape, attrsAs<ConvAttrs>(attrs));
  // One multiply-add per (output element, input feature of its group, window position).
  ir::Cost c = movementCost(in, out);
  c.flops = 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(g.i) * static_cast<double>(g.kSize());
  return c;
}

// ---- layouts ----

// dst = src (row-major `shape`) with its dims reordered: dst dim j is src dim order[j].
template <class T>
void permuteCopy(const T* src, const Shape& shape, const ir::Ints& order, T* dst) {
  const int r = shape.rank();
  auto srcStrides = shape.strides();
  std::vector<int64_t> size(static_cast<size_t>(r)), stride(static_cast<size_t>(r)), idx(static_cast<size_t>(r), 0);
  int64_t total = 1;
  for (int i = 0; i < r; ++i) {
    size[static_cast<size_t>(i)] = shape[static_cast<int>(order[static_cast<size_t>(i)])];
    stride[static_cast<size_t>(i)] = srcStrides[static_cast<size_t>(order[static_cast<size_t>(i)])];
    total *= size[static_cast<size_t>(i)];
  }
  int64_t off = 0;
  for (int64_t done = 0; done < total; ++done) {
    *dst++ = src[off];
    for (int d = r - 1; d >= 0; --d) {
      const auto u = static_cast<size_t>(d);
      off += stride[u];
      if (++idx[u] < size[u]) break;
      off -= stride[u] * size[u];
      idx[u] = 0;
    }
  }
}

bool isIdentity(const ir::Ints& order) {
  for (size_t i = 0; i < order.size(); ++i)
    if (order[i] != static_cast<int64_t>(i)) return false;
  return true;
}

// The operand in canonical layout: in place when the spec is already [0, 1, ...], else copied.
template <class T>
const T* canonical(const T* data, const Shape& shape, const ir::Ints& spec, std::vector<T>& scratch) {
  if (isIdentity(spec)) return data;
  scratch.resize(static_cast<size_t>(shape.numel()));
  permuteCopy(data, shape, spec, scratch.data());
  return scratch.data();
}

// ---- im2col + GEMM (every case) ----

void gemm(int m, int n, int k, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}
void gemm(int m, int n, int k, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, k, b, n, 0.0, c, n);
}

// For one spatial dim: the lhs index each (window position, output position) reads, or -1 for padding and for
// the holes of lhs dilation.
std::vector<int64_t> sourceTable(const ConvGeometry& g, size_t d) {
  std::vector<int64_t> t(static_cast<size_t>(g.k[d] * g.out[d]));
  for (int64_t kk = 0; kk < g.k[d]; ++kk)
    for (int64_t oo = 0; oo < g.out[d]; ++oo) {
      int64_t x = oo * g.stride[d] + kk * g.rhsDil[d] - g.lo[d];
      int64_t src = -1;
      if (x >= 0 && x % g.lhsDil[d] == 0 && x / g.lhsDil[d] < g.in[d]) src = x / g.lhsDil[d];
      t[static_cast<size_t>(kk * g.out[d] + oo)] = src;
    }
  return t;
}

// x: [N, C, in...], w: [O, I, k...], y: [N / B, O, out...] (canonical layouts).
template <class T>
void im2colConv(const T* x, const T* w, T* y, const ConvGeometry& g) {
  const int64_t groups = g.featureGroups * g.batchGroups;
  const int64_t og = g.o / groups, kdim = g.i * g.kSize(), p = g.outSize(), nOut = g.n / g.batchGroups;
  if (nOut * g.o * p == 0) return;
  // Up to three spatial dims; missing ones are size 1 with a table {0}.
  std::array<std::vector<int64_t>, 3> table;
  std::array<int64_t, 3> kd{1, 1, 1}, od{1, 1, 1}, id{1, 1, 1};
  for (size_t d = 0; d < 3; ++d) {
    if (d < g.k.size()) {
      table[d] = sourceTable(g, d);
      kd[d] = g.k[d];
      od[d] = g.out[d];
      id[d] = g.in[d];
    } else {
      table[d] = {0};
    }
  }
  if (auto st = runtime::reserveBlasWorkspace(); !st.ok()) throw std::runtime_error(st.error().message);
  std::vector<T> col(static_cast<size_t>(kdim * p));
  const int64_t inSize = g.inSize();
  for (int64_t n = 0; n < nOut; ++n) {
    for (int64_t q = 0; q < groups; ++q) {
      const int64_t nIn = g.batchGroups > 1 ? q * nOut + n : n;
      const int64_t c0 = g.featureGroups > 1 ? q * g.i : 0;
      T* cp = col.data();
      for (int64_t c = 0; c < g.i; ++c) {
        const T* xc = x + (nIn * g.c + c0 + c) * inSize;
        for (int64_t k0 = 0; k0 < kd[0]; ++k0)
          for (int64_t k1 = 0; k1 < kd[1]; ++k1)
            for (int64_t k2 = 0; k2 < kd[2]; ++k2)
              for (int64_t o0 = 0; o0 < od[0]; ++o0) {
                const int64_t i0 = table[0][static_cast<size_t>(k0 * od[0] + o0)];
                for (int64_t o1 = 0; o1 < od[1]; ++o1) {
                  const int64_t i1 = table[1][static_cast<size_t>(k1 * od[1] + o1)];
                  for (int64_t o2 = 0; o2 < od[2]; ++o2) {
                    const int64_t i2 = table[2][static_cast<size_t>(k2 * od[2] + o2)];
                    *cp++ = (i0 < 0 || i1 < 0 || i2 < 0) ? T{} : xc[(i0 * id[1] + i1) * id[2] + i2];
                  }
                }
              }
      }
      gemm(static_cast<int>(og), static_cast<int>(p), static_cast<int>(kdim), w + q * og * kdim, col.data(),
           y + (n * g.o + q * og) * p);
    }
  }
}

// ---- kernel ----

void convKernel(const ir::CpuKernelArgs& args) {
  const auto& at = attrsAs<ConvAttrs>(args.attrs);
  const ir::TensorView& lhs = args.inputs[0];
  const ir::TensorView& rhs = args.inputs[1];
  const ir::MutableTensorView& out = args.outputs[0];
  ConvGeometry g = convGeometry(lhs.aval.shape, rhs.aval.shape, at);
  // oneDNN on the operands as they lie (halves widened to f32, exactly, and the result rounded once).
  if (out.aval.dtype == DType::F32 &&
      oneDnnConvolution(lhs.as<float>(), lhs.aval.shape, rhs.as<float>(), rhs.aval.shape, out.as<float>(),
                        out.aval.shape, at, g))
    return;
  if (out.aval.dtype == DType::BF16 || out.aval.dtype == DType::F16) {
    std::vector<float> l(static_cast<size_t>(lhs.aval.numel())), r(static_cast<size_t>(rhs.aval.numel())),
        y(static_cast<size_t>(out.aval.numel()));
    bool done = false;
    dispatchDType(out.aval.dtype, [&]<class T>() {
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
        std::copy(lhs.as<T>(), lhs.as<T>() + l.size(), l.begin());
        std::copy(rhs.as<T>(), rhs.as<T>() + r.size(), r.begin());
        done = oneDnnConvolution(l.data(), lhs.aval.shape, r.data(), rhs.aval.shape, y.data(), out.aval.shape, at, g);
        if (done) std::transform(y.begin(), y.end(), out.as<T>(), [](float v) { return T(v); });
      }
    });
    if (done) return;
  }
  const int64_t nOut = g.n / g.batchGroups;
  std::vector<int64_t> canonDims{nOut, g.o};
  canonDims.insert(canonDims.end(), g.out.begin(), g.out.end());
  const Shape canonOut(canonDims);
  // out dim d holds canonical dim inverse[d].
  ir::Ints inverse(at.outSpec.size());
  for (size_t j = 0; j < at.outSpec.size(); ++j) inverse[static_cast<size_t>(at.outSpec[j])] = static_cast<int64_t>(j);
  auto run = [&]<class T, class C>(const T* l, const T* r, T* o) {
    std::vector<C> ls, rs, ys(static_cast<size_t>(canonOut.numel()));
    std::vector<C> lw, rw;
    const C* x;
    const C* w;
    if constexpr (std::is_same_v<T, C>) {
      x = canonical(l, lhs.aval.shape, at.lhsSpec, ls);
      w = canonical(r, rhs.aval.shape, at.rhsSpec, rs);
    } else {  // widen halves to f32 (exact)
      lw.assign(l, l + lhs.aval.numel());
      rw.assign(r, r + rhs.aval.numel());
      x = canonical(static_cast<const C*>(lw.data()), lhs.aval.shape, at.lhsSpec, ls);
      w = canonical(static_cast<const C*>(rw.data()), rhs.aval.shape, at.rhsSpec, rs);
    }
    im2colConv(x, w, ys.data(), g);
    if (isIdentity(at.outSpec) && std::is_same_v<T, C>) {
      std::copy(ys.begin(), ys.end(), o);
      return;
    }
    std::vector<C> perm(ys.size());
    permuteCopy(ys.data(), canonOut, inverse, perm.data());
    for (size_t i = 0; i < perm.size(); ++i) o[i] = T(perm[i]);
  };
  dispatchDType(out.aval.dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      run.template operator()<T, T>(lhs.as<T>(), rhs.as<T>(), out.as<T>());
    else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
      run.template operator()<T, float>(lhs.as<T>(), rhs.as<T>(), out.as<T>());
    else
      TSR_CHECK_MSG(false, "conv_general_dilated: non-float dtypes are rejected by infer");
  });
}

// ---- vjp and batching: JAX's reshape helpers ----

// Splits dim `src` of x into (size, x.shape[src] / size), the `size` part first.
Array reshapeAxisOutOf(int64_t src, int64_t size, const Array& x) {
  auto dims = x.shape().dims();
  const auto s = static_cast<size_t>(src);
  const int64_t rest = dims[s] / size;
  dims[s] = rest;
  dims.insert(dims.begin() + src, size);
  return reshape(x, dims);
}

// Moves dim `src` of x next to (in front of) dim `dst` of x-without-src and merges the two, src major.
Array reshapeAxisInto(int64_t src, int64_t dst, const Array& x) {
  Axes perm;
  for (int64_t i = 0; i < x.rank(); ++i)
    if (i != src) perm.push_back(i);
  perm.insert(perm.begin() + dst, src);
  Array t = transpose(x, perm);
  auto dims = t.shape().dims();
  dims[static_cast<size_t>(dst)] *= dims[static_cast<size_t>(dst) + 1];
  dims.erase(dims.begin() + dst + 1);
  return reshape(t, dims);
}

Array bindConv(const Array& lhs, const Array& rhs, const ConvAttrs& at) {
  return bind1(ir::OpCode::ConvGeneralDilated, {lhs, rhs}, at, std::source_location::current());
}

int64_t dilateDim(int64_t s, int64_t d) { return s == 0 ? 0 : 1 + d * (s - 1); }

std::vector<Array> vjpConv(const ir::VjpArgs& a) {
  const auto& at = attrsAs<ConvAttrs>(a.attrs);
  const Array& g = a.cotangents[0];
  const Array& lhs = a.operands[0];
  const Array& rhs = a.operands[1];
  const size_t ns = at.windowStrides.size();
  auto spatial = [&](const Array& x, const ir::Ints& spec, size_t d) {
    return x.shape()[static_cast<int>(spec[d + 2])];
  };
  auto swapFirst = [](ir::Ints s) {
    std::swap(s[0], s[1]);
    return s;
  };

  // lhs cotangent: g convolved with the spatially reversed kernel, in/out features swapped; the forward strides
  // become lhs dilation (JAX's _conv_general_dilated_transpose_lhs).
  Array kernel = rhs;
  ConvAttrs lt;
  lt.featureGroupCount = at.featureGroupCount;
  const int64_t groups = std::max(at.featureGroupCount, at.batchGroupCount);
  if (groups > 1) {
    kernel = reshapeAxisOutOf(at.rhsSpec[0], groups, kernel);
    kernel = reshapeAxisInto(at.rhsSpec[0], at.rhsSpec[1], kernel);
    lt.featureGroupCount = groups;
  }
  lt.batchGroupCount = 1;
  lt.lhsSpec = at.outSpec;
  lt.rhsSpec = swapFirst(at.rhsSpec);
  lt.outSpec = at.lhsSpec;
  lt.windowStrides = at.lhsDilation;
  lt.lhsDilation = at.windowStrides;
  lt.rhsDilation = at.rhsDilation;
  Axes revDims;
  for (size_t d = 0; d < ns; ++d) {
    const int64_t lhsD = dilateDim(spatial(lhs, at.lhsSpec, d), at.lhsDilation[d]);
    const int64_t rhsD = dilateDim(spatial(kernel, at.rhsSpec, d), at.rhsDilation[d]);
    const int64_t outD = dilateDim(spatial(g, at.outSpec, d), at.windowStrides[d]);
    const int64_t before = rhsD - at.paddingLo[d] - 1;
    lt.paddingLo.push_back(before);
    lt.paddingHi.push_back(lhsD + rhsD - 1 - outD - before);
    revDims.push_back(at.rhsSpec[d + 2]);
  }
  Array dl = bindConv(g, flip(kernel, revDims), lt);
  if (at.batchGroupCount > 1) {
    dl = reshapeAxisOutOf(at.lhsSpec[1], at.batchGroupCount, dl);
    dl = reshapeAxisInto(at.lhsSpec[1], at.lhsSpec[0], dl);
  }

  // rhs cotangent: lhs (features as batch) convolved with g (as the kernel); feature groups become batch groups
  // and back (JAX's _conv_general_dilated_transpose_rhs).
  ConvAttrs rt;
  rt.featureGroupCount = at.batchGroupCount > 1 ? at.batchGroupCount : 1;
  rt.batchGroupCount = at.featureGroupCount > 1 ? at.featureGroupCount : 1;
  rt.lhsSpec = swapFirst(at.lhsSpec);
  rt.rhsSpec = swapFirst(at.outSpec);
  rt.outSpec = swapFirst(at.rhsSpec);
  rt.windowStrides = at.rhsDilation;
  rt.lhsDilation = at.lhsDilation;
  rt.rhsDilation = at.windowStrides;
  for (size_t d = 0; d < ns; ++d) {
    const int64_t lhsD = dilateDim(spatial(lhs, at.lhsSpec, d), at.lhsDilation[d]);
    const int64_t rhsD = dilateDim(spatial(rhs, at.rhsSpec, d), at.rhsDilation[d]);
    const int64_t outD = dilateDim(spatial(g, at.outSpec, d), at.windowStrides[d]);
    rt.paddingLo.push_back(at.paddingLo[d]);
    rt.paddingHi.push_back((outD - lhsD) + (rhsD - at.paddingLo[d] - 1));
  }
  Array dr = bindConv(lhs, g, rt);
  return {dl, dr};
}

// vmap (JAX's _conv_general_dilated_batch_rule): the specs index the unbatched operands, which is what the
// reshape helpers see once the batch dim is merged away.
ir::BatchResult batchConv(const ir::BatchArgs& a) {
  ConvAttrs at = attrsAs<ConvAttrs>(a.attrs);
  const Array& lhs = a.operands[0];
  const Array& rhs = a.operands[1];
  const int64_t lb = a.batchDims[0], rb = a.batchDims[1];
  const int64_t b = a.batchSize;
  const int64_t l0 = at.lhsSpec[0], l1 = at.lhsSpec[1], r0 = at.rhsSpec[0], o0 = at.outSpec[0], o1 = at.outSpec[1];
  auto done = [](const Array& out, int64_t dim) {
    return ir::BatchResult{{out}, {static_cast<int>(dim)}};
  };
  if (lb >= 0 && rb >= 0) {
    Array newLhs = lhs;
    if (at.batchGroupCount > 1) {
      newLhs = reshapeAxisInto(lb, l0, lhs);
      at.batchGroupCount *= b;
    } else {
      newLhs = reshapeAxisInto(lb, l1, lhs);
      at.featureGroupCount *= b;
    }
    Array out = bindConv(newLhs, reshapeAxisInto(rb, r0, rhs), at);
    return done(reshapeAxisOutOf(o1, b, out), o1);
  }
  if (lb >= 0) {
    if (at.batchGroupCount == 1) {
      Array out = bindConv(reshapeAxisInto(lb, l0, lhs), rhs, at);
      return done(reshapeAxisOutOf(o0, b, out), o0);
    }
    Array newLhs = reshapeAxisOutOf(l0 + (lb <= l0 ? 1 : 0), at.batchGroupCount, lhs);
    newLhs = reshapeAxisInto(lb + (l0 < lb ? 1 : 0), l0 + 1, newLhs);
    newLhs = reshapeAxisInto(l0, l0, newLhs);
    Array out = bindConv(newLhs, rhs, at);
    return done(reshapeAxisOutOf(o0, b, out), o0);
  }
  if (at.featureGroupCount == 1 && at.batchGroupCount == 1) {
    Array out = bindConv(lhs, reshapeAxisInto(rb, r0, rhs), at);
    return done(reshapeAxisOutOf(o1, b, out), o1);
  }
  // Groups must stay outermost in the rhs out-features: factor them out, fold the batch into what remains, put
  // them back; the result is unfolded the same way.
  const int64_t groups = std::max(at.featureGroupCount, at.batchGroupCount);
  Array newRhs = reshapeAxisOutOf(r0 + (rb <= r0 ? 1 : 0), groups, rhs);
  newRhs = reshapeAxisInto(rb + (r0 < rb ? 1 : 0), r0 + 1, newRhs);
  newRhs = reshapeAxisInto(r0, r0, newRhs);
  Array out = bindConv(lhs, newRhs, at);
  out = reshapeAxisOutOf(o1, groups, out);
  out = reshapeAxisOutOf(o1 + 1, b, out);
  out = reshapeAxisInto(o1, o1 + 1, out);
  return done(out, o1);
}

}  // namespace

void registerConvolutionOps(ir::OpRegistry& reg) {
  ir::OpDef d = coreOp(ir::OpCode::ConvGeneralDilated, "convolution", ir::FusionKind::Opaque, 2);
  d.cpuWritesWholeResult = true;
  d.infer = inferConv;
  d.cost = costConv;
  d.cpu = convKernel;
  d.vjp = vjpConv;
  d.batch = batchConv;
  d.shard = convShardRule();
  addCoreOp(reg, std::move(d));
}

}  // namespace tsr::ops
