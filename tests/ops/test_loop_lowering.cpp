// Loop lowerings (engine/ops/loop_lowering.h): every elementwise op's one scalar expression, as the interpreter
// runs it (the op's tile functions), against the op's reference kernel on values that include every special
// case (signed zeros, infinities, NaN, subnormals, huge and tiny values), over lengths with vector tails and with
// each operand broadcast; the operand substitution the native and CUDA generators use; and the table itself:
// the ops that fuse are exactly the ops with a lowering.
#include "tests/check.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <random>
#include <set>

#include "engine/ops/loop_lowering.h"
#include "engine/ops/registry.h"

using namespace tsr;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Special values first, then random ones over several magnitudes.
std::vector<float> values(std::mt19937& rng, size_t n, bool positive) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -2.5f, 3.0f, kInf, -kInf, std::nanf(""), 1e30f, -1e-30f,
                          1e-40f, 7.9f, -9.0f, 88.0f, -104.5f, 2.0f};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-3, 3);
  while (v.size() < n) v.push_back(nd(rng) * std::pow(10.0f, static_cast<float>(scale(rng))));
  v.resize(n);
  if (positive)
    for (float& x : v) x = std::fabs(x);
  return v;
}

bool sameFloat(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

int64_t ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  if (a == b) return 0;
  auto key = [](float x) {
    auto u = static_cast<int64_t>(std::bit_cast<int32_t>(x));
    return u < 0 ? INT32_MIN - u : u;
  };
  return std::abs(key(a) - key(b));
}

// How far the lanes' own math may be from the C library the reference kernels call (vmath_avx2.inc).
int64_t allowedUlps(ir::OpCode op) {
  switch (op) {
    case ir::OpCode::Exp: return 2;
    case ir::OpCode::Logistic: return 4;
    case ir::OpCode::Tanh: return 8;
    default: return 0;
  }
}

// Logical ops take bools (0/1 floats in a loop); select takes a bool predicate.
DType operandType(const ir::OpDef& def, int k) {
  if (def.code == ir::OpCode::Select) return k == 0 ? DType::Bool : DType::F32;
  const Aval a{Shape{1}, DType::F32};
  std::vector<Aval> ops(static_cast<size_t>(def.numOperands), a);
  if (def.code == ir::OpCode::Convert) return DType::F32;
  return ir::inferSafely(def, ops, ir::Attrs{ir::NoAttrs{}}).ok() ? DType::F32 : DType::Bool;
}

}  // namespace

// The expression's operand names are replaced as whole names; numbers and longer names keep their letters.
TEST_CASE("operandSubstitution") {
  const std::string ops3[] = {"x", "y", "z"};
  TSR_COMPARE(ops::instantiateLoopExpression("tsr_max(a, b) + 1e-5f * c", ops3),
              std::string("tsr_max(x, y) + 1e-5f * z"));
  TSR_COMPARE(ops::instantiateLoopExpression("0x1.abcp-3f*a+.5e+2f-cab", ops3),
              std::string("0x1.abcp-3f*x+.5e+2f-cab"));
  TSR_COMPARE(ops::instantiateLoopExpression("tsr_abs(a)/(b)", ops3), std::string("tsr_abs(x)/(y)"));
  const std::string one[] = {"s3"};
  TSR_COMPARE(ops::instantiateLoopExpression("-a", one), std::string("-s3"));
}

// Which elementwise ops fuse is the table: exactly the core elementwise ops with a lowering, and every one that
// does has a tile function for each broadcast mask of its operands.
TEST_CASE("theTableIsComplete") {
  // Integer bit ops, bit casts, u32 random bits and constants (a group of their own) have no f32 loop form;
  // erf_inv has none yet.
  // integer_pow's exponent is an attribute, which a loop expression cannot see.
  const std::set<ir::OpCode> unfused = {ir::OpCode::ErfInv, ir::OpCode::IntegerPow, ir::OpCode::ShiftLeft, ir::OpCode::ShiftRightLogical,
                                        ir::OpCode::ShiftRightArithmetic, ir::OpCode::BitcastConvert,
                                        ir::OpCode::Constant, ir::OpCode::Threefry2x32};
  int lowered = 0;
  for (const ir::OpDef& def : ops::registry().all()) {
    if (static_cast<uint32_t>(def.code) >= ir::kNumCoreOps) continue;
    const bool elementwise = def.fusion == ir::FusionKind::Elementwise;
    if (!elementwise) {
      REQUIRE_MESSAGE(!def.loop.valid(), def.name.c_str());
      continue;
    }
    TSR_COMPARE(def.loop.valid(), !unfused.count(def.code));
    if (!def.loop.valid()) continue;
    ++lowered;
    for (unsigned m = 0; m < (1u << def.numOperands); ++m) REQUIRE_MESSAGE((def.loop.tile[m] != nullptr), def.name);
  }
  TSR_COMPARE(lowered, 47);
  REQUIRE(ops::registry().get(ir::OpCode::Convert).loopToBool.valid());
}

// Each op's tile functions against its reference kernel, element for element, for every broadcast mask.
TEST_CASE("tilesMatchTheReferenceKernels") {
  std::mt19937 rng(7);
  int checked = 0;
  for (const ir::OpDef& def : ops::registry().all()) {
    if (static_cast<uint32_t>(def.code) >= ir::kNumCoreOps || !def.loop.valid()) continue;
    for (bool toBool : {false, true}) {
      if (toBool && !def.loopToBool.valid()) continue;
      const ir::LoopLowering& l = toBool ? def.loopToBool : def.loop;
      const int arity = def.numOperands;
      const bool positive = def.code == ir::OpCode::Pow;  // a negative base gives NaN in both, but say more
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{37}, int64_t{64}}) {
        for (unsigned mask = 0; mask < (1u << arity); ++mask) {
          std::vector<DType> types;
          std::vector<std::vector<float>> x;
          for (int k = 0; k < arity; ++k) {
            types.push_back(operandType(def, k));
            auto v = values(rng, static_cast<size_t>(n), positive);
            std::shuffle(v.begin(), v.end(), rng);
            if (types.back() == DType::Bool)
              for (float& e : v) e = e > 0 ? 1.0f : 0.0f;
            if ((mask >> k) & 1u) std::fill(v.begin(), v.end(), v[0]);
            x.push_back(std::move(v));
          }
          // The reference kernel on the operands in their own dtypes.
          std::vector<std::vector<uint8_t>> bools(static_cast<size_t>(arity));
          std::vector<ir::TensorView> in;
          for (int k = 0; k < arity; ++k) {
            Aval a{Shape{n}, types[static_cast<size_t>(k)]};
            if (a.dtype == DType::Bool) {
              for (float e : x[static_cast<size_t>(k)]) bools[static_cast<size_t>(k)].push_back(e != 0.0f);
              in.push_back({bools[static_cast<size_t>(k)].data(), a});
            } else {
              in.push_back({x[static_cast<size_t>(k)].data(), a});
            }
          }
          ir::Attrs attrs = def.code == ir::OpCode::Convert ? ir::Attrs{ir::ConvertAttrs{toBool ? DType::Bool : DType::F32}}
                                                            : ir::Attrs{ir::NoAttrs{}};
          std::vector<Aval> avals;
          for (const auto& v : in) avals.push_back(v.aval);
          auto outAval = ir::inferSafely(def, avals, attrs);
          REQUIRE_MESSAGE(outAval.ok(), def.name.c_str());
          const Aval ra = (*outAval)[0];
          std::vector<uint8_t> refBytes(static_cast<size_t>(ra.bytes()));
          ir::MutableTensorView out{refBytes.data(), ra};
          def.cpu(ir::CpuKernelArgs{in, std::span<const ir::MutableTensorView>(&out, 1), attrs});
          // The tile function, on f32 lanes.
          std::vector<float> got(static_cast<size_t>(n), -123.0f);
          const float* px[3] = {nullptr, nullptr, nullptr};
          for (int k = 0; k < arity; ++k) px[k] = x[static_cast<size_t>(k)].data();
          l.tile[mask](px, got.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            float want;
            if (ra.dtype == DType::Bool) want = refBytes[static_cast<size_t>(i)] ? 1.0f : 0.0f;
            else if (ra.dtype == DType::F32) std::memcpy(&want, refBytes.data() + i * 4, 4);
            else FAIL("unexpected result dtype");
            const float g = got[static_cast<size_t>(i)];
            const bool ok = allowedUlps(def.code) ? ulps(g, want) <= allowedUlps(def.code) : sameFloat(g, want);
            if (!ok) {
              std::string operands;
              for (int k = 0; k < arity; ++k) operands += " " + std::to_string(x[static_cast<size_t>(k)][static_cast<size_t>(i)]);
              FAIL(def.name << " (" << l.expr << "): at" << operands << " got " << std::setprecision(9)
                            << static_cast<double>(g) << ", want " << static_cast<double>(want) << " (n " << n
                            << ", mask " << mask << ")");
            }
            ++checked;
          }
        }
      }
    }
  }
  REQUIRE(checked > 10000);
}

// A few values worked by hand, where the semantics are easy to get wrong: NaN through max and min (the first
// operand's NaN wins, and a NaN second operand is taken since x > NaN is false), != on NaN, select's blend.
TEST_CASE("handWorkedValues") {
  auto run = [](ir::OpCode op, std::vector<float> a, std::vector<float> b = {}, std::vector<float> c = {}) {
    const float* px[3] = {a.data(), b.empty() ? nullptr : b.data(), c.empty() ? nullptr : c.data()};
    std::vector<float> y(a.size());
    ops::registry().get(op).loop.tile[0](px, y.data(), static_cast<int64_t>(a.size()));
    return y;
  };
  const float nan = std::nanf("");
  auto mx = run(ir::OpCode::Max, {nan, 1.0f, -0.0f, 2.0f}, {1.0f, nan, 0.0f, -3.0f});
  REQUIRE((std::isnan(mx[0]) && std::isnan(mx[1]) && mx[3] == 2.0f));
  REQUIRE(std::signbit(mx[2]) == false);  // -0 > 0 is false: the second operand, +0
  auto ne = run(ir::OpCode::Ne, {nan, 1.0f}, {nan, 1.0f});
  TSR_COMPARE(ne, (std::vector<float>{1.0f, 0.0f}));
  auto sel = run(ir::OpCode::Select, {1.0f, 0.0f, nan}, {5.0f, 6.0f, 7.0f}, {8.0f, 9.0f, 10.0f});
  TSR_COMPARE(sel, (std::vector<float>{5.0f, 9.0f, 7.0f}));  // a NaN predicate is "not zero": true
  auto relu = run(ir::OpCode::Relu, {-2.0f, 3.0f, -0.0f});
  TSR_COMPARE(relu, (std::vector<float>{0.0f, 3.0f, -0.0f}));
}
