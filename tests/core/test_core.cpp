// engine/core: dtype conversions against hand-computed values and the compiler's own _Float16, shapes, trees.
#include <QtTest>

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

class TestCore : public QObject {
  Q_OBJECT
 private slots:
  // The one byte formatter: binary units, worked by hand at each boundary.
  void formatsBytesInBinaryUnits() {
    QCOMPARE(formatBytes(0), std::string("0 B"));
    QCOMPARE(formatBytes(1023), std::string("1023 B"));
    QCOMPARE(formatBytes(1024), std::string("1.0 KiB"));
    QCOMPARE(formatBytes(1536), std::string("1.5 KiB"));
    QCOMPARE(formatBytes(2 * 1024 * 1024), std::string("2.0 MiB"));
    QCOMPARE(formatBytes(int64_t(1) << 30), std::string("1.00 GiB"));
    QCOMPARE(formatBytes(int64_t(5) << 39), std::string("2560.00 GiB"));
  }
  void bf16HandValues() {
    QCOMPARE(floatToBf16Bits(1.0f), uint16_t(0x3F80));
    QCOMPARE(floatToBf16Bits(-2.0f), uint16_t(0xC000));
    // 1 + 2^-8 lies halfway between 0x3F80 and 0x3F81: ties go to the even one.
    QCOMPARE(floatToBf16Bits(1.00390625f), uint16_t(0x3F80));
    // 1 + 3*2^-8 lies halfway between 0x3F81 and 0x3F82: even is 0x3F82.
    QCOMPARE(floatToBf16Bits(1.01171875f), uint16_t(0x3F82));
    // Just above halfway rounds up.
    QCOMPARE(floatToBf16Bits(bitsToFloat(0x3F808001u)), uint16_t(0x3F81));
    QCOMPARE(floatToBf16Bits(std::numeric_limits<float>::infinity()), uint16_t(0x7F80));
    QCOMPARE(floatToBf16Bits(std::numeric_limits<float>::max()), uint16_t(0x7F80));  // rounds to inf
    QVERIFY(std::isnan(bf16BitsToFloat(floatToBf16Bits(std::nanf("")))));
    QCOMPARE(bf16BitsToFloat(0x4049), 3.140625f);
  }

  void bf16RoundTripAllBits() {
    for (uint32_t b = 0; b < 65536; ++b) {
      float f = bf16BitsToFloat(static_cast<uint16_t>(b));
      if (std::isnan(f)) continue;
      QCOMPARE(floatToBf16Bits(f), uint16_t(b));
    }
  }

  void bf16MatchesNearestByBruteForce() {
    // Independent reference: the nearest bf16 by distance in double, ties to the even bit pattern.
    std::mt19937 rng(7);
    std::uniform_int_distribution<uint32_t> bits(0, 0x7F7FFFFFu);
    for (int i = 0; i < 20000; ++i) {
      float f = bitsToFloat(bits(rng));
      uint16_t lo = static_cast<uint16_t>(floatBits(f) >> 16), hi = static_cast<uint16_t>(lo + 1);
      double dlo = std::fabs(double(f) - bf16BitsToFloat(lo)), dhi = std::fabs(double(bf16BitsToFloat(hi)) - f);
      uint16_t want = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
      QCOMPARE(floatToBf16Bits(f), want);
    }
  }

  void f16HandValues() {
    QCOMPARE(floatToF16Bits(1.0f), uint16_t(0x3C00));
    QCOMPARE(floatToF16Bits(65504.0f), uint16_t(0x7BFF));
    QCOMPARE(floatToF16Bits(65519.0f), uint16_t(0x7BFF));
    QCOMPARE(floatToF16Bits(65520.0f), uint16_t(0x7C00));  // halfway to the next: to even = inf
    QCOMPARE(floatToF16Bits(std::ldexp(1.0f, -24)), uint16_t(0x0001));  // smallest subnormal
    QCOMPARE(floatToF16Bits(std::ldexp(1.0f, -25)), uint16_t(0x0000));  // tie: to even (zero)
    QCOMPARE(floatToF16Bits(std::ldexp(3.0f, -25)), uint16_t(0x0002));  // 1.5 units: tie to even (2)
    QCOMPARE(floatToF16Bits(-0.0f), uint16_t(0x8000));
    QCOMPARE(floatToF16Bits(1.0f / 3.0f), uint16_t(0x3555));
    QCOMPARE(f16BitsToFloat(0x3555), 0.333251953125f);
    QVERIFY(std::isnan(f16BitsToFloat(floatToF16Bits(std::nanf("")))));
  }

  void f16RoundTripAllBits() {
    for (uint32_t b = 0; b < 65536; ++b) {
      float f = f16BitsToFloat(static_cast<uint16_t>(b));
      if (std::isnan(f)) continue;
      QCOMPARE(floatToF16Bits(f), uint16_t(b));
    }
  }

  void f16MatchesCompilerFloat16() {
#ifdef __FLT16_MAX__
    std::mt19937 rng(11);
    std::uniform_int_distribution<uint32_t> bits(0, 0xFFFFFFFFu);
    for (int i = 0; i < 200000; ++i) {
      float f = bitsToFloat(bits(rng));
      if (std::isnan(f)) continue;
      _Float16 h = static_cast<_Float16>(f);
      uint16_t want;
      std::memcpy(&want, &h, 2);
      QCOMPARE(floatToF16Bits(f), want);
    }
    for (uint32_t b = 0; b < 65536; ++b) {
      uint16_t bits = static_cast<uint16_t>(b);
      _Float16 h;
      std::memcpy(&h, &bits, 2);
      float want = static_cast<float>(h);
      if (std::isnan(want)) {
        QVERIFY(std::isnan(f16BitsToFloat(bits)));
        continue;
      }
      QCOMPARE(floatBits(f16BitsToFloat(bits)), floatBits(want));
    }
#else
    QSKIP("this compiler has no _Float16");
#endif
  }

  void dtypeNames() {
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8, DType::U32,
                    DType::Bool}) {
      auto back = parseDType(dtypeName(t));
      QVERIFY(back.has_value());
      QCOMPARE(*back, t);
    }
    QVERIFY(!parseDType("f8").has_value());
    QCOMPARE(dtypeSize(DType::BF16), int64_t(2));
    QVERIFY(isFloating(DType::F16) && !isFloating(DType::I32) && isUnsigned(DType::U32) && !isSigned(DType::U8));
  }

  void shapes() {
    Shape s{8, 784};
    QCOMPARE(s.numel(), int64_t(8 * 784));
    QCOMPARE(s.toString(), std::string("[8,784]"));
    QCOMPARE((Aval{Shape{}, DType::BF16}).toString(), std::string("bf16[]"));
    QCOMPARE(Shape({2, 3, 4}).strides(), (std::vector<int64_t>{12, 4, 1}));
    QCOMPARE(normalizeAxis(-1, 3), 2);
    QCOMPARE(normalizeAxis(3, 3), -1);
  }

  void results() {
    QCOMPARE(*quarter(8), 2);
    auto r = quarter(6);
    QVERIFY(!r.ok());
    QCOMPARE(r.error().message, std::string("3 is odd"));
  }

  void treePathsAndUnflatten() {
    using T = TreeOf<int>;
    T blocks = T::list({T::dict({{"kernel", T(1)}, {"bias", T(2)}}), T::dict({{"kernel", T(3)}, {"bias", T(4)}})});
    T params = T::dict({{"blocks", blocks}, {"head", T(5)}});
    QCOMPARE(params.leaves(), (std::vector<int>{1, 2, 3, 4, 5}));
    QCOMPARE(params.paths(), (std::vector<std::string>{"blocks.0.kernel", "blocks.0.bias", "blocks.1.kernel",
                                                        "blocks.1.bias", "head"}));
    QCOMPARE(params.def().toString(), std::string("{blocks: [{kernel: *, bias: *}, {kernel: *, bias: *}], head: *}"));
    QCOMPARE(params.findPath("blocks.1.bias")->leaf(), 4);
    QVERIFY(params.findPath("blocks.2.bias") == nullptr);
    QVERIFY(params.findPath("nope") == nullptr);

    auto doubled = params.map([](const int& x) { return x * 2.0; });
    QCOMPARE(doubled.leaves(), (std::vector<double>{2, 4, 6, 8, 10}));
    auto named = params.mapWithPath([](const std::string& p, const int&) { return p; });
    QCOMPARE(named.findPath("blocks.0.bias")->leaf(), std::string("blocks.0.bias"));

    auto rebuilt = T::unflatten(params.def(), {10, 20, 30, 40, 50});
    QVERIFY(rebuilt.ok());
    QCOMPARE(rebuilt->findPath("blocks.1.kernel")->leaf(), 30);
    QCOMPARE(rebuilt->def(), params.def());
    auto bad = T::unflatten(params.def(), {1, 2});
    QVERIFY(!bad.ok());
    QVERIFY(bad.error().message.find("5 leaves") != std::string::npos);
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestCore)
#include "test_core.moc"
