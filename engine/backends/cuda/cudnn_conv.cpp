// The mapping of conv_general_dilated to cuDNN's convolution operations (cudnn_conv.h). Pure: no CUDA call.
//
// The window arithmetic is the CPU backend's for oneDNN (engine/ops/conv_onednn.cpp, `windows`), in canonical
// terms (lhs [N, C, in], rhs [O, I, k], out [N, O, out]; per spatial dim stride s, padding lo/hi, lhs dilation
// ld, rhs dilation rd, reach = (k - 1) * rd):
//   forward          stride s, dilation rd, pre lo, post (out - 1) * s + reach + 1 - in - lo;
//   backward data    stride ld, dilation rd, pre reach - lo, post reach - hi (the padding of the convolution it
//                    transposes);
//   backward filter  stride rd, dilation s, pre lo, post reach + (out - 1) * s + 1 - in - lo.
// cuDNN checks a window count as floor((in + pre + post - window) / stride) + 1, so the post padding may be
// anything in [exact, exact + stride - 1] (and not negative): the value nearest the pre padding is taken, as
// engines take symmetric padding more often than not.
#include "engine/backends/cuda/cudnn_conv.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/ops/conv_geometry.h"

namespace tsr::cuda {
namespace {

using Ints = std::vector<int64_t>;

// A row-major tensor of shape `raw` seen with its dims in the order `order` (logical dim j is raw dim order[j]).
CudnnTensor view(const Shape& raw, const Ints& order) {
  const auto rawStrides = raw.strides();
  CudnnTensor t;
  for (int64_t r : order) {
    t.dims.push_back(raw[static_cast<int>(r)]);
    t.strides.push_back(rawStrides[static_cast<size_t>(r)]);
  }
  return t;
}

Ints swapRoles(Ints spec) {
  std::swap(spec[0], spec[1]);
  return spec;
}

// Channels last: the feature dim is the innermost of the feature and spatial dims.
bool channelsLast(const CudnnTensor& t) {
  for (size_t d = 2; d < t.dims.size(); ++d)
    if (t.dims[d] > 1 && t.strides[d] < t.strides[1]) return false;
  return t.dims[1] > 1 && t.strides[1] == 1;
}

// Row-major strides of `dims`.
Ints packedStrides(const Ints& dims) {
  Ints s(dims.size(), 1);
  for (size_t d = dims.size() - 1; d-- > 0;) s[d] = s[d + 1] * dims[d + 1];
  return s;
}

// The filter [K, C, spatial...] packed: KCRS, or KRSC (channels last).
CudnnTensor packedFilter(const Ints& dims, bool last) {
  CudnnTensor t{dims, Ints(dims.size(), 1)};
  if (!last) {
    t.strides = packedStrides(dims);
    return t;
  }
  int64_t s = dims[1];
  for (size_t d = dims.size(); d-- > 2;) {
    t.strides[d] = s;
    s *= dims[d];
  }
  t.strides[0] = s;
  return t;
}

// Equal as layouts: the same dims and the same strides wherever a dim has more than one element.
bool sameLayout(const CudnnTensor& a, const CudnnTensor& b) {
  if (a.dims != b.dims) return false;
  for (size_t d = 0; d < a.dims.size(); ++d)
    if (a.dims[d] > 1 && a.strides[d] != b.strides[d]) return false;
  return true;
}

// A 1-D problem as 2-D: a unit spatial dim in front of the one there is, strided as an outer dim would be.
void addUnitDim(CudnnTensor& t) {
  const int64_t outer = t.strides[2] * t.dims[2];
  t.dims.insert(t.dims.begin() + 2, 1);
  t.strides.insert(t.strides.begin() + 2, outer);
}

// A filter element as the node's buffer holds it: the grouped view [G, K / G, C / G, spatial...] of cuDNN's
// [K, C / G, spatial...], with its strides over the node's rhs (or result) and the flip.
struct FilterSource {
  Ints dims, strides;
  int64_t offset = 0;
};

// The copy into (or out of) a packed filter of cuDNN's dims `dims`, from `src`, in the layout of `activations`.
CudnnFilterCopy filterCopy(const FilterSource& src, const Ints& dims, bool last) {
  CudnnFilterCopy c;
  c.packed = packedFilter(dims, last);
  c.offset = src.offset;
  // Packed order: [G, K / G, C / G, spatial...] (KCRS) or [G, K / G, spatial..., C / G] (KRSC).
  c.dims = src.dims;
  c.strides = src.strides;
  if (last) {
    std::rotate(c.dims.begin() + 2, c.dims.begin() + 3, c.dims.end());
    std::rotate(c.strides.begin() + 2, c.strides.begin() + 3, c.strides.end());
  }
  return c;
}

// The post padding for an exact value `exact` at stride `stride`: [max(exact, 0), exact + stride - 1], nearest
// to `pre`; nullopt where the range is empty (input that no window reads beyond what stride drops).
std::optional<int64_t> postPadding(int64_t pre, int64_t exact, int64_t stride) {
  const int64_t low = std::max<int64_t>(exact, 0), high = exact + stride - 1;
  if (high < low) return std::nullopt;
  return std::clamp(pre, low, high);
}

CudnnConvDecision no(std::string why) { return {std::nullopt, std::move(why)}; }

}  // namespace

const char* cudnnConvOpName(CudnnConvOp op) {
  switch (op) {
    case CudnnConvOp::Forward: return "forward";
    case CudnnConvOp::BackwardData: return "backward_data";
    case CudnnConvOp::BackwardFilter: return "backward_filter";
  }
  return "?";
}

std::string CudnnConvProblem::key() const {
  auto tensor = [](const CudnnTensor& t) { return fmt::format("[{}]/[{}]", fmt::join(t.dims, ","), fmt::join(t.strides, ",")); };
  std::string s = fmt::format("{} {} x{} w{} y{} groups {} stride [{}] dilation [{}] pad [{}]/[{}]{}", cudnnConvOpName(op),
                              dtypeName(dtype), tensor(x), tensor(w), tensor(y), groups, fmt::join(strides, ","),
                              fmt::join(dilations, ","), fmt::join(prePadding, ","), fmt::join(postPadding, ","),
                              convolutionMode ? " convolution" : "");
  if (copyFilter)
    s += fmt::format(" copy [{}]/[{}]+{}", fmt::join(filterCopy.dims, ","), fmt::join(filterCopy.strides, ","),
                     filterCopy.offset);
  return s;
}

CudnnConvProblem withFilterCopy(CudnnConvProblem p) {
  p.copyFilter = true;
  p.convolutionMode = false;  // the copy flips
  p.w = p.filterCopy.packed;
  return p;
}

CudnnConvDecision mapConvToCudnn(const Aval& lhs, const Aval& rhs, const Aval& out, const ir::ConvAttrs& at) {
  const DType t = out.dtype;
  if ((t != DType::F32 && t != DType::BF16) || lhs.dtype != t || rhs.dtype != t)
    return no(fmt::format("dtype {}: cuDNN runs f32 and bf16", dtypeName(t)));
  const size_t ns = at.windowStrides.size();
  if (ns < 1 || ns > 3) return no(fmt::format("{} spatial dims: cuDNN convolves 1 to 3", ns));
  const ops::ConvGeometry g = ops::convGeometry(lhs.shape, rhs.shape, at);
  if (g.n == 0 || g.c == 0 || g.o == 0 || g.i == 0 || g.inSize() == 0 || g.kSize() == 0 || g.outSize() == 0)
    return no("an empty dim");
  if (g.featureGroups > 1 && g.batchGroups > 1) return no("feature and batch groups together");
  bool lhsDilated = false, strided = false;
  for (size_t d = 0; d < ns; ++d) {
    lhsDilated |= g.lhsDil[d] > 1;
    strided |= g.stride[d] > 1;
  }

  CudnnConvProblem p;
  p.dtype = t;
  if (g.batchGroups > 1) {
    if (lhsDilated) return no("batch groups with lhs dilation");
    p.op = CudnnConvOp::BackwardFilter;
  } else if (lhsDilated) {
    if (strided) return no("lhs dilation with window strides (a strided transposed convolution)");
    p.op = CudnnConvOp::BackwardData;
  } else {
    p.op = g.featureGroups == 1 && g.kSize() > g.outSize() ? CudnnConvOp::BackwardFilter : CudnnConvOp::Forward;
  }

  FilterSource src;  // the filter [G, K / G, C / G, k...] as the node's buffer holds it
  Ints filterDims;   // cuDNN's [K, C / G, k...]
  for (size_t d = 0; d < ns; ++d) {
    const int64_t reach = (g.k[d] - 1) * g.rhsDil[d];
    int64_t stride = 0, dilation = 0, pre = 0, exact = 0;
    if (p.op == CudnnConvOp::Forward) {
      stride = g.stride[d], dilation = g.rhsDil[d], pre = g.lo[d];
      exact = (g.out[d] - 1) * g.stride[d] + reach + 1 - g.in[d] - g.lo[d];
    } else if (p.op == CudnnConvOp::BackwardData) {
      stride = g.lhsDil[d], dilation = g.rhsDil[d], pre = reach - g.lo[d], exact = reach - g.hi[d];
    } else {
      stride = g.rhsDil[d], dilation = g.stride[d], pre = g.lo[d];
      exact = reach + (g.out[d] - 1) * g.stride[d] + 1 - g.in[d] - g.lo[d];
    }
    const std::optional<int64_t> post = postPadding(pre, exact, stride);
    if (pre < 0 || !post)
      return no(fmt::format("{}: spatial dim {} needs negative padding ({} before, {} after)", cudnnConvOpName(p.op),
                            d, pre, exact));
    p.strides.push_back(stride);
    p.dilations.push_back(dilation);
    p.prePadding.push_back(pre);
    p.postPadding.push_back(*post);
  }

  if (p.op == CudnnConvOp::Forward) {
    p.x = view(lhs.shape, at.lhsSpec);
    p.w = view(rhs.shape, at.rhsSpec);  // [O, I, k]: K = O, C / G = I
    p.y = view(out.shape, at.outSpec);
    p.xValue = 0, p.wValue = 1, p.yValue = 2;
    p.groups = g.featureGroups;
    const int64_t kg = g.o / p.groups;
    src.dims = {p.groups, kg, g.i};
    src.strides = {kg * p.w.strides[0], p.w.strides[0], p.w.strides[1]};
  } else if (p.op == CudnnConvOp::BackwardData) {
    // rhs [O', I', k] = [C_fwd, O_fwd / G, k], flipped by the vjp; cuDNN's W is the forward convolution's
    // [O_fwd, C_fwd / G, k]: W[(grp, oj), ci, j] = rhs[grp * C_fwd / G + ci, oj, k - 1 - j].
    p.y = view(lhs.shape, at.lhsSpec);
    p.x = view(out.shape, at.outSpec);
    const CudnnTensor r = view(rhs.shape, at.rhsSpec);
    p.xValue = 2, p.wValue = 1, p.yValue = 0;
    p.groups = g.featureGroups;
    const int64_t cg = g.o / p.groups, og = g.i;  // forward: C / G and O / G
    p.w.dims = {g.c, cg};
    if (p.groups == 1 || og == 1 || og * r.strides[1] == cg * r.strides[0]) {
      p.w.strides = {og == 1 ? cg * r.strides[0] : r.strides[1], r.strides[0]};
    } else {
      p.copyFilter = true;  // no stride over K = (grp, oj) reads this grouping
    }
    for (size_t d = 0; d < ns; ++d) {
      p.w.dims.push_back(g.k[d]);
      p.w.strides.push_back(r.strides[d + 2]);
    }
    if (p.copyFilter) p.w.strides.clear();
    p.convolutionMode = true;
    src.dims = {p.groups, og, cg};
    src.strides = {cg * r.strides[0], r.strides[1], r.strides[0]};
    for (size_t d = 0; d < ns; ++d) src.offset += (g.k[d] - 1) * r.strides[d + 2];
  } else {
    p.x = view(lhs.shape, swapRoles(at.lhsSpec));  // [N, C, in]
    p.y = view(rhs.shape, swapRoles(at.rhsSpec));  // [N, O, out]: the cotangent
    p.w = view(out.shape, swapRoles(at.outSpec));  // [O, C / G, k]: the filter's gradient
    p.xValue = 0, p.wValue = 2, p.yValue = 1;
    p.groups = g.batchGroups;
    const int64_t kg = p.w.dims[0] / p.groups;
    src.dims = {p.groups, kg, p.w.dims[1]};
    src.strides = {kg * p.w.strides[0], p.w.strides[0], p.w.strides[1]};
  }
  if (p.op != CudnnConvOp::BackwardData) {
    filterDims = {p.w.dims[0], p.w.dims[1]};
    for (size_t d = 2; d < p.w.dims.size(); ++d) {
      filterDims.push_back(p.w.dims[d]);
      src.dims.push_back(p.w.dims[d]);
      src.strides.push_back(p.w.strides[d]);
    }
  } else {
    filterDims = p.w.dims;
    const CudnnTensor r = view(rhs.shape, at.rhsSpec);
    for (size_t d = 0; d < ns; ++d) {
      src.dims.push_back(g.k[d]);
      src.strides.push_back(-r.strides[d + 2]);
    }
  }

  const bool last = channelsLast(p.op == CudnnConvOp::BackwardData ? p.y : p.x);
  p.filterCopy = filterCopy(src, filterDims, last);
  if (ns == 1) {
    for (CudnnTensor* tensor : {&p.x, &p.y, &p.filterCopy.packed}) addUnitDim(*tensor);
    if (!p.copyFilter) addUnitDim(p.w);
    p.strides.insert(p.strides.begin(), 1);
    p.dilations.insert(p.dilations.begin(), 1);
    p.prePadding.insert(p.prePadding.begin(), 0);
    p.postPadding.insert(p.postPadding.begin(), 0);
  }
  // A filter that lies packed as the activations do goes as it is; any other is copied (cuDNN's engines take
  // KCRS and KRSC filters).
  if (!p.copyFilter && !sameLayout(p.w, p.filterCopy.packed)) p.copyFilter = true;
  if (p.copyFilter) p = withFilterCopy(std::move(p));
  return {std::move(p), ""};
}

const char* cudnnPointwiseName(ops::ConvPostOp::Kind kind) {
  using K = ops::ConvPostOp::Kind;
  switch (kind) {
    case K::Relu: return "relu_fwd";
    case K::Tanh: return "tanh_fwd";
    case K::Logistic: return "sigmoid_fwd";
    case K::GeluTanh: return "gelu_approx_tanh_fwd";
    case K::GeluErf: return "gelu_fwd";
    case K::Add: return "add";
    case K::Sub: return "sub";
    case K::Mul: return "mul";
    case K::Div: return "div";
    case K::Max: return "max";
    case K::Min: return "min";
  }
  return "?";
}

std::string CudnnEpilogue::key() const {
  std::string s;
  for (const CudnnPointwise& p : steps) {
    s += fmt::format(" {}", cudnnPointwiseName(p.kind));
    if (p.binary) s += fmt::format("([{}]/[{}])", fmt::join(p.operand.dims, ","), fmt::join(p.operand.strides, ","));
  }
  return s;
}

CudnnEpilogueDecision mapEpilogueToCudnn(const CudnnConvProblem& conv, std::span<const ops::ConvPostOp> chain) {
  using Operand = ops::ConvPostOp::Operand;
  if (conv.op != CudnnConvOp::Forward)
    return {std::nullopt, fmt::format("a {} convolution takes no epilogue", cudnnConvOpName(conv.op))};
  if (chain.empty()) return {std::nullopt, "no epilogue"};
  const CudnnTensor& y = conv.y;
  const size_t rank = y.dims.size();
  CudnnEpilogue e;
  for (const ops::ConvPostOp& op : chain) {
    CudnnPointwise step;
    step.kind = op.kind;
    step.binary = op.operand != Operand::None;
    switch (op.operand) {
      case Operand::None: break;
      case Operand::Scalar: step.operand = CudnnTensor{Ints(rank, 1), Ints(rank, 1)}; break;
      case Operand::PerChannel:
        // [1, K, 1, ...]: the channel dim packed, the others strided past it.
        step.operand = CudnnTensor{Ints(rank, 1), Ints(rank, y.dims[1])};
        step.operand.dims[1] = y.dims[1];
        step.operand.strides[1] = 1;
        break;
      case Operand::Full: step.operand = y; break;  // row-major as the result, which y describes
    }
    e.steps.push_back(std::move(step));
  }
  return {std::move(e), ""};
}

}  // namespace tsr::cuda
