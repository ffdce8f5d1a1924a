// conv_general_dilated through oneDNN (see conv_onednn.h).
//
// Each problem is described to oneDNN by strided memory descriptors over the operands as they lie (the dimension
// specs become strides, so NHWC needs no transposing copy), the primitive is created with `any` layouts so that
// oneDNN chooses its fastest (blocked) ones, and reorders move the operands in and the result out. Primitives and
// reorders are cached per problem; buffers are the calling thread's, kept between calls (an SPMD program runs
// the same convolution on several device threads at once, each with its own).
//
// How the gradients map (canonical terms: lhs x [N, C, in], rhs w [O, I, k], out y [N, O, out], per spatial dim
// stride s, padding lo/hi, lhs dilation ld, rhs dilation rd):
//   data gradient: y[n,o,p] = sum_{c,j} xd[n,c,p + j*rd - lo] w[o,c,j] with xd x dilated by ld, s = 1. That is
//     the backward-data pass of the forward convolution from y's shape to x's with stride ld, dilation rd,
//     padding (k-1)*rd - lo and (k-1)*rd - hi, and weights W'[c,o,j] = w[o,c,k-1-j] (flipped, in and out swapped).
//   filter gradient: y[n,o,q] = sum_{c,j} x[n,c,q*s + j*rd - lo] w[o,c,j] read with the roles swapped is the
//     backward-weights pass: source x as [C, N, in], cotangent w as [C, O, k], weights gradient y as [O, N, out],
//     stride rd, dilation s, padding lo and whatever makes the window count come out at k.
#include "engine/ops/conv_onednn.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/core/env_options.h"
#include "engine/ops/onednn_common.h"

namespace tsr::ops {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

enum class Kind { None, Forward, DataGradient, FilterGradient };

struct Windows {
  dims strides, dilates, padL, padR;
};

// The primitive's strides, dilations and paddings. oneDNN checks a window count as floor((in + padL + padR -
// window) / stride) + 1, so the right padding may be anything that keeps that floor: where the exact value is
// negative (XLA's floor dropped input that no window reads), up to stride - 1 more gives the same problem.
// nullopt where no non-negative padding does.
std::optional<Windows> windows(Kind kind, const ConvGeometry& g) {
  Windows w;
  for (size_t d = 0; d < g.k.size(); ++d) {
    const int64_t reach = (g.k[d] - 1) * g.rhsDil[d];  // the dilated kernel's extent - 1
    int64_t stride = 0, dilation = 0, left = 0, right = 0;
    if (kind == Kind::Forward) {
      stride = g.stride[d], dilation = g.rhsDil[d], left = g.lo[d];
      right = (g.out[d] - 1) * g.stride[d] + reach + 1 - g.in[d] - g.lo[d];
    } else if (kind == Kind::DataGradient) {
      stride = g.lhsDil[d], dilation = g.rhsDil[d], left = reach - g.lo[d], right = reach - g.hi[d];
    } else {
      stride = g.rhsDil[d], dilation = g.stride[d], left = g.lo[d];
      right = reach + (g.out[d] - 1) * g.stride[d] + 1 - g.in[d] - g.lo[d];
    }
    if (left < 0 || right + stride - 1 < 0) return std::nullopt;
    w.strides.push_back(stride);
    w.dilates.push_back(dilation - 1);  // oneDNN counts the holes
    w.padL.push_back(left);
    w.padR.push_back(std::max<int64_t>(right, 0));
  }
  return w;
}

Kind chooseKind(const ConvGeometry& g) {
  if (g.batchGroups != 1 || g.n == 0 || g.c == 0 || g.o == 0 || g.i == 0) return Kind::None;
  bool lhsDilated = false;
  for (size_t d = 0; d < g.k.size(); ++d) {
    if (g.in[d] < 1 || g.out[d] < 1 || g.k[d] < 1) return Kind::None;
    lhsDilated |= g.lhsDil[d] > 1;
  }
  if (lhsDilated) {
    for (size_t d = 0; d < g.k.size(); ++d)
      if (g.stride[d] != 1) return Kind::None;
    return windows(Kind::DataGradient, g) ? Kind::DataGradient : Kind::None;
  }
  if (g.featureGroups == 1 && g.kSize() > g.outSize() && windows(Kind::FilterGradient, g)) return Kind::FilterGradient;
  return windows(Kind::Forward, g) ? Kind::Forward : Kind::None;
}

// A row-major tensor of shape `raw` seen with its dims in the order `order` (logical dim j is raw dim order[j]).
struct View {
  dims sizes, strides;
};

View view(const Shape& raw, const std::vector<int64_t>& order) {
  std::vector<int64_t> rawStrides(static_cast<size_t>(raw.rank()), 1);
  for (int d = raw.rank() - 2; d >= 0; --d) rawStrides[static_cast<size_t>(d)] = rawStrides[static_cast<size_t>(d) + 1] * raw[d + 1];
  View v;
  for (int64_t r : order) {
    v.sizes.push_back(raw[static_cast<int>(r)]);
    v.strides.push_back(rawStrides[static_cast<size_t>(r)]);
  }
  return v;
}

// Splits logical dim 0 into (groups, size / groups): grouped weights.
View splitGroups(View v, int64_t groups) {
  if (groups <= 1) return v;
  const int64_t per = v.sizes[0] / groups;
  v.sizes.insert(v.sizes.begin(), groups);
  v.sizes[1] = per;
  v.strides.insert(v.strides.begin(), per * v.strides[0]);
  return v;
}

dnnl::memory::desc strided(const View& v) { return dnnl::memory::desc(v.sizes, dt::f32, v.strides); }
dnnl::memory::desc any(const dims& sizes) { return dnnl::memory::desc(sizes, dt::f32, tag::any); }
// Activations too go in the primitive's own layout: on AVX-512 its blocked layouts beat running on NHWC in place
// by 1.5-3x at ResNet's shapes, reorders included (bench_conv).
dnnl::memory::desc act(const View& v) { return any(v.sizes); }

// Spec order with the first two roles swapped (the filter gradient's reading).
std::vector<int64_t> swapRoles(std::vector<int64_t> spec) {
  std::swap(spec[0], spec[1]);
  return spec;
}

struct Arg {
  int id = 0;                       // DNNL_ARG_*
  int operand = 0;                  // 0 lhs, 1 rhs, 2 flipped weights, 3 out, 4 + i post-op i's operand
  dnnl::memory::desc user, inner;   // as it lies, and as the primitive wants it
  std::optional<dnnl::reorder> reorder;  // user -> inner (inputs) or inner -> user (the output)
};

struct Problem {
  Kind kind = Kind::None;
  dnnl::primitive prim;
  std::vector<Arg> inputs;
  Arg output;
  dnnl::memory::desc scratchpad;
  std::string implementation;
};

Arg makeArg(int id, int operand, const dnnl::memory::desc& user, const dnnl::memory::desc& inner, bool output,
            const dnnl::engine& engine) {
  Arg a{id, operand, user, inner, std::nullopt};
  if (!(user == inner))
    a.reorder = output ? dnnl::reorder(dnnl::reorder::primitive_desc(engine, inner, engine, user))
                       : dnnl::reorder(dnnl::reorder::primitive_desc(engine, user, engine, inner));
  return a;
}

dnnl::primitive_attr userScratchpad() {
  // The scratchpad is the caller's: the library's own is shared by every execution of a primitive and is not
  // safe across threads in Debian's build.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::algorithm postOpAlgorithm(ConvPostOp::Kind k) {
  using A = dnnl::algorithm;
  switch (k) {
    case ConvPostOp::Kind::Relu: return A::eltwise_relu;
    case ConvPostOp::Kind::Tanh: return A::eltwise_tanh;
    case ConvPostOp::Kind::Logistic: return A::eltwise_logistic;
    case ConvPostOp::Kind::GeluTanh: return A::eltwise_gelu_tanh;
    case ConvPostOp::Kind::GeluErf: return A::eltwise_gelu_erf;
    case ConvPostOp::Kind::Add: return A::binary_add;
    case ConvPostOp::Kind::Sub: return A::binary_sub;
    case ConvPostOp::Kind::Mul: return A::binary_mul;
    case ConvPostOp::Kind::Div: return A::binary_div;
    case ConvPostOp::Kind::Max: return A::binary_max;
    case ConvPostOp::Kind::Min: return A::binary_min;
  }
  return A::eltwise_relu;
}

// A binary post-op's operand over the result's logical dims [N, O, spatial...]: one value or one per feature as
// they lie; a whole array in the layout the primitive picks (`any`, resolved to the result's) or, where oneDNN
// will not pick one, as it lies.
dnnl::memory::desc postOpOperand(const ConvPostOp& op, const View& out, bool anyLayout) {
  if (op.operand == ConvPostOp::Operand::Full) return anyLayout ? any(out.sizes) : strided(out);
  dims sizes(out.sizes.size(), 1), strides(out.sizes.size(), 1);
  if (op.operand == ConvPostOp::Operand::PerChannel) {
    sizes[1] = out.sizes[1];
    strides[0] = out.sizes[1];
  }
  return dnnl::memory::desc(sizes, dt::f32, strides);
}

dnnl::post_ops postOpChain(std::span<const ConvPostOp> postOps, const View& out, bool anyLayout) {
  dnnl::post_ops chain;
  for (const ConvPostOp& op : postOps) {
    if (op.operand == ConvPostOp::Operand::None)
      chain.append_eltwise(1.f, postOpAlgorithm(op.kind), 0.f, 0.f);
    else
      chain.append_binary(postOpAlgorithm(op.kind), postOpOperand(op, out, anyLayout));
  }
  return chain;
}

// Whether Winograd's F(4x4, 3x3) (oneDNN's jit_wino_4x3: 36 multiplies for 16 outputs of a 3x3 window where
// the direct kernel does 144) pays for the primitive oneDNN is given: source [batch, in, ...], result channels
// `out` over `outSpatial`. It needs a 2-D 3x3 window at stride 1, undilated and ungrouped; below 32 channels a
// side, or with fewer than 32 4x4 output tiles in the batch, its transforms cost more than the products save
// (1 thread, AVX-512: 2.0-2.6x faster at ResNet-18's CIFAR layers at batch 64 in all three passes, 1.35x at
// 128 channels over 4x4 at batch 32; 0.7-0.95x at 16 channels, 0.1x for one 4x4 image at 512 channels).
bool winogradPays(const dims& src, int64_t out, const dims& outSpatial, const dims& kernel, const Windows& w,
                  int64_t groups) {
  if (!envOptions().convWinograd || groups != 1 || kernel.size() != 2 || src[1] < 32 || out < 32) return false;
  for (size_t d = 0; d < 2; ++d)
    if (kernel[d] != 3 || w.strides[d] != 1 || w.dilates[d] != 0) return false;
  const int64_t tiles = src[0] * ((outSpatial[0] + 3) / 4) * ((outSpatial[1] + 3) / 4);
  return tiles >= 32;
}

dims spatial(const dims& sizes) { return dims(sizes.begin() + 2, sizes.end()); }

std::shared_ptr<const Problem> buildWithAlgorithm(Kind kind, const Shape& lhsShape, const Shape& rhsShape,
                                                  const Shape& outShape, const ir::ConvAttrs& at,
                                                  const ConvGeometry& g, const dnnl::engine& engine,
                                                  std::span<const ConvPostOp> postOps, dnnl::algorithm algo) {
  auto problem = std::make_shared<Problem>();
  problem->kind = kind;
  const View lhs = view(lhsShape, at.lhsSpec), rhs = view(rhsShape, at.rhsSpec), out = view(outShape, at.outSpec);
  auto attr = userScratchpad();
  const Windows w = *windows(kind, g);
  if (kind == Kind::Forward) {
    const View wei = splitGroups(rhs, g.featureGroups);
    // Winograd as for training: for inference oneDNN keeps its weights pre-transformed, and the reorder into
    // that format (the transform, every call here) cost more than the convolution (ResNet's 512-channel layer).
    const auto prop = algo == dnnl::algorithm::convolution_winograd ? dnnl::prop_kind::forward_training
                                                                     : dnnl::prop_kind::forward_inference;
    dnnl::convolution_forward::desc desc(prop, algo, act(lhs), any(wei.sizes), act(out), w.strides, w.dilates,
                                         w.padL, w.padR);
    // A whole-array operand in the result's own layout first; as it lies where oneDNN will not take that.
    std::optional<dnnl::convolution_forward::primitive_desc> made;
    for (bool anyLayout : {true, false}) {
      if (!postOps.empty()) attr.set_post_ops(postOpChain(postOps, out, anyLayout));
      try {
        made.emplace(desc, attr, engine);
        break;
      } catch (const dnnl::error&) {
        if (!anyLayout || postOps.empty()) throw;
      }
    }
    const dnnl::convolution_forward::primitive_desc& pd = *made;
    problem->prim = dnnl::convolution_forward(pd);
    problem->inputs = {makeArg(DNNL_ARG_SRC, 0, strided(lhs), pd.src_desc(), false, engine),
                       makeArg(DNNL_ARG_WEIGHTS, 1, strided(wei), pd.weights_desc(), false, engine)};
    for (size_t i = 0; i < postOps.size(); ++i) {
      if (postOps[i].operand == ConvPostOp::Operand::None) continue;
      const int id = DNNL_ARG_ATTR_MULTIPLE_POST_OP(static_cast<int>(i)) | DNNL_ARG_SRC_1;
      problem->inputs.push_back(makeArg(id, 4 + static_cast<int>(i), postOpOperand(postOps[i], out, false),
                                        pd.query_md(dnnl::query::exec_arg_md, id), false, engine));
    }
    problem->output = makeArg(DNNL_ARG_DST, 3, strided(out), pd.dst_desc(), true, engine);
    problem->scratchpad = pd.scratchpad_desc();
    problem->implementation = pd.impl_info_str();
  } else if (kind == Kind::DataGradient) {
    // The forward convolution transposed here goes from out's shape (O channels) to lhs's (C channels).
    const int64_t groups = g.featureGroups;
    dims flipped = groups > 1 ? dims{groups, g.c / groups, g.o / groups} : dims{g.c, g.o};
    flipped.insert(flipped.end(), g.k.begin(), g.k.end());
    View fl;
    fl.sizes = flipped;
    fl.strides.assign(flipped.size(), 1);
    for (size_t d = flipped.size() - 1; d-- > 0;) fl.strides[d] = fl.strides[d + 1] * flipped[d + 1];
    dnnl::convolution_forward::desc hintDesc(dnnl::prop_kind::forward_training, algo, act(out), any(fl.sizes),
                                             act(lhs), w.strides, w.dilates, w.padL, w.padR);
    dnnl::convolution_forward::primitive_desc hint(hintDesc, engine);
    dnnl::convolution_backward_data::desc desc(algo, act(out), any(fl.sizes), act(lhs), w.strides,
                                               w.dilates, w.padL, w.padR);
    dnnl::convolution_backward_data::primitive_desc pd(desc, attr, engine, hint);
    problem->prim = dnnl::convolution_backward_data(pd);
    problem->inputs = {makeArg(DNNL_ARG_DIFF_DST, 0, strided(lhs), pd.diff_dst_desc(), false, engine),
                       makeArg(DNNL_ARG_WEIGHTS, 2, strided(fl), pd.weights_desc(), false, engine)};
    problem->output = makeArg(DNNL_ARG_DIFF_SRC, 3, strided(out), pd.diff_src_desc(), true, engine);
    problem->scratchpad = pd.scratchpad_desc();
    problem->implementation = pd.impl_info_str();
  } else {
    const View src = view(lhsShape, swapRoles(at.lhsSpec));     // [C, N, in]
    const View diffDst = view(rhsShape, swapRoles(at.rhsSpec)); // [C, O, k]
    const View diffWei = view(outShape, swapRoles(at.outSpec)); // [O, N, out]
    dnnl::convolution_forward::desc hintDesc(dnnl::prop_kind::forward_training, algo, act(src),
                                             any(diffWei.sizes), act(diffDst), w.strides, w.dilates, w.padL,
                                             w.padR);
    dnnl::convolution_forward::primitive_desc hint(hintDesc, engine);
    dnnl::convolution_backward_weights::desc desc(algo, act(src), any(diffWei.sizes), act(diffDst),
                                                  w.strides, w.dilates, w.padL, w.padR);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, engine, hint);
    problem->prim = dnnl::convolution_backward_weights(pd);
    problem->inputs = {makeArg(DNNL_ARG_SRC, 0, strided(src), pd.src_desc(), false, engine),
                       makeArg(DNNL_ARG_DIFF_DST, 1, strided(diffDst), pd.diff_dst_desc(), false, engine)};
    problem->output = makeArg(DNNL_ARG_DIFF_WEIGHTS, 3, strided(diffWei), pd.diff_weights_desc(), true, engine);
    problem->scratchpad = pd.scratchpad_desc();
    problem->implementation = pd.impl_info_str();
  }
  return problem;
}

// Winograd where it pays and oneDNN implements it for the problem (post-ops included), the direct kernels
// otherwise.
std::shared_ptr<const Problem> buildProblem(Kind kind, const Shape& lhsShape, const Shape& rhsShape,
                                            const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g,
                                            const dnnl::engine& engine, std::span<const ConvPostOp> postOps) {
  const Windows w = *windows(kind, g);
  bool winograd = false;
  if (kind == Kind::Forward) {
    const View lhs = view(lhsShape, at.lhsSpec), out = view(outShape, at.outSpec);
    winograd = winogradPays(lhs.sizes, out.sizes[1], spatial(out.sizes), g.k, w, g.featureGroups);
  } else if (kind == Kind::FilterGradient) {
    const View src = view(lhsShape, swapRoles(at.lhsSpec)), diffDst = view(rhsShape, swapRoles(at.rhsSpec));
    const View diffWei = view(outShape, swapRoles(at.outSpec));
    winograd = winogradPays(src.sizes, diffDst.sizes[1], spatial(diffDst.sizes), spatial(diffWei.sizes), w, 1);
  }
  if (winograd) {
    try {
      return buildWithAlgorithm(kind, lhsShape, rhsShape, outShape, at, g, engine, postOps,
                                dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
      // Not implemented for this problem here (the CPU's ISA, a post-op): the direct kernels take it.
    }
  }
  return buildWithAlgorithm(kind, lhsShape, rhsShape, outShape, at, g, engine, postOps,
                            dnnl::algorithm::convolution_direct);
}

std::shared_ptr<const Problem> problemFor(Kind kind, const Shape& lhsShape, const Shape& rhsShape,
                                          const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g,
                                          std::span<const ConvPostOp> postOps) {
  std::vector<int64_t> key{static_cast<int64_t>(kind), g.featureGroups, envOptions().convWinograd ? 1 : 0};
  // The post-op chain is part of the problem: its kinds and operands' layouts (not their data).
  key.push_back(static_cast<int64_t>(postOps.size()));
  for (const ConvPostOp& op : postOps) key.push_back(static_cast<int64_t>(op.kind) * 16 + static_cast<int64_t>(op.operand));
  for (const Shape* s : {&lhsShape, &rhsShape, &outShape}) {
    key.push_back(s->rank());
    for (int d = 0; d < s->rank(); ++d) key.push_back((*s)[d]);
  }
  for (const auto* v : {&at.lhsSpec, &at.rhsSpec, &at.outSpec, &at.windowStrides, &at.paddingLo, &at.paddingHi,
                        &at.lhsDilation, &at.rhsDilation})
    key.insert(key.end(), v->begin(), v->end());
  static OneDnnCache<std::vector<int64_t>, Problem> cache;
  return cache.get(key,
                   [&] { return buildProblem(kind, lhsShape, rhsShape, outShape, at, g, oneDnnEngine(), postOps); });
}

// Memory the calling thread keeps between convolutions: fresh pages at every call would cost a fault per page.
struct Buffers {
  struct Slot {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  std::vector<Slot> slots;
  void* get(int i, size_t bytes) {
    if (slots.size() <= static_cast<size_t>(i)) slots.resize(static_cast<size_t>(i) + 1);
    Slot& s = slots[static_cast<size_t>(i)];
    if (s.bytes < bytes) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      s.data.reset(std::aligned_alloc(64, rounded));
      if (!s.data) throw std::bad_alloc();
      s.bytes = rounded;
    }
    return s.data.get();
  }
};

// W'[(g,) c, o, j] = w[(g,) o, c, k-1-j]: rhs read through its spec, flipped in every spatial dim.
void flipWeights(const float* rhs, const Shape& rhsShape, const ir::ConvAttrs& at, const ConvGeometry& g,
                 float* dst) {
  const View w = view(rhsShape, at.rhsSpec);  // [O, I, k...]
  const size_t ns = g.k.size();
  const int64_t groups = g.featureGroups, og = g.o / groups, ig = g.i, kn = g.kSize();
  std::vector<int64_t> pos(ns);
  for (int64_t grp = 0; grp < groups; ++grp)
    for (int64_t c = 0; c < ig; ++c)
      for (int64_t o = 0; o < og; ++o) {
        const int64_t base = (grp * og + o) * w.strides[0] + c * w.strides[1];
        float* row = dst + ((grp * ig + c) * og + o) * kn;
        std::fill(pos.begin(), pos.end(), 0);
        for (int64_t e = 0; e < kn; ++e) {
          int64_t src = base;
          for (size_t d = 0; d < ns; ++d) src += (g.k[d] - 1 - pos[d]) * w.strides[d + 2];
          row[e] = rhs[src];
          for (size_t d = ns; d-- > 0;) {
            if (++pos[d] < g.k[d]) break;
            pos[d] = 0;
          }
        }
      }
}

}  // namespace

const char* oneDnnConvolutionKind(const ConvGeometry& g) {
  switch (chooseKind(g)) {
    case Kind::Forward: return "forward";
    case Kind::DataGradient: return "data_gradient";
    case Kind::FilterGradient: return "filter_gradient";
    case Kind::None: break;
  }
  return "";
}

std::string oneDnnConvolutionImplementation(const Shape& lhsShape, const Shape& rhsShape, const Shape& outShape,
                                            const ir::ConvAttrs& at, const ConvGeometry& g,
                                            std::span<const ConvPostOp> postOps) {
  const Kind kind = chooseKind(g);
  if (kind == Kind::None || (!postOps.empty() && kind != Kind::Forward)) return "";
  try {
    return problemFor(kind, lhsShape, rhsShape, outShape, at, g, postOps)->implementation;
  } catch (const dnnl::error&) {
    return "";
  }
}

bool oneDnnTakesPostOps(const Shape& lhsShape, const Shape& rhsShape, const Shape& outShape, const ir::ConvAttrs& at,
                        const ConvGeometry& g, std::span<const ConvPostOp> postOps) {
  const std::string chained = oneDnnConvolutionImplementation(lhsShape, rhsShape, outShape, at, g, postOps);
  if (chained.empty()) return false;
  // Winograd takes no binary post-op: where the bare convolution runs it, the chain on the direct kernels costs
  // more than a pass of its own over the result (ResNet-18's residual gradients at batch 64: 25 ms a layer
  // chained, about 12 + 2 apart).
  const auto winograd = [](const std::string& impl) { return impl.find("wino") != std::string::npos; };
  return winograd(chained) || !winograd(oneDnnConvolutionImplementation(lhsShape, rhsShape, outShape, at, g, {}));
}

bool oneDnnConvolution(const float* lhs, const Shape& lhsShape, const float* rhs, const Shape& rhsShape, float* out,
                       const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g) {
  return oneDnnConvolution(lhs, lhsShape, rhs, rhsShape, out, outShape, at, g, {});
}

bool oneDnnConvolution(const float* lhs, const Shape& lhsShape, const float* rhs, const Shape& rhsShape, float* out,
                       const Shape& outShape, const ir::ConvAttrs& at, const ConvGeometry& g,
                       std::span<const ConvPostOp> postOps) {
  const Kind kind = chooseKind(g);
  if (kind == Kind::None || (!postOps.empty() && kind != Kind::Forward)) return false;
  try {
    auto problem = problemFor(kind, lhsShape, rhsShape, outShape, at, g, postOps);
    const dnnl::engine& engine = oneDnnEngine();
    thread_local Buffers buffers;
    useOneDnnThreads();
    dnnl::stream stream(engine);
    std::vector<const void*> operands{lhs, rhs, nullptr, nullptr};
    for (const ConvPostOp& op : postOps) operands.push_back(op.data);
    if (kind == Kind::DataGradient) {
      auto* fl = static_cast<float*>(buffers.get(3, static_cast<size_t>(g.c * g.o / g.featureGroups * g.kSize()) * 4));
      flipWeights(rhs, rhsShape, at, g, fl);
      operands[2] = fl;
    }
    std::unordered_map<int, dnnl::memory> args;
    int slot = 0;
    for (const Arg& a : problem->inputs) {
      dnnl::memory user(a.user, engine, const_cast<void*>(operands[static_cast<size_t>(a.operand)]));
      if (!a.reorder) {
        args.emplace(a.id, user);
        continue;
      }
      // Slots 2-4 hold the result, the flipped weights and the scratchpad.
      dnnl::memory inner(a.inner, engine, buffers.get(slot < 2 ? slot : slot + 3, a.inner.get_size()));
      ++slot;
      a.reorder->execute(stream, user, inner);
      args.emplace(a.id, inner);
    }
    const Arg& o = problem->output;
    dnnl::memory user(o.user, engine, out);
    dnnl::memory result = o.reorder ? dnnl::memory(o.inner, engine, buffers.get(2, o.inner.get_size())) : user;
    args.emplace(o.id, result);
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 dnnl::memory(problem->scratchpad, engine,
                              buffers.get(4, std::max<size_t>(problem->scratchpad.get_size(), 64))));
    problem->prim.execute(stream, args);
    if (o.reorder) o.reorder->execute(stream, result, user);
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace tsr::ops
