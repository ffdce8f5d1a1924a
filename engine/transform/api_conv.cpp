// The convolution API: dimension-number strings and SAME/VALID padding resolved into conv_general_dilated's
// attrs (JAX's conv_dimension_numbers and padtype_to_pads).
#include <string>

#include <fmt/format.h>

#include "engine/ir/attrs.h"
#include "engine/transform/api.h"
#include "engine/transform/autocast.h"
#include "engine/transform/padding.h"
#include "engine/transform/trace.h"

namespace tsr {

using ir::OpCode;

namespace {

constexpr const char* kConv = "conv_general_dilated";

std::string defaultSpec(char a, char b, int rank) {
  std::string s{a, b};
  const char* spatial = "DHW";
  for (int d = 0; d < rank - 2; ++d) s += spatial[3 - (rank - 2) + d];
  return s;
}

// Spec strings to dim lists: [first letter's dim, second letter's dim, spatial dims in the rhs string's order].
ir::Ints specDims(const std::string& spec, char first, char second, const std::string& rhsSpatial,
                  const std::source_location& loc, const char* which, const Array& lhs, const Array& rhs) {
  ir::Ints dims;
  auto find = [&](char c) -> int64_t {
    auto pos = spec.find(c);
    if (pos == std::string::npos || spec.find(c, pos + 1) != std::string::npos)
      raiseAt(loc, makeError("{}: {} spec '{}' must name '{}' once ({} and {})", kConv, which, spec, c,
                             lhs.aval().toString(), rhs.aval().toString()));
    return static_cast<int64_t>(pos);
  };
  dims.push_back(find(first));
  dims.push_back(find(second));
  for (char c : rhsSpatial) dims.push_back(find(c));
  return dims;
}

}  // namespace

Array convGeneralDilated(const Array& lhs, const Array& rhs, Axes windowStrides, const ConvPadding& padding,
                         Axes lhsDilation, Axes rhsDilation, const ConvDimensionNumbers& dn,
                         int64_t featureGroupCount, int64_t batchGroupCount, std::source_location loc) {
  const int rank = lhs.rank();
  auto fail = [&](const std::string& what) {
    raiseAt(loc, makeError("{}: {} (lhs {}, rhs {})", kConv, what, lhs.aval().toString(), rhs.aval().toString()));
  };
  if (rank < 3 || rank > 5 || rhs.rank() != rank) fail("lhs and rhs must both have rank 3 to 5 (1 to 3 spatial dims)");
  const auto ns = static_cast<size_t>(rank - 2);
  std::string ls = dn.lhs.empty() ? defaultSpec('N', 'C', rank) : dn.lhs;
  std::string rs = dn.rhs.empty() ? defaultSpec('O', 'I', rank) : dn.rhs;
  std::string os = dn.out.empty() ? ls : dn.out;
  if (ls.size() != static_cast<size_t>(rank) || rs.size() != static_cast<size_t>(rank) || os.size() != static_cast<size_t>(rank))
    fail(fmt::format("dimension numbers '{}', '{}', '{}' must each have {} letters", ls, rs, os, rank));
  std::string rhsSpatial;
  for (char c : rs)
    if (c != 'O' && c != 'I') rhsSpatial += c;
  if (rhsSpatial.size() != ns) fail(fmt::format("rhs spec '{}' must name O, I and {} spatial dims", rs, ns));
  ir::ConvAttrs at;
  at.lhsSpec = specDims(ls, 'N', 'C', rhsSpatial, loc, "lhs", lhs, rhs);
  at.rhsSpec = specDims(rs, 'O', 'I', rhsSpatial, loc, "rhs", lhs, rhs);
  at.outSpec = specDims(os, 'N', 'C', rhsSpatial, loc, "out", lhs, rhs);
  auto ones = [&](Axes v) { return v.empty() ? Axes(ns, 1) : v; };
  at.windowStrides = ones(std::move(windowStrides));
  at.lhsDilation = ones(std::move(lhsDilation));
  at.rhsDilation = ones(std::move(rhsDilation));
  at.featureGroupCount = featureGroupCount;
  at.batchGroupCount = batchGroupCount;
  if (at.windowStrides.size() != ns || at.rhsDilation.size() != ns || at.lhsDilation.size() != ns)
    fail(fmt::format("window_strides, lhs_dilation and rhs_dilation need {} entries each", ns));
  std::vector<int64_t> in, extent;
  for (size_t d = 0; d < ns; ++d) {
    in.push_back(lhs.shape()[static_cast<int>(at.lhsSpec[d + 2])]);
    const int64_t k = rhs.shape()[static_cast<int>(at.rhsSpec[d + 2])];
    extent.push_back(k == 0 ? 0 : (k - 1) * at.rhsDilation[d] + 1);
  }
  auto pads = resolvePadding(padding, in, extent, at.windowStrides);
  if (!pads.ok()) fail(pads.error().message);
  for (auto [lo, hi] : *pads) {
    at.paddingLo.push_back(lo);
    at.paddingHi.push_back(hi);
  }
  // Under autocast the f32 operands are read in the compute dtype (convolutions take floats only).
  const Array l = autocastOperand(lhs, loc), r = autocastOperand(rhs, loc);
  DType t = promoteTypes(l.dtype(), r.dtype());
  return bind1(OpCode::ConvGeneralDilated, {astype(l, t, loc), astype(r, t, loc)}, at, loc);
}

Array conv(const Array& lhs, const Array& rhs, Axes windowStrides, const ConvPadding& padding,
           std::source_location loc) {
  return convGeneralDilated(lhs, rhs, std::move(windowStrides), padding, {}, {}, {}, 1, 1, loc);
}

}  // namespace tsr
