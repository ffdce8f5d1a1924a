// engine/core: dtype conversions against hand-computed values and the compiler's own _Float16, shapes, trees.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/core/bytes.h"
#include "engine/core/dtype.h"
#include "engine/core/result.h"
#include "engine/core/shape.h"
#include "engine/core/tree.h"

using namespace tsr;

namespace {
float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
Result<int> half(int x) {
  if (x % 2) return makeError("{} is odd", x);
  return x / 2;
}
Result<int> quarter(int x) {
  TSR_ASSIGN(int h, half(x));
  TSR_ASSIGN(int q, half(h));
  return q;
}
}  // namespace

// The one byte formatter: binary units, worked by hand at each boundary.
TEST_CASE("formatsBytesInBinaryUnits") {
  TSR_COMPARE(formatBytes(0), std::string("0 B"));
  TSR_COMPARE(formatBytes(1023), std::string("1023 B"));
  TSR_COMPARE(formatBytes(1024), std::string("1.0 KiB"));
  TSR_COMPARE(formatBytes(1536), std::string("1.5 KiB"));
  TSR_COMPARE(formatBytes(2 * 1024 * 1024), std::string("2.0 MiB"));
  TSR_COMPARE(formatBytes(int64_t(1) << 30), std::string("1.00 GiB"));
  TSR_COMPARE(formatBytes(int64_t(5) << 39), std::string("2560.00 GiB"));
}
TEST_CASE("bf16HandValues") {
  TSR_COMPARE(floatToBf16Bits(1.0f), uint16_t(0x3F80));
  TSR_COMPARE(floatToBf16Bits(-2.0f), uint16_t(0xC000));
  // 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81: ties go to the even one.
  TSR_COMPARE(floatToBf16Bits(1.00390625f), uint16_t(0x3F80));
  // 1 + 3*2^-8 lies halfway between 0x3F81 and 0x3F82: even is 0x3F82.
  TSR_COMPARE(floatToBf16Bits(1.01171875f), uint16_t(0x3F82));
  // Just above halfway rounds up.
  TSR_COMPARE(floatToBf16Bits(bitsToFloat(0x3F808001u)), uint16_t(0x3F81));
  TSR_COMPARE(floatToBf16Bits(std::numeric_limits<float>::infinity()), uint16_t(0x7F80));
  TSR_COMPARE(floatToBf16Bits(std::numeric_limits<float>::max()), uint16_t(0x7F80));  // rounds to inf
  REQUIRE(std::isnan(bf16BitsToFloat(floatToBf16Bits(std::nanf("")))));
  TSR_COMPARE(bf16BitsToFloat(0x4049), 3.140625f);
}

TEST_CASE("bf16RoundTripAllBits") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    TSR_COMPARE(floatToBf16Bits(f), uint16_t(b));
  }
}

TEST_CASE("bf16MatchesNearestByBruteForce") {
  // Independent reference: the nearest bf16 by distance in double, ties to the even bit pattern.
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);
  for (int i = 0; i < 20000; ++i) {
    float f = bitsToFloat(bits(rng));
    uint16_t lo = static_cast<uint16_t>(floatBits(f) >> 16), hi = static_cast<uint16_t>(lo + 1);
    double dlo = std::fabs(double(f) - bf16BitsToFloat(lo)), dhi = std::fabs(double(bf16BitsToFloat(hi)) - f);
    uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    TSR_COMPARE(floatToBf16Bits(f), want);
  }
}

// The arrays' conversions (16 lanes at a time, then a scalar tail) against the nearest bf16 by distance in double:
// every sign, NaNs (they stay NaN, quiet), infinities, subnormals and exact ties, at a length that leaves a tail.
TEST_CASE("bf16ArraysConvertAsTheNearestValue") {
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // every pattern, shuffled
  std::vector<bf16> halves(all.size());
  for (size_t i = 0; i < all.size(); ++i) halves[i] = bf16::fromBits(all[i]);
  std::vector<float> wide(all.size());
  widenBf16(halves.data(), wide.data(), static_cast<int64_t>(wide.size()));
  for (size_t i = 0; i < all.size(); ++i) TSR_COMPARE(floatBits(wide[i]), uint32_t{all[i]} << 16);

  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  std::vector<float> f(100003);
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t u = bits(rng);
    if (i % 7 == 0) u = (u & 0xFFFF0000u) | 0x8000u;  // an exact tie
    if (i % 11 == 0) u &= 0x807FFFFFu;                 // a subnormal
    if (i % 13 == 0) u |= 0x7F800000u;                 // inf or NaN
    f[i] = bitsToFloat(u);
  }
  std::vector<bf16> narrow(f.size());
  narrowToBf16(f.data(), narrow.data(), static_cast<int64_t>(f.size()));
  for (size_t i = 0; i < f.size(); ++i) {
    const uint16_t got = narrow[i].bits;
    if (std::isnan(f[i])) {
      REQUIRE(std::isnan(bf16BitsToFloat(got)));
      TSR_COMPARE(got & 0x40, 0x40);  // quiet
      continue;
    }
    const uint32_t u = floatBits(f[i]);
    const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
    const double dlo = std::fabs(double(f[i]) - bf16BitsToFloat(lo));
    const double dhi = std::isinf(bf16BitsToFloat(hi)) && !std::isinf(f[i])
                           ? std::ldexp(1.0, 128) - std::fabs(double(f[i]))  // past the largest: to infinity
                           : std::fabs(double(bf16BitsToFloat(hi)) - f[i]);
    const uint16_t want = (u & 0xFFFFu) == 0 ? lo : dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    TSR_COMPARE(got, want);
  }
}

TEST_CASE("f16HandValues") {
  TSR_COMPARE(floatToF16Bits(1.0f), uint16_t(0x3C00));
  TSR_COMPARE(floatToF16Bits(65504.0f), uint16_t(0x7BFF));
  TSR_COMPARE(floatToF16Bits(65519.0f), uint16_t(0x7BFF));
  TSR_COMPARE(floatToF16Bits(65520.0f), uint16_t(0x7C00));  // halfway to the next: to even = inf
  TSR_COMPARE(floatToF16Bits(std::ldexp(1.0f, -24)), uint16_t(0x0001));  // smallest subnormal
  TSR_COMPARE(floatToF16Bits(std::ldexp(1.0f, -25)), uint16_t(0x0000));  // tie: to even (zero)
  TSR_COMPARE(floatToF16Bits(std::ldexp(3.0f, -25)), uint16_t(0x0002));  // 1.5 units: tie to even (2)
  TSR_COMPARE(floatToF16Bits(-0.0f), uint16_t(0x8000));
  TSR_COMPARE(floatToF16Bits(1.0f / 3.0f), uint16_t(0x3555));
  TSR_COMPARE(f16BitsToFloat(0x3555), 0.333251953125f);
  REQUIRE(std::isnan(f16BitsToFloat(floatToF16Bits(std::nanf("")))));
}

TEST_CASE("f16RoundTripAllBits") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = f16BitsToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    TSR_COMPARE(floatToF16Bits(f), uint16_t(b));
  }
}

TEST_CASE("f16MatchesCompilerFloat16") {
#ifdef __FLT16_MAX__
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
  for (int i = 0; i < 200000; ++i) {
    float f = bitsToFloat(bits(rng));
    if (std::isnan(f)) continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t want;
    std::memcpy(&want, &h, 2);
    TSR_COMPARE(floatToF16Bits(f), want);
  }
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    float want = static_cast<float>(h);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(f16BitsToFloat(bits)));
      continue;
    }
    TSR_COMPARE(floatBits(f16BitsToFloat(bits)), floatBits(want));
  }
#else
  TSR_SKIP("this compiler has no _Float16");
#endif
}

TEST_CASE("dtypeNames") {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::U32,
                  DType::Bool}) {
    auto back = parseDType(dtypeName(t));
    REQUIRE(back.has_value());
    TSR_COMPARE(*back, t);
  }
  REQUIRE(!parseDType("f8").has_value());
  TSR_COMPARE(dtypeSize(DType::BF16), int64_t(2));
  REQUIRE((isFloating(DType::F16) && !isFloating(DType::I32) && isUnsigned(DType::U32) && !isSigned(DType::U8)));
}

TEST_CASE("shapes") {
  Shape s{8, 784};
  TSR_COMPARE(s.numel(), int64_t(8 * 784));
  TSR_COMPARE(s.toString(), std::string("[8,784]"));
  TSR_COMPARE((Aval{Shape{}, DType::BF16}).toString(), std::string("bf16[]"));
  TSR_COMPARE(Shape({2, 3, 4}).strides(), (std::vector<int64_t>{12, 4, 1}));
  TSR_COMPARE(normalizeAxis(-1, 3), 2);
  TSR_COMPARE(normalizeAxis(3, 3), -1);
}

TEST_CASE("results") {
  TSR_COMPARE(*quarter(8), 2);
  auto r = quarter(6);
  REQUIRE(!r.ok());
  TSR_COMPARE(r.error().message, std::string("3 is odd"));
}

TEST_CASE("treePathsAndUnflatten") {
  using T = TreeOf<int>;
  T blocks = T::list({T::dict({{"kernel", T(1)}, {"bias", T(2)}}), T::dict({{"kernel", T(3)}, {"bias", T(4)}})});
  T params = T::dict({{"blocks", blocks}, {"head", T(5)}});
  TSR_COMPARE(params.leaves(), (std::vector<int>{1, 2, 3, 4, 5}));
  TSR_COMPARE(params.paths(), (std::vector<std::string>{"blocks.0.kernel", "blocks.0.bias", "blocks.1.kernel",
                                                      "blocks.1.bias", "head"}));
  TSR_COMPARE(params.def().toString(), std::string("{blocks: [{kernel: *, bias: *}, {kernel: *, bias: *}], head: *}"));
  TSR_COMPARE(params.findPath("blocks.1.bias")->leaf(), 4);
  REQUIRE(params.findPath("blocks.2.bias") == nullptr);
  REQUIRE(params.findPath("nope") == nullptr);

  auto doubled = params.map([](const int& x) { return x * 2.0; });
  TSR_COMPARE(doubled.leaves(), (std::vector<double>{2, 4, 6, 8, 10}));
  auto named = params.mapWithPath([](const std::string& p, const int&) { return p; });
  TSR_COMPARE(named.findPath("blocks.0.bias")->leaf(), std::string("blocks.0.bias"));

  auto rebuilt = T::unflatten(params.def(), {10, 20, 30, 40, 50});
  REQUIRE(rebuilt.ok());
  TSR_COMPARE(rebuilt->findPath("blocks.1.kernel")->leaf(), 30);
  TSR_COMPARE(rebuilt->def(), params.def());
  auto bad = T::unflatten(params.def(), {1, 2});
  REQUIRE(!bad.ok());
  REQUIRE(bad.error().message.find("5 leaves") != std::string::npos);
}
