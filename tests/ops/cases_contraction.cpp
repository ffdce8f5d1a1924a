// dot_general cases: every layout the kernel treats differently (plain, transposed operands, batch dims first or
// not, attention-style, several contracting dims, size-1 and empty dims, odd and larger sizes), for every dtype
// the op's infer rule accepts. The reference is a naive multi-index loop in double.
#include <algorithm>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

struct DotSpec {
  std::string name;
  Shape lhs, rhs;
  ir::DotGeneralAttrs attrs;
};

ir::DotGeneralAttrs dims(ir::Ints lc, ir::Ints rc, ir::Ints lb = {}, ir::Ints rb = {}) {
  ir::DotGeneralAttrs a;
  a.lhsContracting = std::move(lc);
  a.rhsContracting = std::move(rc);
  a.lhsBatch = std::move(lb);
  a.rhsBatch = std::move(rb);
  return a;
}

std::vector<DotSpec> dotSpecs() {
  return {
      {"matmul", {4, 5}, {5, 3}, dims({1}, {0})},
      {"matrix-vector", {4, 5}, {5}, dims({1}, {0})},
      {"vector-matrix", {5}, {5, 3}, dims({0}, {0})},
      {"vector-vector", {5}, {5}, dims({0}, {0})},
      {"outer product", {4}, {3}, dims({}, {})},
      {"x @ W.T", {4, 5}, {3, 5}, dims({1}, {1})},
      {"W.T @ x (lhs contracting dim 0)", {5, 4}, {5, 3}, dims({0}, {0})},
      {"both transposed", {5, 4}, {3, 5}, dims({0}, {1})},
      {"several lhs free dims [B,T,C]x[C,D]", {2, 3, 5}, {5, 4}, dims({2}, {0})},
      {"batched, batch first", {2, 4, 5}, {2, 5, 3}, dims({2}, {1}, {0}, {0})},
      {"batched, lhs [M,B,K] rhs [K,B,N]", {4, 2, 5}, {5, 2, 3}, dims({2}, {0}, {1}, {1})},
      {"batched, lhs [K,B,M] transposed", {5, 2, 4}, {2, 5, 3}, dims({0}, {1}, {1}, {0})},
      {"batched, batch last [M,K,B]", {4, 5, 2}, {2, 5, 3}, dims({1}, {1}, {2}, {0})},
      {"attention scores [B,H,T,D]x[B,H,S,D]", {2, 3, 4, 6}, {2, 3, 5, 6}, dims({3}, {3}, {0, 1}, {0, 1})},
      {"attention values [B,H,T,S]x[B,H,S,D]", {2, 3, 4, 5}, {2, 3, 5, 6}, dims({3}, {2}, {0, 1}, {0, 1})},
      {"batch dims in swapped order", {3, 2, 4, 5}, {2, 3, 5, 6}, dims({3}, {2}, {1, 0}, {0, 1})},
      {"two contracting dims", {3, 4, 5}, {4, 5, 2}, dims({1, 2}, {0, 1})},
      {"two contracting dims, reversed order", {3, 4, 5}, {5, 4, 2}, dims({2, 1}, {0, 1})},
      {"rhs free dims split by contracting dim", {4, 5}, {3, 5, 2}, dims({1}, {1})},
      {"size-1 dims", {1, 5}, {5, 1}, dims({1}, {0})},
      {"size-1 batch and free dims", {1, 1, 3}, {1, 3, 1}, dims({2}, {1}, {0}, {0})},
      {"size-1 contracting dim", {4, 1}, {1, 3}, dims({1}, {0})},
      {"empty contraction (K = 0)", {3, 0}, {0, 2}, dims({1}, {0})},
      {"empty free dim", {0, 5}, {5, 3}, dims({1}, {0})},
      {"odd sizes 33x17x5", {33, 5}, {5, 17}, dims({1}, {0})},
      {"larger 64x96x80", {64, 80}, {80, 96}, dims({1}, {0})},
      {"larger x @ W.T", {64, 80}, {96, 80}, dims({1}, {1})},
  };
}

std::vector<int> freeDims(int rank, const ir::Ints& a, const ir::Ints& b) {
  std::vector<int> out;
  for (int d = 0; d < rank; ++d)
    if (std::find(a.begin(), a.end(), d) == a.end() && std::find(b.begin(), b.end(), d) == b.end()) out.push_back(d);
  return out;
}

// out[batch..., lhsFree..., rhsFree...] = sum over contracting indices of lhs * rhs.
HostTensor naiveDot(const HostTensor& l, const HostTensor& r, const ir::DotGeneralAttrs& at) {
  std::vector<int> lf = freeDims(l.aval.rank(), at.lhsBatch, at.lhsContracting);
  std::vector<int> rf = freeDims(r.aval.rank(), at.rhsBatch, at.rhsContracting);
  std::vector<int64_t> outDims, kDims;
  for (int64_t d : at.lhsBatch) outDims.push_back(l.aval.shape[static_cast<int>(d)]);
  for (int d : lf) outDims.push_back(l.aval.shape[d]);
  for (int d : rf) outDims.push_back(r.aval.shape[d]);
  for (int64_t d : at.lhsContracting) kDims.push_back(l.aval.shape[static_cast<int>(d)]);
  Shape outShape(outDims), kShape(kDims);
  HostTensor out = HostTensor::zeros(Aval{outShape, l.aval.dtype});
  const size_t nb = at.lhsBatch.size();
  std::vector<int64_t> li(static_cast<size_t>(l.aval.rank())), ri(static_cast<size_t>(r.aval.rank()));
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> oi = unravel(o, outShape);
    for (size_t i = 0; i < nb; ++i) {
      li[static_cast<size_t>(at.lhsBatch[i])] = oi[i];
      ri[static_cast<size_t>(at.rhsBatch[i])] = oi[i];
    }
    for (size_t j = 0; j < lf.size(); ++j) li[static_cast<size_t>(lf[j])] = oi[nb + j];
    for (size_t j = 0; j < rf.size(); ++j) ri[static_cast<size_t>(rf[j])] = oi[nb + lf.size() + j];
    double sum = 0;
    for (int64_t k = 0; k < kShape.numel(); ++k) {
      std::vector<int64_t> ki = unravel(k, kShape);
      for (size_t i = 0; i < ki.size(); ++i) {
        li[static_cast<size_t>(at.lhsContracting[i])] = ki[i];
        ri[static_cast<size_t>(at.rhsContracting[i])] = ki[i];
      }
      sum += l.get(ravel(li, l.aval.shape)) * r.get(ravel(ri, r.aval.shape));
    }
    out.set(o, sum);  // integers wrap as the result type would (u8 sums of 80 products exceed 255)
  }
  return out;
}

// Inputs lie in [-2, 2], so each product is at most 4 in magnitude. Accumulating K of them in f32 errs by at
// most about K * eps32 * 4K in the worst case and far less in practice; atol = 2e-6 * K covers K up to ~100
// with margin. bf16/f16 results are rounded once from an f32 sum, so they may differ from the rounded double
// reference by one ulp: 2^-7 relative for bf16, 2^-10 for f16.
void dotTolerance(DType t, int64_t k, double& rtol, double& atol) {
  double kk = static_cast<double>(std::max<int64_t>(k, 1));
  switch (t) {
    case DType::F32: rtol = 1e-5; atol = 2e-6 * kk; break;
    case DType::F64: rtol = 1e-12; atol = 1e-14 * kk; break;
    case DType::BF16: rtol = 1e-2; atol = 2e-6 * kk; break;
    case DType::F16: rtol = 2e-3; atol = 2e-6 * kk; break;
    default: rtol = 0; atol = 0; break;
  }
}

bool accepts(ir::OpCode op, const std::vector<Aval>& operands, const ir::Attrs& attrs) {
  const ir::OpDef* def = ops::registry().find(op);
  return def && def->infer(operands, attrs).ok();
}

}  // namespace

void addContractionCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const DotSpec& spec : dotSpecs()) {
    for (DType t : allDTypes()) {
      Aval la{spec.lhs, t}, ra{spec.rhs, t};
      if (!accepts(ir::OpCode::DotGeneral, {la, ra}, spec.attrs)) continue;
      OpCase c;
      c.label = fmt::format("dot_general {} {} {}x{}", spec.name, dtypeName(t), spec.lhs.toString(),
                            spec.rhs.toString());
      c.op = ir::OpCode::DotGeneral;
      c.attrs = spec.attrs;
      c.inputs = {randomTensor(la, rng), randomTensor(ra, rng)};
      int64_t k = 1;
      for (int64_t d : spec.attrs.lhsContracting) k *= spec.lhs[static_cast<int>(d)];
      dotTolerance(t, k, c.rtol, c.atol);
      ir::DotGeneralAttrs at = spec.attrs;
      c.reference = [at](const std::vector<HostTensor>& in) {
        return std::vector<HostTensor>{naiveDot(in[0], in[1], at)};
      };
      cases.push_back(std::move(c));
    }
  }
}

}  // namespace tsr::test
