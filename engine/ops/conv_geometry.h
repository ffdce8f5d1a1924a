#pragma once
// conv_general_dilated's problem in canonical terms (lhs [N, C, in...], rhs [O, I, k...], out [N / batch
// groups, O, out...]), read through the attrs' dimension specs; shared by the op's rules and its kernels.
#include <cstdint>
#include <vector>

#include "engine/core/shape.h"
#include "engine/ir/attrs.h"

namespace tsr::ops {

struct ConvGeometry {
  int64_t n = 0, c = 0, o = 0, i = 0;
  int64_t featureGroups = 1, batchGroups = 1;
  std::vector<int64_t> in, k, out, stride, lo, hi, lhsDil, rhsDil;  // per spatial dim

  static int64_t product(const std::vector<int64_t>& v) {
    int64_t p = 1;
    for (int64_t x : v) p *= x;
    return p;
  }
  int64_t inSize() const { return product(in); }
  int64_t kSize() const { return product(k); }
  int64_t outSize() const { return product(out); }
};

// Output size of one spatial dim (XLA's window arithmetic): the lhs dilated, then padded (negative crops); the
// window dilated; 0 when the window does not fit.
inline int64_t convOutputSize(int64_t in, int64_t k, int64_t stride, int64_t lo, int64_t hi, int64_t lhsDil,
                              int64_t rhsDil) {
  const int64_t padded = (in == 0 ? 0 : (in - 1) * lhsDil + 1) + lo + hi;
  const int64_t window = k == 0 ? 0 : (k - 1) * rhsDil + 1;
  if (padded < window) return 0;
  return (padded - window) / stride + 1;
}

// The attrs must have passed the op's infer checks (specs are permutations, per-dim lists complete).
inline ConvGeometry convGeometry(const Shape& lhs, const Shape& rhs, const ir::ConvAttrs& at) {
  ConvGeometry g;
  g.n = lhs[static_cast<int>(at.lhsSpec[0])];
  g.c = lhs[static_cast<int>(at.lhsSpec[1])];
  g.o = rhs[static_cast<int>(at.rhsSpec[0])];
  g.i = rhs[static_cast<int>(at.rhsSpec[1])];
  g.featureGroups = at.featureGroupCount;
  g.batchGroups = at.batchGroupCount;
  for (size_t d = 0; d + 2 < at.lhsSpec.size(); ++d) {
    g.in.push_back(lhs[static_cast<int>(at.lhsSpec[d + 2])]);
    g.k.push_back(rhs[static_cast<int>(at.rhsSpec[d + 2])]);
    g.stride.push_back(at.windowStrides[d]);
    g.lo.push_back(at.paddingLo[d]);
    g.hi.push_back(at.paddingHi[d]);
    g.lhsDil.push_back(at.lhsDilation[d]);
    g.rhsDil.push_back(at.rhsDilation[d]);
    g.out.push_back(convOutputSize(g.in[d], g.k[d], g.stride[d], g.lo[d], g.hi[d], g.lhsDil[d], g.rhsDil[d]));
  }
  return g;
}

}  // namespace tsr::ops
