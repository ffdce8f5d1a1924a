// conv_general_dilated beyond the conformance suite (values, gradients and vmap run there over every case):
// its errors name the op and the shapes and never abort, the Array API resolves SAME/VALID padding and
// dimension-number strings as JAX does, and the shard rule splits only the batch (and, ungrouped, the
// out features).
#include "tests/check.h"

#include <cmath>
#include <cstdlib>
#include <set>

#include <dnnl.hpp>

#include "engine/core/env_options.h"
#include "engine/ops/conv_geometry.h"
#include "engine/ops/conv_onednn.h"
#include "engine/ops/registry.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

using namespace tsr;

namespace {

Aval f32(std::initializer_list<int64_t> d) { return Aval{Shape(d), DType::F32}; }

ir::ConvAttrs nchw2d() {
  ir::ConvAttrs a;
  a.windowStrides = {1, 1};
  a.paddingLo = a.paddingHi = {0, 0};
  a.lhsDilation = a.rhsDilation = {1, 1};
  a.lhsSpec = a.rhsSpec = a.outSpec = {0, 1, 2, 3};
  return a;
}

std::string inferError(std::vector<Aval> in, const ir::ConvAttrs& at) {
  const ir::OpDef& def = ops::registry().get(ir::OpCode::ConvGeneralDilated);
  auto r = ir::inferSafely(def, in, at);
  return r.ok() ? "" : r.error().message;
}

void requireMentions(const std::string& msg, std::initializer_list<const char*> words) {
  REQUIRE_MESSAGE(!msg.empty(), "expected an error");
  for (const char* w : words) REQUIRE_MESSAGE(msg.find(w) != std::string::npos, "'" << w << "' missing from: " << msg);
}

Array zeros(std::initializer_list<int64_t> d) { return Array::zeros(Shape(d), DType::F32); }

}  // namespace

TEST_CASE("inferNamesTheOpAndShapes") {
  ir::ConvAttrs a = nchw2d();
  requireMentions(inferError({f32({1, 3, 5, 5}), f32({4, 2, 3, 3})}, a),
                  {"conv_general_dilated", "f32[1,3,5,5]", "f32[4,2,3,3]", "in-features"});
  requireMentions(inferError({f32({1, 3, 5}), f32({4, 3, 3, 3})}, a), {"conv_general_dilated", "rank"});
  ir::ConvAttrs badSpec = a;
  badSpec.lhsSpec = {0, 1, 1, 3};
  requireMentions(inferError({f32({1, 3, 5, 5}), f32({4, 3, 3, 3})}, badSpec), {"lhs_spec", "permutation"});
  ir::ConvAttrs stride0 = a;
  stride0.windowStrides = {1, 0};
  requireMentions(inferError({f32({1, 3, 5, 5}), f32({4, 3, 3, 3})}, stride0), {"window_strides"});
  ir::ConvAttrs groups = a;
  groups.featureGroupCount = 2;
  requireMentions(inferError({f32({1, 4, 5, 5}), f32({3, 2, 3, 3})}, groups), {"feature_group_count", "(3)"});
  ir::ConvAttrs both = a;
  both.featureGroupCount = both.batchGroupCount = 2;
  requireMentions(inferError({f32({2, 4, 5, 5}), f32({4, 2, 3, 3})}, both), {"at most one"});
  ir::ConvAttrs batchGroups = a;
  batchGroups.batchGroupCount = 2;
  requireMentions(inferError({f32({3, 3, 5, 5}), f32({4, 3, 3, 3})}, batchGroups), {"lhs batch (3)", "batch_group_count"});
  requireMentions(inferError({f32({1, 3, 5, 5}), Aval{Shape({4, 3, 3, 3}), DType::I32}}, a), {"dtypes"});
}

TEST_CASE("outputShapeFollowsWindowArithmetic") {
  ir::ConvAttrs a = nchw2d();
  a.windowStrides = {2, 3};
  a.paddingLo = {1, -1};
  a.paddingHi = {2, 0};
  a.lhsDilation = {2, 1};
  a.rhsDilation = {1, 2};
  const ir::OpDef& def = ops::registry().get(ir::OpCode::ConvGeneralDilated);
  auto r = ir::inferSafely(def, std::vector<Aval>{f32({2, 3, 5, 9}), f32({4, 3, 3, 2})}, a);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  // H: dilated 9, padded 12, window 3, stride 2 -> 5. W: padded 8, window 3, stride 3 -> 2.
  TSR_COMPARE((*r)[0].shape, Shape({2, 4, 5, 2}));
}

TEST_CASE("apiResolvesSameValidAndLayouts") {
  Array x = zeros({2, 7, 6, 3});  // NHWC
  Array w = zeros({3, 3, 3, 8});  // HWIO
  ConvDimensionNumbers nhwc{"NHWC", "HWIO", "NHWC"};
  TSR_COMPARE(convGeneralDilated(x, w, {2, 2}, "SAME", {}, {}, nhwc).shape(), Shape({2, 4, 3, 8}));
  TSR_COMPARE(convGeneralDilated(x, w, {1, 1}, "VALID", {}, {}, nhwc).shape(), Shape({2, 5, 4, 8}));
  TSR_COMPARE(convGeneralDilated(x, w, {1, 1}, "SAME", {}, {2, 2}, nhwc).shape(), Shape({2, 7, 6, 8}));
  // 1-D and 3-D defaults (NCW/OIW, NCDHW/OIDHW).
  TSR_COMPARE(conv(zeros({1, 2, 9}), zeros({4, 2, 3}), {2}, "SAME").shape(), Shape({1, 4, 5}));
  TSR_COMPARE(conv(zeros({1, 2, 4, 5, 6}), zeros({3, 2, 2, 2, 2}), {1, 1, 1}, "VALID").shape(), Shape({1, 3, 3, 4, 5}));
  // SAME puts the odd unit of padding on the high side, as JAX: in 6, window 3, stride 2 -> pads (0, 1).
  Array y = convGeneralDilated(zeros({1, 1, 6}), zeros({1, 1, 3}), {2}, "SAME");
  TSR_COMPARE(y.shape(), Shape({1, 1, 3}));
}

TEST_CASE("apiErrorsAreExceptionsNamingTheOp") {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Exception& e) {
      return e.what();
    }
    return "";
  };
  requireMentions(message([] { conv(zeros({1, 3, 5, 5}), zeros({4, 3, 3, 3}), {1, 1}, "FULL"); }),
                  {"conv_general_dilated", "FULL", "f32[1,3,5,5]"});
  requireMentions(message([] { conv(zeros({1, 3, 5, 5}), zeros({4, 2, 3, 3}), {1, 1}, "VALID"); }),
                  {"conv_general_dilated", "f32[4,2,3,3]"});
  requireMentions(message([] {
                    convGeneralDilated(zeros({1, 5, 5, 3}), zeros({3, 3, 3, 4}), {1, 1}, "VALID", {}, {},
                                       {"NHWC", "HWIO", "NHQC"});
                  }),
                  {"out spec", "NHQC"});
}

TEST_CASE("shardRuleSplitsBatchAndUngroupedOutFeatures") {
  const ir::OpDef& def = ops::registry().get(ir::OpCode::ConvGeneralDilated);
  ir::ConvAttrs a = nchw2d();
  std::vector<Aval> in{f32({4, 3, 5, 5}), f32({8, 3, 3, 3})}, out{f32({4, 8, 3, 3})};
  auto r = def.shard(in, out, a);
  REQUIRE(r.ok());
  TSR_COMPARE(r->operandDims[0], (std::vector<int>{0, -1, -1, -1}));
  TSR_COMPARE(r->operandDims[1], (std::vector<int>{1, -1, -1, -1}));
  TSR_COMPARE(r->resultDims[0], (std::vector<int>{0, 1, -1, -1}));
  a.batchGroupCount = 2;
  std::vector<Aval> out2{f32({2, 8, 3, 3})};
  auto g = def.shard(in, out2, a);
  REQUIRE(g.ok());
  TSR_COMPARE(g->resultDims[0], (std::vector<int>{-1, -1, -1, -1}));
}

// A ResNet-style strided NHWC convolution's gradient graph holds the three convolutions training runs: each must
// reach its oneDNN primitive (the conformance suite checks the values of every route; this checks that the
// gradients do not fall back to im2col, which is several times slower).
TEST_CASE("trainingConvolutionsReachTheirOneDnnPrimitives") {
  auto step = [](const std::vector<Array>& in) {
    auto loss = [](const std::vector<Array>& p) {
      Array y = convGeneralDilated(p[0], p[1], {2, 2}, std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 1}}, {},
                                   {}, {"NHWC", "HWIO", "NHWC"});
      return std::vector<Array>{sum(y * y)};
    };
    VjpOutput v = vjp(loss, in);
    return v.pullback({onesLike(v.outputs[0])});
  };
  auto cg = makeGraph(step, {f32({4, 16, 16, 8}), f32({3, 3, 8, 16})});
  REQUIRE_MESSAGE(cg.ok(), cg.error().message);
  std::multiset<std::string> kinds;
  for (const ir::Node& n : cg->graph.nodes()) {
    if (n.op != ir::OpCode::ConvGeneralDilated) continue;
    const auto& at = std::get<ir::ConvAttrs>(n.attrs);
    ops::ConvGeometry g = ops::convGeometry(cg->graph.aval(n.operands[0]).shape, cg->graph.aval(n.operands[1]).shape, at);
    kinds.insert(ops::oneDnnConvolutionKind(g));
    // ... and oneDNN takes it (false would mean the fallback).
    const Shape& ls = cg->graph.aval(n.operands[0]).shape;
    const Shape& rs = cg->graph.aval(n.operands[1]).shape;
    const Shape& os = cg->graph.aval(n.results[0]).shape;
    std::vector<float> l(static_cast<size_t>(ls.numel()), 0.5f), r(static_cast<size_t>(rs.numel()), 0.25f),
        o(static_cast<size_t>(os.numel()), -1.0f);
    CHECK(ops::oneDnnConvolution(l.data(), ls, r.data(), rs, o.data(), os, at, g));
  }
  CHECK(kinds == std::multiset<std::string>{"forward", "data_gradient", "filter_gradient"});
}

namespace {

// A 3x3 convolution at stride 1 with padding 1, by a loop in double: y[b, o, p, q] = sum over a, i, j of
// l(a, b, p + i - 1, q + j - 1) * r(a, o, i, j) (a: in-channel, b: image), the operands read through accessors.
template <class L, class R>
std::vector<double> conv3x3(int64_t as, int64_t bs, int64_t os, int64_t h, int64_t w, L l, R r) {
  std::vector<double> y(static_cast<size_t>(bs * os * h * w), 0.0);
  for (int64_t b = 0; b < bs; ++b)
    for (int64_t o = 0; o < os; ++o)
      for (int64_t p = 0; p < h; ++p)
        for (int64_t q = 0; q < w; ++q) {
          double acc = 0;
          for (int64_t a = 0; a < as; ++a)
            for (int64_t i = 0; i < 3; ++i)
              for (int64_t j = 0; j < 3; ++j) {
                const int64_t yy = p + i - 1, xx = q + j - 1;
                if (yy >= 0 && yy < h && xx >= 0 && xx < w) acc += l(a, b, yy, xx) * r(a, o, i, j);
              }
          y[static_cast<size_t>(((b * os + o) * h + p) * w + q)] = acc;
        }
  return y;
}

std::vector<float> randomValues(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001 - 1000) / 1000.0f;
  }
  return v;
}

// The largest error against the reference, as a fraction of the reference's largest value; `at(e)` maps the
// reference's element e (in [b, o, p, q] order) to the result's index.
template <class At>
double relativeError(const std::vector<float>& got, const std::vector<double>& want, At at) {
  double err = 0, scale = 0;
  for (size_t e = 0; e < want.size(); ++e) {
    err = std::max(err, std::abs(got[at(e)] - want[e]));
    scale = std::max(scale, std::abs(want[e]));
  }
  return err / scale;
}

}  // namespace

// ResNet's stride-1 3x3 layers take Winograd's F(4x4, 3x3) where oneDNN has it (AVX-512), in the forward and
// in the filter gradient, within a few ulps of a double loop; TESSERA_CONV_ALGORITHM=direct takes the direct
// kernels. On other CPUs both settings run the direct kernels, to the same tolerance.
TEST_CASE("strideOneThreeByThreeConvolutionsTakeWinograd") {
  const int64_t n = 8, c = 32, o = 32, h = 8, w = 8;
  const bool avx512 = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  for (const std::string algorithm : {"auto", "direct"}) {
    setenv("TESSERA_CONV_ALGORITHM", algorithm.c_str(), 1);
    reloadEnvOptions();
    const bool wantWinograd = avx512 && algorithm == "auto";
    // Forward, NHWC/HWIO: x [n, h, w, c], k [3, 3, c, o] -> y [n, h, w, o].
    ir::ConvAttrs fwd = nchw2d();
    fwd.paddingLo = fwd.paddingHi = {1, 1};
    fwd.lhsSpec = {0, 3, 1, 2};
    fwd.rhsSpec = {3, 2, 0, 1};
    fwd.outSpec = {0, 3, 1, 2};
    const Shape xs{n, h, w, c}, ks{3, 3, c, o}, ys{n, h, w, o};
    std::vector<float> x = randomValues(xs.numel(), 1), k = randomValues(ks.numel(), 2);
    std::vector<float> y(static_cast<size_t>(ys.numel()), -1.0f);
    ops::ConvGeometry g = ops::convGeometry(xs, ks, fwd);
    REQUIRE(ops::oneDnnConvolution(x.data(), xs, k.data(), ks, y.data(), ys, fwd, g));
    const std::string fwdImpl = ops::oneDnnConvolutionImplementation(xs, ks, ys, fwd, g, {});
    CHECK_MESSAGE((fwdImpl.find("wino") != std::string::npos) == wantWinograd, algorithm << ": " << fwdImpl);
    auto xAt = [&](int64_t ch, int64_t img, int64_t yy, int64_t xx) {
      return double(x[static_cast<size_t>(((img * h + yy) * w + xx) * c + ch)]);
    };
    auto kAt = [&](int64_t ch, int64_t oc, int64_t i, int64_t j) {
      return double(k[static_cast<size_t>(((i * 3 + j) * c + ch) * o + oc)]);
    };
    const std::vector<double> yRef = conv3x3(c, n, o, h, w, xAt, kAt);
    const double fwdErr = relativeError(y, yRef, [&](size_t e) {
      const size_t q = e % w, p = e / w % h, oc = e / (w * h) % o, img = e / (w * h * o);
      return ((img * h + p) * w + q) * o + oc;
    });
    CHECK_MESSAGE(fwdErr < 1e-5, algorithm << " forward: " << fwdErr);

    // The filter gradient as the vjp writes it: x with batch and feature swapped ([c] images of [n] features),
    // the cotangent dy [n, h, w, o] as the window, the result [3, 3, c, o] (HWIO).
    ir::ConvAttrs fg = fwd;
    fg.lhsSpec = {3, 0, 1, 2};
    fg.rhsSpec = {3, 0, 1, 2};
    fg.outSpec = {2, 3, 0, 1};
    const Shape dys{n, h, w, o}, dks{3, 3, c, o};
    std::vector<float> dy = randomValues(dys.numel(), 3), dk(static_cast<size_t>(dks.numel()), -1.0f);
    ops::ConvGeometry fgg = ops::convGeometry(xs, dys, fg);
    REQUIRE(std::string(ops::oneDnnConvolutionKind(fgg)) == "filter_gradient");
    REQUIRE(ops::oneDnnConvolution(x.data(), xs, dy.data(), dys, dk.data(), dks, fg, fgg));
    const std::string fgImpl = ops::oneDnnConvolutionImplementation(xs, dys, dks, fg, fgg, {});
    CHECK_MESSAGE((fgImpl.find("wino") != std::string::npos) == wantWinograd, algorithm << ": " << fgImpl);
    // dk[i, j, ch, oc] = sum over img, p, q of x[img, p + i - 1, q + j - 1, ch] * dy[img, p, q, oc]: the loop
    // above with a = img, b = ch, "o" = oc and the 3x3 "window" as the output's spatial dims.
    std::vector<double> dkRef(static_cast<size_t>(dks.numel()), 0.0);
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t oc = 0; oc < o; ++oc)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 3; ++j) {
            double acc = 0;
            for (int64_t img = 0; img < n; ++img)
              for (int64_t p = 0; p < h; ++p)
                for (int64_t q = 0; q < w; ++q) {
                  const int64_t yy = p + i - 1, xx = q + j - 1;
                  if (yy >= 0 && yy < h && xx >= 0 && xx < w)
                    acc += xAt(ch, img, yy, xx) * double(dy[static_cast<size_t>(((img * h + p) * w + q) * o + oc)]);
                }
            dkRef[static_cast<size_t>(((i * 3 + j) * c + ch) * o + oc)] = acc;
          }
    const double fgErr = relativeError(dk, dkRef, [](size_t e) { return e; });
    CHECK_MESSAGE(fgErr < 1e-5, algorithm << " filter gradient: " << fgErr);
  }
  unsetenv("TESSERA_CONV_ALGORITHM");
  reloadEnvOptions();
}
