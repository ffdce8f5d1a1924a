// Conformance cases for the elementwise family. Every op runs over every dtype its infer rule accepts and
// every edge shape, against a naive reference in double precision (<cmath>, or bit arithmetic in uint64 for
// the integer bit ops). References store with HostTensor::set, so they round to the result dtype like the
// kernels' single rounding. Hand-computed cases pin down the edges: NaN/Inf, ties, wraparound, saturation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

using ir::OpCode;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool accepts(OpCode op, std::vector<Aval> operands, const ir::Attrs& attrs = ir::NoAttrs{}) {
  const ir::OpDef* def = ops::registry().find(op);
  return def && def->infer(operands, attrs).ok();
}

std::vector<Aval> scalars(std::initializer_list<DType> dtypes) {
  std::vector<Aval> v;
  for (DType t : dtypes) v.push_back(Aval{Shape{}, t});
  return v;
}

std::string label(OpCode op, DType t, const Shape& s, const std::string& extra = "") {
  std::string l = std::string(ir::coreOpName(op)) + " " + std::string(dtypeName(t)) + " " + s.toString();
  return extra.empty() ? l : l + " " + extra;
}

int bitWidth(DType t) { return t == DType::Bool ? 1 : static_cast<int>(dtypeSize(t)) * 8; }
uint64_t bitMask(int bits) { return bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1; }

// ---- Inputs ---------------------------------------------------------------------------------------------

uint64_t randomBits(std::mt19937& rng) { return (uint64_t(rng()) << 32) | rng(); }

// Random full-width bit patterns (bools 0/1).
HostTensor randomBitsTensor(const Aval& aval, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(aval);
  uint64_t mask = bitMask(bitWidth(aval.dtype));
  for (int64_t i = 0; i < t.numel(); ++i) t.setBits(i, randomBits(rng) & mask);
  return t;
}

// Divisors away from zero: floats with magnitude in [0.5, 2], integers in [-5, 5] \ {0} (unsigned [1, 9]).
HostTensor nonZeroTensor(const Aval& aval, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(aval);
  std::uniform_real_distribution<double> mag(0.5, 2.0);
  std::uniform_int_distribution<int> small(1, isUnsigned(aval.dtype) ? 9 : 5);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double sign = (!isUnsigned(aval.dtype) && (rng() & 1u)) ? -1.0 : 1.0;
    t.set(i, sign * (isFloating(aval.dtype) ? mag(rng) : small(rng)));
  }
  return t;
}

// A second comparison operand equal to `a` at every third element, so eq/le/ge see ties in every dtype.
HostTensor tiedTensor(const HostTensor& a, std::mt19937& rng) {
  HostTensor b = randomTensor(a.aval, rng);
  for (int64_t i = 0; i < b.numel(); i += 3) b.setBits(i, a.getBits(i));
  return b;
}

using Generator = HostTensor (*)(const Aval&, std::mt19937&);
HostTensor anyValues(const Aval& a, std::mt19937& rng) { return randomTensor(a, rng); }
HostTensor positiveValues(const Aval& a, std::mt19937& rng) { return randomTensor(a, rng, 0.1, 3); }

HostTensor tensorOf(DType t, const std::vector<double>& values) {
  return HostTensor::fromValues(Aval{Shape{static_cast<int64_t>(values.size())}, t}, values);
}
HostTensor tensorOfBits(DType t, const std::vector<uint64_t>& bits) {
  HostTensor h = HostTensor::zeros(Aval{Shape{static_cast<int64_t>(bits.size())}, t});
  for (size_t i = 0; i < bits.size(); ++i) h.setBits(static_cast<int64_t>(i), bits[i]);
  return h;
}

// ---- Naive references -----------------------------------------------------------------------------------

// Bisection on erf (monotone), independent of any approximation.
double refErfInv(double y) {
  if (std::isnan(y) || std::fabs(y) > 1) return kNaN;
  if (std::fabs(y) == 1) return std::copysign(kInf, y);
  double lo = -7, hi = 7;
  for (int i = 0; i < 200; ++i) {
    double mid = 0.5 * (lo + hi);
    if (mid == lo || mid == hi) break;
    (std::erf(mid) < y ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

// digamma = lgamma' by a fourth-order central difference of the C library's lgamma (h = 1e-3: truncation
// about h^4/30 |lgamma^(5)|, below 1e-10 on [1/2, 5]); independent of the series the kernels sum.
double refDigamma(double x) {
  const double h = 1e-3;
  return (-std::lgamma(x + 2 * h) + 8 * std::lgamma(x + h) - 8 * std::lgamma(x - h) + std::lgamma(x - 2 * h)) / (12 * h);
}

struct UnarySpec {
  OpCode op;
  double (*ref)(double);
  double lo = -4, hi = 4;  // float inputs, inside the op's domain
  bool boolResult = false;
  double tol64 = -1, tol32 = -1;  // rtol = atol for f64 / f32 results where the defaults do not fit the reference
};

const UnarySpec kUnary[] = {
    {OpCode::Neg, [](double x) { return -x; }},
    {OpCode::Abs, [](double x) { return std::fabs(x); }},
    {OpCode::Sign, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : x; }},
    {OpCode::Exp, [](double x) { return std::exp(x); }},
    {OpCode::Exp2, [](double x) { return std::exp2(x); }},
    {OpCode::Log, [](double x) { return std::log(x); }, 0.05, 4},
    {OpCode::Log1p, [](double x) { return std::log1p(x); }, -0.9, 3},
    {OpCode::Expm1, [](double x) { return std::expm1(x); }},
    {OpCode::Sqrt, [](double x) { return std::sqrt(x); }, 0, 4},
    {OpCode::Rsqrt, [](double x) { return 1 / std::sqrt(x); }, 0.05, 4},
    {OpCode::Tanh, [](double x) { return std::tanh(x); }},
    {OpCode::Logistic, [](double x) { return 1 / (1 + std::exp(-x)); }},
    {OpCode::Sin, [](double x) { return std::sin(x); }},
    {OpCode::Cos, [](double x) { return std::cos(x); }},
    {OpCode::Tan, [](double x) { return std::tan(x); }, -1.4, 1.4},
    {OpCode::Erf, [](double x) { return std::erf(x); }},
    {OpCode::ErfInv, refErfInv, -0.99, 0.99},
    {OpCode::Floor, [](double x) { return std::floor(x); }},
    {OpCode::Ceil, [](double x) { return std::ceil(x); }},
    {OpCode::Round, [](double x) { return std::round(x); }},
    {OpCode::IsFinite, [](double x) { return std::isfinite(x) ? 1.0 : 0.0; }, -4, 4, true},
    {OpCode::Relu, [](double x) { return x < 0 ? 0.0 : x; }},
    {OpCode::Square, [](double x) { return x * x; }},
    {OpCode::Lgamma, [](double x) { return std::lgamma(x); }, 0.1, 6, false, -1, 1e-5},
    // float digamma cancels near its root 1.4616: an absolute tolerance there.
    {OpCode::Digamma, refDigamma, 0.5, 5, false, 1e-9, 2e-5},
};

double truncDiv(double a, double b) { return b == 0 ? 0 : std::trunc(a / b); }
double intRem(double a, double b) { return b == 0 ? a : std::fmod(a, b); }
double nanMax(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::max(a, b); }
double nanMin(double a, double b) { return std::isnan(a) || std::isnan(b) ? kNaN : std::min(a, b); }

// Integer results go through set(), which wraps like a cast: that is the reference for add/sub/mul overflow.
struct BinarySpec {
  OpCode op;
  double (*ref)(double, double);
  double (*intRef)(double, double) = nullptr;  // for integer dtypes, where they differ from the float rule
  Generator lhs = anyValues, rhs = anyValues;
};

const BinarySpec kBinary[] = {
    {OpCode::Add, [](double a, double b) { return a + b; }},
    {OpCode::Sub, [](double a, double b) { return a - b; }},
    {OpCode::Mul, [](double a, double b) { return a * b; }},
    {OpCode::Div, [](double a, double b) { return a / b; }, truncDiv, anyValues, nonZeroTensor},
    {OpCode::Rem, [](double a, double b) { return std::fmod(a, b); }, intRem, anyValues, nonZeroTensor},
    {OpCode::Pow, [](double a, double b) { return std::pow(a, b); }, nullptr, positiveValues},
    {OpCode::Max, nanMax},
    {OpCode::Min, nanMin},
    {OpCode::Atan2, [](double a, double b) { return std::atan2(a, b); }},
};

struct CompareSpec {
  OpCode op;
  bool (*ref)(double, double);
};
const CompareSpec kCompare[] = {
    {OpCode::Eq, [](double a, double b) { return a == b; }}, {OpCode::Ne, [](double a, double b) { return a != b; }},
    {OpCode::Lt, [](double a, double b) { return a < b; }},  {OpCode::Le, [](double a, double b) { return a <= b; }},
    {OpCode::Gt, [](double a, double b) { return a > b; }},  {OpCode::Ge, [](double a, double b) { return a >= b; }},
};

// Bit ops see the low `bits` bits of each element (bool: 1 bit).
uint64_t signExtend(uint64_t v, int bits) {
  return static_cast<uint64_t>(static_cast<int64_t>(v << (64 - bits)) >> (64 - bits));
}

struct BitSpec {
  OpCode op;
  int arity;
  uint64_t (*ref)(uint64_t a, uint64_t b, int bits);
  bool shift = false;  // rhs: amounts 0 .. bits + 2
};

const BitSpec kBitOps[] = {
    {OpCode::Not, 1, [](uint64_t a, uint64_t, int bits) { return ~a & bitMask(bits); }},
    {OpCode::And, 2, [](uint64_t a, uint64_t b, int) { return a & b; }},
    {OpCode::Or, 2, [](uint64_t a, uint64_t b, int) { return a | b; }},
    {OpCode::Xor, 2, [](uint64_t a, uint64_t b, int) { return a ^ b; }},
    {OpCode::ShiftLeft, 2,
     [](uint64_t a, uint64_t n, int bits) { return n >= uint64_t(bits) ? 0 : (a << n) & bitMask(bits); }, true},
    {OpCode::ShiftRightLogical, 2, [](uint64_t a, uint64_t n, int bits) { return n >= uint64_t(bits) ? 0 : a >> n; },
     true},
    {OpCode::ShiftRightArithmetic, 2,
     [](uint64_t a, uint64_t n, int bits) {
       uint64_t s = std::min<uint64_t>(n, bits - 1);
       return static_cast<uint64_t>(static_cast<int64_t>(signExtend(a, bits)) >> s) & bitMask(bits);
     },
     true},
};

// convert: floats to integers truncate toward zero and saturate, NaN -> 0; anything to bool is x != 0.
double refConvert(double v, DType from, DType to) {
  if (to == DType::Bool) return v != 0 ? 1 : 0;
  if (!isInteger(to) || !isFloating(from)) return v;  // set() rounds floats and wraps integers like a cast
  if (std::isnan(v)) return 0;
  double lo = 0, hi = 0;
  switch (to) {
    case DType::I32: lo = -2147483648.0; hi = 2147483647.0; break;
    case DType::U8: hi = 255; break;
    case DType::U32: hi = 4294967295.0; break;
    // i64: the largest double below 2^63, since set() goes through a double; a hand case checks the
    // saturated value itself bit-exactly.
    default: lo = -9223372036854775808.0; hi = 9223372036854774784.0; break;
  }
  return std::clamp(std::trunc(v), lo, hi);
}

// r[i] = f(r, inputs, i) for each element, r of dtype `out` and the shape of operand 0.
template <class F>
Reference mapRef(DType out, F f) {
  return [out, f](const std::vector<HostTensor>& in) {
    HostTensor r = HostTensor::zeros(Aval{in[0].aval.shape, out});
    for (int64_t i = 0; i < r.numel(); ++i) f(r, in, i);
    return std::vector<HostTensor>{r};
  };
}

// The naive reference of `op` on operands of dtype `t` (select: the dtype of on_true).
Reference referenceFor(OpCode op, DType t, const ir::Attrs& attrs) {
  for (const UnarySpec& s : kUnary)
    if (s.op == op)
      return mapRef(s.boolResult ? DType::Bool : t,
                    [f = s.ref](HostTensor& r, const auto& in, int64_t i) { r.set(i, f(in[0].get(i))); });
  for (const BinarySpec& s : kBinary) {
    if (s.op != op) continue;
    auto f = (s.intRef && !isFloating(t)) ? s.intRef : s.ref;
    return mapRef(t, [f](HostTensor& r, const auto& in, int64_t i) { r.set(i, f(in[0].get(i), in[1].get(i))); });
  }
  for (const CompareSpec& s : kCompare)
    if (s.op == op)
      return mapRef(DType::Bool, [f = s.ref](HostTensor& r, const auto& in, int64_t i) {
        r.set(i, f(in[0].get(i), in[1].get(i)) ? 1 : 0);
      });
  for (const BitSpec& s : kBitOps)
    if (s.op == op)
      return mapRef(t, [f = s.ref, bits = bitWidth(t), arity = s.arity](HostTensor& r, const auto& in, int64_t i) {
        r.setBits(i, f(in[0].getBits(i), arity == 2 ? in[1].getBits(i) : 0, bits));
      });
  switch (op) {
    case OpCode::Select:
      return mapRef(t, [](HostTensor& r, const auto& in, int64_t i) {
        r.setBits(i, in[0].get(i) != 0 ? in[1].getBits(i) : in[2].getBits(i));
      });
    case OpCode::StopGradient:
      return mapRef(t, [](HostTensor& r, const auto& in, int64_t i) { r.setBits(i, in[0].getBits(i)); });
    case OpCode::Clamp:  // operands (lo, x, hi)
      return mapRef(t, [](HostTensor& r, const auto& in, int64_t i) {
        r.set(i, nanMin(nanMax(in[1].get(i), in[0].get(i)), in[2].get(i)));
      });
    case OpCode::Convert: {
      DType to = std::get<ir::ConvertAttrs>(attrs).dtype;
      return mapRef(to, [t, to](HostTensor& r, const auto& in, int64_t i) { r.set(i, refConvert(in[0].get(i), t, to)); });
    }
    case OpCode::BitcastConvert: {
      DType to = std::get<ir::ConvertAttrs>(attrs).dtype;
      return [to](const std::vector<HostTensor>& in) {
        HostTensor r = HostTensor::zeros(Aval{in[0].aval.shape, to});
        r.bytes = in[0].bytes;
        return std::vector<HostTensor>{r};
      };
    }
    default:
      // No reference: the harness reports "wrong number of results" for the case.
      return [](const std::vector<HostTensor>&) { return std::vector<HostTensor>{}; };
  }
}

OpCase makeCase(std::string label, OpCode op, std::vector<HostTensor> inputs, ir::Attrs attrs = ir::NoAttrs{}) {
  OpCase c;
  c.label = std::move(label);
  c.op = op;
  c.attrs = std::move(attrs);
  DType t = (op == OpCode::Select ? inputs[1] : inputs[0]).aval.dtype;
  c.reference = referenceFor(op, t, c.attrs);
  c.inputs = std::move(inputs);
  return c;
}

// ---- Sweeps: every accepted dtype, every edge shape -------------------------------------------------------

void addUnaryCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const UnarySpec& s : kUnary)
    for (DType t : allDTypes())
      if (accepts(s.op, scalars({t})))
        for (const Shape& shape : edgeShapes()) {
          OpCase c = makeCase(label(s.op, t, shape), s.op, {randomTensor(Aval{shape, t}, rng, s.lo, s.hi)});
          const double tol = t == DType::F64 ? s.tol64 : t == DType::F32 ? s.tol32 : -1;
          if (tol >= 0) c.rtol = c.atol = tol;
          cases.push_back(std::move(c));
        }
}

// integer_pow over exponents of both signs: x^n as std::pow in double (exact for the small integers), rounded
// or wrapped to the dtype by set(). Negative exponents (floats only) take bases away from zero.
void addIntegerPowCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<Shape> shapes = {Shape{}, Shape{7}, Shape{2, 3}, Shape{2, 1, 3, 1}, Shape{33, 17}};
  for (int64_t n : {0, 1, 2, 3, 5, -1, -2, -3}) {
    ir::IntegerPowAttrs attrs{n};
    for (DType t : allDTypes()) {
      if (!accepts(OpCode::IntegerPow, scalars({t}), attrs)) continue;
      for (const Shape& shape : shapes) {
        Aval a{shape, t};
        HostTensor x = n < 0 ? nonZeroTensor(a, rng) : randomTensor(a, rng);
        OpCase c;
        c.label = label(OpCode::IntegerPow, t, shape, "n " + std::to_string(n));
        c.op = OpCode::IntegerPow;
        c.attrs = attrs;
        c.inputs = {x};
        c.reference = mapRef(t, [n](HostTensor& r, const auto& in, int64_t i) {
          r.set(i, std::pow(in[0].get(i), static_cast<double>(n)));
        });
        cases.push_back(std::move(c));
      }
    }
  }
}

// stop_gradient: the identity on every dtype, bit for bit.
void addStopGradientCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : allDTypes())
    for (const Shape& shape : edgeShapes())
      cases.push_back(makeCase(label(OpCode::StopGradient, t, shape), OpCode::StopGradient,
                               {randomTensor(Aval{shape, t}, rng)}));
}

void addBinaryCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const BinarySpec& s : kBinary) {
    for (DType t : allDTypes()) {
      if (!accepts(s.op, scalars({t, t}))) continue;
      for (const Shape& shape : edgeShapes()) {
        Aval a{shape, t};
        cases.push_back(makeCase(label(s.op, t, shape), s.op, {s.lhs(a, rng), s.rhs(a, rng)}));
      }
      if (s.intRef && !isFloating(t)) {
        // Zero divisors: randomTensor's small integers include 0.
        Aval a{Shape{33, 17}, t};
        cases.push_back(makeCase(label(s.op, t, a.shape, "with zero divisors"), s.op,
                                 {randomTensor(a, rng), randomTensor(a, rng)}));
      }
    }
  }
  for (const CompareSpec& s : kCompare) {
    for (DType t : allDTypes()) {
      if (!accepts(s.op, scalars({t, t}))) continue;
      for (const Shape& shape : edgeShapes()) {
        HostTensor a = randomTensor(Aval{shape, t}, rng);
        HostTensor b = tiedTensor(a, rng);
        cases.push_back(makeCase(label(s.op, t, shape), s.op, {a, b}));
      }
    }
  }
}

void addBitCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const BitSpec& s : kBitOps) {
    for (DType t : allDTypes()) {
      if (!accepts(s.op, s.arity == 1 ? scalars({t}) : scalars({t, t}))) continue;
      for (const Shape& shape : edgeShapes()) {
        Aval a{shape, t};
        std::vector<HostTensor> inputs = {randomBitsTensor(a, rng)};
        if (s.arity == 2) {
          HostTensor rhs = randomBitsTensor(a, rng);
          if (s.shift)
            for (int64_t i = 0; i < rhs.numel(); ++i) rhs.setBits(i, rng() % static_cast<uint32_t>(bitWidth(t) + 3));
          inputs.push_back(rhs);
        }
        cases.push_back(makeCase(label(s.op, t, shape), s.op, std::move(inputs)));
      }
    }
  }
}

void addSelectClampCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : allDTypes()) {
    if (!accepts(OpCode::Select, scalars({DType::Bool, t, t}))) continue;
    for (const Shape& shape : edgeShapes()) {
      Aval a{shape, t};
      cases.push_back(makeCase(label(OpCode::Select, t, shape), OpCode::Select,
                               {randomTensor(Aval{shape, DType::Bool}, rng), randomTensor(a, rng), randomTensor(a, rng)}));
    }
  }
  for (DType t : allDTypes()) {
    if (!accepts(OpCode::Clamp, scalars({t, t, t}))) continue;
    for (const Shape& shape : edgeShapes()) {
      // Independent random (lo, x, hi), so lo > hi happens too and must give hi.
      Aval a{shape, t};
      cases.push_back(makeCase(label(OpCode::Clamp, t, shape), OpCode::Clamp,
                               {randomTensor(a, rng), randomTensor(a, rng), randomTensor(a, rng)}));
    }
  }
}

// Every (from, to) pair, on a few shapes: the kernels are the same flat loop for every shape.
void addConvertCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<Shape> shapes = {Shape{}, Shape{7}, Shape{2, 3, 5}};
  for (DType from : allDTypes()) {
    for (DType to : allDTypes()) {
      ir::ConvertAttrs attrs{to};
      std::string toName = "to " + std::string(dtypeName(to));
      if (accepts(OpCode::Convert, scalars({from}), attrs))
        for (const Shape& shape : shapes)
          cases.push_back(makeCase(label(OpCode::Convert, from, shape, toName), OpCode::Convert,
                                   {randomTensor(Aval{shape, from}, rng, -3, 3)}, attrs));
      if (accepts(OpCode::BitcastConvert, scalars({from}), attrs))
        for (const Shape& shape : shapes)
          cases.push_back(makeCase(label(OpCode::BitcastConvert, from, shape, toName), OpCode::BitcastConvert,
                                   {randomBitsTensor(Aval{shape, from}, rng)}, attrs));
    }
  }
}

// ---- Hand-computed values ---------------------------------------------------------------------------------

// Expected values for the hand-picked inputs. The harness also runs binary ops with a derived operand (a
// broadcast row); for inputs other than the hand-picked ones the naive reference answers.
void addHand(std::vector<OpCase>& cases, const std::string& what, OpCode op, std::vector<HostTensor> inputs,
             HostTensor expected, ir::Attrs attrs = ir::NoAttrs{}, double rtol = -1, double atol = -1) {
  OpCase c = makeCase(std::string(ir::coreOpName(op)) + " hand: " + what, op, inputs, std::move(attrs));
  c.reference = [inputs, expected, naive = c.reference](const std::vector<HostTensor>& in) {
    bool same = in.size() == inputs.size();
    for (size_t i = 0; same && i < in.size(); ++i) same = in[i].aval == inputs[i].aval && in[i].bytes == inputs[i].bytes;
    return same ? std::vector<HostTensor>{expected} : naive(in);
  };
  c.rtol = rtol;
  c.atol = atol;
  cases.push_back(std::move(c));
}

void addHandCases(std::vector<OpCase>& cases) {
  using D = DType;
  const uint64_t i32Min = 0x80000000u, i32Max = 0x7fffffffu;

  // bf16 exp is computed in float and rounded once to nearest even: exactly these bf16 values.
  addHand(cases, "bf16 rounding", OpCode::Exp, {tensorOf(D::BF16, {0, 1, -1, 2, 0.5, -3})},
          tensorOf(D::BF16, {1.0, 2.71875, 0.3671875, 7.375, 1.6484375, 0.0498046875}), ir::NoAttrs{}, 0, 0);

  addHand(cases, "f32 nan/inf", OpCode::IsFinite, {tensorOf(D::F32, {kNaN, kInf, -kInf, 0, 3.4e38, -1, 1e-45})},
          tensorOf(D::Bool, {0, 0, 0, 1, 1, 1, 1}));
  addHand(cases, "f16 nan/inf", OpCode::IsFinite, {tensorOf(D::F16, {65504, kInf, kNaN, -0.0, 1e6})},
          tensorOf(D::Bool, {1, 0, 0, 1, 0}));
  addHand(cases, "bf16 nan/inf", OpCode::IsFinite, {tensorOf(D::BF16, {3e38, -kInf, kNaN})},
          tensorOf(D::Bool, {1, 0, 0}));

  // Values from mpmath at 40 digits (inputs are the doubles nearest the decimals).
  addHand(cases, "f64 known values", OpCode::ErfInv,
          {tensorOf(D::F64, {0, 0.5, -0.9, 0.999, 0.1, 1e-10, 0.999999999, -0.3, 1, -1, 1.5, kNaN})},
          tensorOf(D::F64, {0, 0.47693627620446987338, -1.1630871536766741628, 2.3267537655135244939,
                            0.088855990494257691974, 8.8622692545275804594e-11, 4.3200053881053620459,
                            -0.27246271472675434502, kInf, -kInf, kNaN, kNaN}),
          ir::NoAttrs{}, 1e-15, 0);
  addHand(cases, "f32 known values", OpCode::ErfInv, {tensorOf(D::F32, {0.5, -0.9, 0.999, 0.1, 1, -1, -1.5})},
          tensorOf(D::F32, {0.476936276204, -1.16308707195, 2.3267563268, 0.0888559918253, kInf, -kInf, kNaN}),
          ir::NoAttrs{}, 1e-6, 0);

  // Half-way cases round away from zero; 0.49999997 (the float below 0.5) must not round up.
  addHand(cases, "ties away from zero", OpCode::Round,
          {tensorOf(D::F32, {0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -0.49999997, 3.7, -3.7})},
          tensorOf(D::F32, {1, -1, 2, 3, -3, 0, 0, 4, -4}), ir::NoAttrs{}, 0, 0);
  addHand(cases, "bf16 ties", OpCode::Round, {tensorOf(D::BF16, {0.5, -2.5, 2.5})}, tensorOf(D::BF16, {1, -3, 3}),
          ir::NoAttrs{}, 0, 0);

  // exp(-100) is far below float's smallest normal; 1/(1+exp(100)) would give 0.
  addHand(cases, "tails", OpCode::Logistic, {tensorOf(D::F32, {-100, 100, 0, -20})},
          tensorOf(D::F32, {3.7200759760208356e-44, 1, 0.5, 2.0611536181902036e-09}), ir::NoAttrs{}, 0.05, 0);

  // NaN propagates through max/min/clamp/relu/sign; every comparison with NaN but ne is false.
  addHand(cases, "nan", OpCode::Max, {tensorOf(D::F32, {kNaN, 1, kNaN}), tensorOf(D::F32, {1, kNaN, kNaN})},
          tensorOf(D::F32, {kNaN, kNaN, kNaN}));
  addHand(cases, "nan", OpCode::Min, {tensorOf(D::F32, {kNaN, 1, kNaN}), tensorOf(D::F32, {1, kNaN, kNaN})},
          tensorOf(D::F32, {kNaN, kNaN, kNaN}));
  addHand(cases, "nan and lo > hi", OpCode::Clamp,
          {tensorOf(D::F32, {0, 0, 5}), tensorOf(D::F32, {kNaN, 3, 1}), tensorOf(D::F32, {1, 1, 2})},
          tensorOf(D::F32, {kNaN, 1, 2}));
  addHand(cases, "nan", OpCode::Relu, {tensorOf(D::F32, {kNaN, -1, 2})}, tensorOf(D::F32, {kNaN, 0, 2}));
  addHand(cases, "nan", OpCode::Sign, {tensorOf(D::F32, {kNaN, -0.0, -3, 5})}, tensorOf(D::F32, {kNaN, 0, -1, 1}));
  for (auto [op, want] : {std::pair{OpCode::Eq, 0.0}, std::pair{OpCode::Ne, 1.0}, std::pair{OpCode::Lt, 0.0},
                           std::pair{OpCode::Ge, 0.0}})
    addHand(cases, "nan", op, {tensorOf(D::F32, {kNaN, 1}), tensorOf(D::F32, {1, kNaN})},
            tensorOf(D::Bool, {want, want}));

  // Integer division: truncation toward zero, x / 0 == 0, x % 0 == x, INT_MIN / -1 wraps, INT_MIN % -1 == 0.
  HostTensor num = tensorOfBits(D::I32, {7, uint32_t(-7), 7, uint32_t(-7), i32Min, i32Min, 5});
  HostTensor den = tensorOfBits(D::I32, {2, 2, uint32_t(-2), 0, uint32_t(-1), 0, 0});
  addHand(cases, "i32 edges", OpCode::Div, {num, den},
          tensorOfBits(D::I32, {3, uint32_t(-3), uint32_t(-3), 0, i32Min, 0, 0}));
  addHand(cases, "i32 edges", OpCode::Rem, {num, den}, tensorOfBits(D::I32, {1, uint32_t(-1), 1, uint32_t(-7), 0, i32Min, 5}));
  addHand(cases, "u8 edges", OpCode::Div, {tensorOf(D::U8, {7, 200}), tensorOf(D::U8, {0, 3})}, tensorOf(D::U8, {0, 66}));
  addHand(cases, "u8 edges", OpCode::Rem, {tensorOf(D::U8, {7, 200}), tensorOf(D::U8, {0, 3})}, tensorOf(D::U8, {7, 2}));

  // Two's complement wraparound.
  addHand(cases, "i32 overflow", OpCode::Add, {tensorOfBits(D::I32, {i32Max}), tensorOfBits(D::I32, {1})},
          tensorOfBits(D::I32, {i32Min}));
  addHand(cases, "i32 overflow", OpCode::Mul, {tensorOfBits(D::I32, {0x10000, i32Min}), tensorOfBits(D::I32, {0x10000, uint32_t(-1)})},
          tensorOfBits(D::I32, {0, i32Min}));
  addHand(cases, "i32 min", OpCode::Neg, {tensorOfBits(D::I32, {i32Min})}, tensorOfBits(D::I32, {i32Min}));
  addHand(cases, "i32 min", OpCode::Abs, {tensorOfBits(D::I32, {i32Min})}, tensorOfBits(D::I32, {i32Min}));
  addHand(cases, "u8 wrap", OpCode::Add, {tensorOf(D::U8, {200}), tensorOf(D::U8, {100})}, tensorOf(D::U8, {44}));
  addHand(cases, "u8 wrap", OpCode::Sub, {tensorOf(D::U8, {3}), tensorOf(D::U8, {5})}, tensorOf(D::U8, {254}));

  // Shifts: amounts >= width (and negative amounts, read as unsigned) give 0 or the sign fill.
  addHand(cases, "i32 amounts", OpCode::ShiftRightArithmetic,
          {tensorOf(D::I32, {-8, -8, 8, -1, -8}), tensorOf(D::I32, {1, 40, 40, 31, -1})},
          tensorOf(D::I32, {-4, -1, 0, -1, -1}));
  addHand(cases, "i32 amounts", OpCode::ShiftLeft, {tensorOf(D::I32, {1, 1, 3, 3}), tensorOf(D::I32, {31, 32, 1, -1})},
          tensorOfBits(D::I32, {i32Min, 0, 6, 0}));
  addHand(cases, "i32 amounts", OpCode::ShiftRightLogical, {tensorOf(D::I32, {-1, -1, 64}), tensorOf(D::I32, {28, 32, 3})},
          tensorOf(D::I32, {15, 0, 8}));
  addHand(cases, "u8 sign bit", OpCode::ShiftRightArithmetic, {tensorOf(D::U8, {0x80, 0x40, 0x90}), tensorOf(D::U8, {1, 9, 9})},
          tensorOf(D::U8, {0xc0, 0, 0xff}));

  // convert: truncation toward zero, saturation, NaN -> 0; to bool is x != 0 (NaN is true).
  HostTensor f = tensorOf(D::F32, {kNaN, 1e10, -1e10, 2.7, -2.7, -0.5, 2147483520.0});
  addHand(cases, "f32 to i32 saturates", OpCode::Convert, {f},
          tensorOfBits(D::I32, {0, i32Max, i32Min, 2, uint32_t(-2), 0, 2147483520u}), ir::ConvertAttrs{D::I32});
  addHand(cases, "f32 to u8 saturates", OpCode::Convert, {f}, tensorOf(D::U8, {0, 255, 0, 2, 0, 0, 255}),
          ir::ConvertAttrs{D::U8});
  addHand(cases, "f32 to u32 saturates", OpCode::Convert, {f},
          tensorOfBits(D::U32, {0, 0xffffffffu, 0, 2, 0, 0, 2147483520u}), ir::ConvertAttrs{D::U32});
  addHand(cases, "f64 to i64 saturates", OpCode::Convert, {tensorOf(D::F64, {1e19, -1e19, kNaN, -3.9})},
          tensorOfBits(D::I64, {0x7fffffffffffffffu, 0x8000000000000000u, 0, uint64_t(-3)}), ir::ConvertAttrs{D::I64});
  addHand(cases, "f32 to bool", OpCode::Convert, {tensorOf(D::F32, {kNaN, 0, -0.0, 0.1})},
          tensorOf(D::Bool, {1, 0, 0, 1}), ir::ConvertAttrs{D::Bool});
  addHand(cases, "i32 to u8 wraps", OpCode::Convert, {tensorOf(D::I32, {-1, 256, 300})}, tensorOf(D::U8, {255, 0, 44}),
          ir::ConvertAttrs{D::U8});
  // 1 + 2^-8 and 1 + 3 * 2^-8 are ties in bf16; nearest even gives 1 and 1 + 2^-6.
  addHand(cases, "f32 to bf16 ties to even", OpCode::Convert, {tensorOf(D::F32, {1.00390625, 1.01171875})},
          tensorOf(D::BF16, {1.0, 1.015625}), ir::ConvertAttrs{D::BF16}, 0, 0);

  // Special functions at points where they are known in closed form: digamma from psi(1) = -gamma,
  // psi(1/2) = -gamma - 2 ln 2, psi(1/4) = -gamma - pi/2 - 3 ln 2, the recurrence psi(x + 1) = psi(x) + 1/x and
  // the reflection psi(1 - x) - psi(x) = pi cot(pi x); poles give NaN. lgamma from Gamma(1/2) = sqrt(pi) and
  // factorials; poles give +inf.
  const double euler = 0.57721566490153286061, ln2 = 0.69314718055994530942, pi = 3.14159265358979323846;
  const double psiHalf = -euler - 2 * ln2;
  addHand(cases, "f64 closed forms", OpCode::Digamma,
          {tensorOf(D::F64, {1, 0.5, 2, 10, 0.25, -0.5, -1.5, 3.5, 0, -2, kInf, kNaN})},
          tensorOf(D::F64, {-euler, psiHalf, 1 - euler, -euler + 1 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4 + 1.0 / 5 + 1.0 / 6 +
                                                           1.0 / 7 + 1.0 / 8 + 1.0 / 9,
                            -euler - pi / 2 - 3 * ln2, psiHalf + 2, psiHalf + 2 + 1 / 1.5, psiHalf + 2 + 2.0 / 3 + 2.0 / 5,
                            kNaN, kNaN, kInf, kNaN}),
          ir::NoAttrs{}, 1e-13, 1e-13);
  addHand(cases, "f32 closed forms", OpCode::Digamma, {tensorOf(D::F32, {1, 0.5, 2, 0.25, -0.5, 3.5, 0, -3})},
          tensorOf(D::F32, {-euler, psiHalf, 1 - euler, -euler - pi / 2 - 3 * ln2, psiHalf + 2,
                            psiHalf + 2 + 2.0 / 3 + 2.0 / 5, kNaN, kNaN}),
          ir::NoAttrs{}, 1e-5, 1e-5);
  addHand(cases, "f64 closed forms", OpCode::Lgamma, {tensorOf(D::F64, {1, 2, 0.5, 3, -0.5, 10, 0, -1, kInf})},
          tensorOf(D::F64, {0, 0, 0.5 * std::log(pi), ln2, std::log(2 * std::sqrt(pi)), std::log(362880.0), kInf, kInf,
                            kInf}),
          ir::NoAttrs{}, 1e-14, 1e-14);
  // integer_pow: 0^0 = 1, 0^-1 = inf, integers wrap, squares of huge floats overflow to inf.
  addHand(cases, "f32 edges", OpCode::IntegerPow, {tensorOf(D::F32, {0, 2, -2, 0.5})}, tensorOf(D::F32, {1, 1, 1, 1}),
          ir::IntegerPowAttrs{0}, 0, 0);
  addHand(cases, "f32 reciprocal", OpCode::IntegerPow, {tensorOf(D::F32, {0, -0.0, 2, -4})},
          tensorOf(D::F32, {kInf, -kInf, 0.5, -0.25}), ir::IntegerPowAttrs{-1}, 0, 0);
  addHand(cases, "i32 wraps", OpCode::IntegerPow, {tensorOfBits(D::I32, {0x10000, 3, uint32_t(-3)})},
          tensorOfBits(D::I32, {0, 9, 9}), ir::IntegerPowAttrs{2}, 0, 0);
  addHand(cases, "u8 wraps", OpCode::IntegerPow, {tensorOf(D::U8, {3, 16})}, tensorOf(D::U8, {243, 0}),
          ir::IntegerPowAttrs{5}, 0, 0);
  addHand(cases, "f32 overflow", OpCode::Square, {tensorOf(D::F32, {1e20, -3, kNaN})}, tensorOf(D::F32, {kInf, 9, kNaN}),
          ir::NoAttrs{}, 0, 0);
  addHand(cases, "i32 wraps", OpCode::Square, {tensorOfBits(D::I32, {0x10000, 46341})},
          tensorOfBits(D::I32, {0, uint32_t(46341u * 46341u)}), ir::NoAttrs{}, 0, 0);

  addHand(cases, "f32 to i32", OpCode::BitcastConvert, {tensorOf(D::F32, {1.0, -0.0})},
          tensorOfBits(D::I32, {0x3f800000u, i32Min}), ir::ConvertAttrs{D::I32});
  addHand(cases, "i32 to f32", OpCode::BitcastConvert, {tensorOfBits(D::I32, {0x7f800000u, 0x40490fdbu})},
          tensorOf(D::F32, {kInf, 3.14159274101257324}), ir::ConvertAttrs{D::F32}, 0, 0);
}

}  // namespace

void addElementwiseCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  addUnaryCases(cases, rng);
  addBinaryCases(cases, rng);
  addBitCases(cases, rng);
  addSelectClampCases(cases, rng);
  addConvertCases(cases, rng);
  addIntegerPowCases(cases, rng);
  addStopGradientCases(cases, rng);
  addHandCases(cases);
}

}  // namespace tsr::test
