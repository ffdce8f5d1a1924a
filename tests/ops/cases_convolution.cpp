// conv_general_dilated cases: 1, 2 and 3 spatial dims; strides; explicit, asymmetric and negative padding; lhs
// and rhs dilation; feature groups (grouped and depthwise) and batch groups; NCHW and NHWC/HWIO layouts; in
// f32 (oneDNN), f64 (im2col) and bf16 (widened). Every spec must be valid: a rejected one fails the suite. The reference is a direct loop over output elements and
// window positions in double, written from XLA's definition of the op.
#include <fmt/format.h>

#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

struct ConvSpec {
  std::string name;
  Shape lhs, rhs;
  ir::ConvAttrs attrs;
};

ir::ConvAttrs convAttrs(int ns, ir::Ints strides = {}, ir::Ints lo = {}, ir::Ints hi = {}, ir::Ints lhsDil = {},
                        ir::Ints rhsDil = {}, int64_t fgc = 1, int64_t bgc = 1) {
  auto orOnes = [&](ir::Ints v, int64_t fill) { return v.empty() ? ir::Ints(static_cast<size_t>(ns), fill) : v; };
  ir::ConvAttrs a;
  a.windowStrides = orOnes(std::move(strides), 1);
  a.paddingLo = orOnes(std::move(lo), 0);
  a.paddingHi = orOnes(std::move(hi), 0);
  a.lhsDilation = orOnes(std::move(lhsDil), 1);
  a.rhsDilation = orOnes(std::move(rhsDil), 1);
  a.featureGroupCount = fgc;
  a.batchGroupCount = bgc;
  for (int d = 0; d < ns + 2; ++d) a.lhsSpec.push_back(d);
  a.rhsSpec = a.outSpec = a.lhsSpec;
  return a;
}

// NHWC lhs and out, HWIO rhs (2 spatial dims).
ir::ConvAttrs nhwc(ir::ConvAttrs a) {
  a.lhsSpec = {0, 3, 1, 2};
  a.rhsSpec = {3, 2, 0, 1};
  a.outSpec = {0, 3, 1, 2};
  return a;
}

// Batch and feature roles swapped in every operand (how the rhs cotangent reads x and the cotangent).
ir::ConvAttrs swapped(ir::ConvAttrs a) {
  for (auto* spec : {&a.lhsSpec, &a.rhsSpec, &a.outSpec}) std::swap((*spec)[0], (*spec)[1]);
  return a;
}

std::vector<ConvSpec> convSpecs() {
  return {
      {"1d valid", {2, 3, 7}, {4, 3, 3}, convAttrs(1)},
      {"1d stride 2, pad (2,1), rhs dilation 2", {2, 2, 9}, {3, 2, 3}, convAttrs(1, {2}, {2}, {1}, {}, {2})},
      {"2d valid", {2, 3, 6, 5}, {4, 3, 3, 2}, convAttrs(2)},
      {"2d stride 2, pad lo (1,0) hi (1,1)", {2, 3, 6, 5}, {4, 3, 3, 3}, convAttrs(2, {2, 2}, {1, 0}, {1, 1})},
      {"2d stride (1,3), floor of the last window", {1, 2, 7, 8}, {2, 2, 2, 2}, convAttrs(2, {1, 3}, {0, 0}, {0, 0})},
      {"2d strides (3,4), the last window ends before the input", {1, 2, 9, 10}, {3, 2, 2, 3},
       convAttrs(2, {3, 4}, {0, 1}, {0, 0})},
      {"2d rhs dilation (2,1)", {2, 2, 8, 6}, {3, 2, 3, 2}, convAttrs(2, {}, {1, 1}, {1, 1}, {}, {2, 1})},
      {"2d lhs dilation 2 (transposed conv)", {1, 2, 4, 3}, {3, 2, 3, 3}, convAttrs(2, {}, {2, 2}, {2, 2}, {2, 2})},
      {"2d lhs dilation (2,3), stride 2", {2, 2, 3, 3}, {2, 2, 2, 3}, convAttrs(2, {2, 1}, {1, 0}, {0, 2}, {2, 3})},
      {"2d negative padding", {1, 2, 6, 6}, {2, 2, 2, 2}, convAttrs(2, {}, {-1, 1}, {0, -2})},
      {"2d grouped (2 groups)", {2, 4, 5, 5}, {6, 2, 3, 3}, convAttrs(2, {}, {1, 1}, {1, 1}, {}, {}, 2)},
      {"2d depthwise (3 groups, multiplier 2)", {2, 3, 5, 4}, {6, 1, 3, 3}, convAttrs(2, {}, {1, 1}, {1, 1}, {}, {}, 3)},
      {"2d batch groups (2)", {4, 3, 5, 5}, {4, 3, 2, 2}, convAttrs(2, {}, {}, {}, {}, {}, 1, 2)},
      {"2d batch groups (3), stride 2", {3, 2, 6, 5}, {6, 2, 2, 3}, convAttrs(2, {2, 1}, {0, 1}, {1, 0}, {}, {}, 1, 3)},
      {"2d NHWC/HWIO", {2, 6, 5, 3}, {3, 3, 3, 4}, nhwc(convAttrs(2, {2, 1}, {1, 1}, {1, 1}))},
      {"2d NHWC/HWIO grouped", {2, 5, 5, 4}, {3, 3, 2, 6}, nhwc(convAttrs(2, {}, {1, 1}, {1, 1}, {}, {}, 2))},
      {"3d", {1, 2, 4, 5, 3}, {2, 2, 2, 3, 2}, convAttrs(3, {1, 2, 1}, {0, 1, 1}, {1, 1, 0})},
      {"3d rhs dilation, grouped", {2, 4, 5, 4, 4}, {4, 2, 2, 2, 2}, convAttrs(3, {}, {}, {}, {}, {2, 1, 2}, 2)},
      {"2d larger 8->16 channels 12x12", {2, 8, 12, 12}, {16, 8, 3, 3}, convAttrs(2, {}, {1, 1}, {1, 1})},
      // Large enough for Winograd's F(4x4, 3x3) (TESSERA_CONV_ALGORITHM=auto on AVX-512): the forward and the
      // filter gradient's reading of it.
      {"2d 3x3 stride 1, 32->32 channels 8x8, batch 8 (Winograd)", {8, 8, 8, 32}, {3, 3, 32, 32},
       nhwc(convAttrs(2, {}, {1, 1}, {1, 1}))},
      {"2d filter-gradient shape of the Winograd layer", {8, 32, 8, 8}, {8, 32, 8, 8},
       swapped(convAttrs(2, {}, {1, 1}, {1, 1}))},
      // The shapes of the gradients the vjp produces, which oneDNN runs as backward-data and backward-weights.
      {"2d NHWC transposed, lhs dilation 2, pad (1,2), grouped", {2, 4, 3, 4}, {3, 3, 2, 6},
       nhwc(convAttrs(2, {}, {1, 2}, {2, 1}, {2, 2}, {}, 2))},
      {"2d transposed, lhs dilation (2,3), rhs dilation 2", {1, 3, 4, 3}, {2, 3, 2, 2},
       convAttrs(2, {}, {1, 2}, {2, 0}, {2, 3}, {2, 2})},
      {"2d filter-gradient shape: 10x9 window, 5x4 out", {2, 3, 12, 11}, {4, 3, 10, 9}, convAttrs(2, {}, {1, 1}, {1, 1})},
      {"2d filter-gradient shape: stride 2, rhs dilation 2, roles swapped", {2, 3, 13, 13}, {2, 4, 5, 5},
       swapped(convAttrs(2, {2, 2}, {1, 1}, {1, 1}, {}, {2, 2}))},
  };
}

int64_t outputSize(int64_t in, int64_t k, int64_t s, int64_t lo, int64_t hi, int64_t ld, int64_t rd) {
  const int64_t padded = (in - 1) * ld + 1 + lo + hi, window = (k - 1) * rd + 1;
  return padded < window ? 0 : (padded - window) / s + 1;
}

HostTensor naiveConv(const HostTensor& l, const HostTensor& r, const ir::ConvAttrs& at) {
  const Shape& ls = l.aval.shape;
  const Shape& rs = r.aval.shape;
  const size_t ns = at.windowStrides.size();
  auto L = [&](size_t role) { return ls[static_cast<int>(at.lhsSpec[role])]; };
  auto R = [&](size_t role) { return rs[static_cast<int>(at.rhsSpec[role])]; };
  const int64_t n = L(0), o = R(0), i = R(1), fgc = at.featureGroupCount, bgc = at.batchGroupCount;
  std::vector<int64_t> outDims(ns + 2), kDims;
  outDims[static_cast<size_t>(at.outSpec[0])] = n / bgc;
  outDims[static_cast<size_t>(at.outSpec[1])] = o;
  for (size_t d = 0; d < ns; ++d) {
    outDims[static_cast<size_t>(at.outSpec[d + 2])] = outputSize(L(d + 2), R(d + 2), at.windowStrides[d], at.paddingLo[d],
                                                                 at.paddingHi[d], at.lhsDilation[d], at.rhsDilation[d]);
    kDims.push_back(R(d + 2));
  }
  const Shape outShape(outDims), kShape(kDims);
  HostTensor out = HostTensor::zeros(Aval{outShape, l.aval.dtype});
  std::vector<int64_t> li(ns + 2), ri(ns + 2);
  for (int64_t e = 0; e < out.numel(); ++e) {
    std::vector<int64_t> oi = unravel(e, outShape);
    const int64_t on = oi[static_cast<size_t>(at.outSpec[0])], of = oi[static_cast<size_t>(at.outSpec[1])];
    // Feature groups: out feature of -> group of / (o / fgc), reading lhs features group * i + ii.
    // Batch groups: out feature of -> group of / (o / bgc), reading lhs example group * (n / bgc) + on.
    const int64_t fGroup = of / (o / fgc), bGroup = of / (o / bgc);
    double sum = 0;
    for (int64_t ii = 0; ii < i; ++ii) {
      for (int64_t kf = 0; kf < kShape.numel(); ++kf) {
        std::vector<int64_t> kk = unravel(kf, kShape);
        bool inside = true;
        for (size_t d = 0; d < ns && inside; ++d) {
          const int64_t x = oi[static_cast<size_t>(at.outSpec[d + 2])] * at.windowStrides[d] +
                            kk[d] * at.rhsDilation[d] - at.paddingLo[d];
          if (x < 0 || x % at.lhsDilation[d] != 0 || x / at.lhsDilation[d] >= L(d + 2)) inside = false;
          else li[static_cast<size_t>(at.lhsSpec[d + 2])] = x / at.lhsDilation[d];
          ri[static_cast<size_t>(at.rhsSpec[d + 2])] = kk[d];
        }
        if (!inside) continue;
        li[static_cast<size_t>(at.lhsSpec[0])] = bGroup * (n / bgc) + on;
        li[static_cast<size_t>(at.lhsSpec[1])] = fGroup * i + ii;
        ri[static_cast<size_t>(at.rhsSpec[0])] = of;
        ri[static_cast<size_t>(at.rhsSpec[1])] = ii;
        sum += l.get(ravel(li, ls)) * r.get(ravel(ri, rs));
      }
    }
    out.set(e, sum);
  }
  return out;
}

}  // namespace

void addConvolutionCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const ConvSpec& spec : convSpecs()) {
    for (DType t : {DType::F32, DType::F64, DType::BF16}) {
      Aval la{spec.lhs, t}, ra{spec.rhs, t};
      OpCase c;
      c.label = fmt::format("conv_general_dilated {} {} {}x{}", spec.name, dtypeName(t), spec.lhs.toString(),
                            spec.rhs.toString());
      c.op = ir::OpCode::ConvGeneralDilated;
      c.attrs = spec.attrs;
      c.inputs = {randomTensor(la, rng), randomTensor(ra, rng)};
      // Window sums of K products of magnitude <= 4: as dot_general's tolerances for a contraction of K.
      int64_t k = spec.rhs.numel() / spec.rhs[static_cast<int>(spec.attrs.rhsSpec[0])];
      double kk = static_cast<double>(k);
      if (t == DType::F32) c.rtol = 1e-5, c.atol = 2e-6 * kk;
      else if (t == DType::F64) c.rtol = 1e-12, c.atol = 1e-14 * kk;
      else c.rtol = 1e-2, c.atol = 2e-6 * kk;
      ir::ConvAttrs at = spec.attrs;
      c.reference = [at](const std::vector<HostTensor>& in) {
        return std::vector<HostTensor>{naiveConv(in[0], in[1], at)};
      };
      cases.push_back(std::move(c));
    }
  }
}

}  // namespace tsr::test
