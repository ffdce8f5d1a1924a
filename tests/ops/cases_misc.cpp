// constant, threefry2x32 and host_callback cases. constant: scalars, arrays, special float values and an empty
// array of every dtype. threefry2x32: the Random123 known-answer vectors for threefry2x32_20 (the reference is the
// published answer), and a vector of counters checked against a plain transcription of the Random123 algorithm.
// host_callback: a C++ function, against the same formula evaluated here.
#include <cmath>
#include <cstdio>
#include <limits>

#include <fmt/format.h>

#include "engine/ir/host_callback.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

// ---- constant ----

OpCase constantCase(std::string label, const HostTensor& value) {
  OpCase c;
  c.label = "constant " + label + " " + value.aval.toString();
  c.op = ir::OpCode::Constant;
  c.attrs = ir::ConstantAttrs{ir::Literal::fromBytes(value.aval, value.bytes.data())};
  c.reference = [value](const std::vector<HostTensor>&) { return std::vector<HostTensor>{value}; };
  return c;
}

void addConstantCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : allDTypes()) {
    {
      // Literal::scalar builds the bytes; the reference writes the same value through the harness.
      OpCase c;
      c.label = fmt::format("constant scalar 3.0 {}", dtypeName(t));
      c.op = ir::OpCode::Constant;
      c.attrs = ir::ConstantAttrs{ir::Literal::scalar(t, 3.0)};
      c.reference = [t](const std::vector<HostTensor>&) {
        return std::vector<HostTensor>{HostTensor::fromValues(Aval{Shape{}, t}, {3.0})};
      };
      cases.push_back(std::move(c));
    }
    cases.push_back(constantCase("random", randomTensor(Aval{Shape{2, 3}, t}, rng)));
    cases.push_back(constantCase("random", randomTensor(Aval{Shape{3, 1, 4}, t}, rng)));
    cases.push_back(constantCase("empty", HostTensor::zeros(Aval{Shape{0, 3}, t})));
    if (isFloating(t)) {
      const double inf = std::numeric_limits<double>::infinity();
      cases.push_back(constantCase("special values", HostTensor::fromValues(Aval{Shape{5}, t},
                                                                           {std::nan(""), inf, -inf, -0.0, 1e-3})));
    }
  }
}

// ---- threefry2x32 ----

uint32_t rotateLeft(uint32_t v, unsigned r) { return (v << r) | (v >> (32u - r)); }

// threefry2x32_R(20, ctr, key) from Random123's threefry.h, written out round by round: key schedule
// ks = {k0, k1, k0 ^ k1 ^ SKEIN_KS_PARITY32}; rotation constants R_32x2_0..7 = 13 15 26 6 17 29 16 24;
// after every four rounds, injection i adds ks[i % 3] to x0 and ks[(i + 1) % 3] + i to x1.
void naiveThreefry(uint32_t k0, uint32_t k1, uint32_t c0, uint32_t c1, uint32_t& y0, uint32_t& y1) {
  uint32_t ks0 = k0, ks1 = k1, ks2 = 0x1BD11BDAu ^ k0 ^ k1;
  uint32_t x0 = c0 + ks0, x1 = c1 + ks1;
  auto mix = [&](unsigned r) {
    x0 += x1;
    x1 = rotateLeft(x1, r);
    x1 ^= x0;
  };
  mix(13); mix(15); mix(26); mix(6);
  x0 += ks1; x1 += ks2 + 1u;
  mix(17); mix(29); mix(16); mix(24);
  x0 += ks2; x1 += ks0 + 2u;
  mix(13); mix(15); mix(26); mix(6);
  x0 += ks0; x1 += ks1 + 3u;
  mix(17); mix(29); mix(16); mix(24);
  x0 += ks1; x1 += ks2 + 4u;
  mix(13); mix(15); mix(26); mix(6);
  x0 += ks2; x1 += ks0 + 5u;
  y0 = x0;
  y1 = x1;
}

// Random123 kat_vectors, threefry2x32_20: key, counter -> output.
struct Kat {
  uint32_t k0, k1, c0, c1, y0, y1;
};
const Kat kKats[] = {
    {0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x6b200159u, 0x99ba4efeu},
    {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
    {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u},
};

HostTensor u32Tensor(const Shape& shape, const std::vector<uint32_t>& bits) {
  HostTensor t = HostTensor::zeros(Aval{shape, DType::U32});
  for (size_t i = 0; i < bits.size(); ++i) t.setBits(static_cast<int64_t>(i), bits[i]);
  return t;
}

bool naiveMatchesKats() {
  for (const Kat& k : kKats) {
    uint32_t y0, y1;
    naiveThreefry(k.k0, k.k1, k.c0, k.c1, y0, y1);
    if (y0 != k.y0 || y1 != k.y1) return false;
  }
  return true;
}

void addThreefryCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const Kat& k : kKats) {
    OpCase c;
    c.label = fmt::format("threefry2x32 known answer key ({:#x}, {:#x}) counter ({:#x}, {:#x})", k.k0, k.k1, k.c0, k.c1);
    c.op = ir::OpCode::Threefry2x32;
    c.inputs = {u32Tensor({}, {k.k0}), u32Tensor({}, {k.k1}), u32Tensor({}, {k.c0}), u32Tensor({}, {k.c1})};
    c.reference = [k](const std::vector<HostTensor>&) {
      return std::vector<HostTensor>{u32Tensor({}, {k.y0}), u32Tensor({}, {k.y1})};
    };
    cases.push_back(std::move(c));
  }

  // A [4, 5] block: the known-answer inputs first, then random keys and counters (including the counter
  // pattern jax.random uses: one key, consecutive counters).
  const Shape shape{4, 5};
  const auto n = static_cast<size_t>(shape.numel());
  std::vector<uint32_t> k0(n), k1(n), c0(n), c1(n);
  for (size_t i = 0; i < n; ++i) {
    if (i < std::size(kKats)) {
      k0[i] = kKats[i].k0, k1[i] = kKats[i].k1, c0[i] = kKats[i].c0, c1[i] = kKats[i].c1;
    } else if (i < 10) {
      k0[i] = 42u, k1[i] = 7u, c0[i] = 0u, c1[i] = static_cast<uint32_t>(i);
    } else {
      k0[i] = static_cast<uint32_t>(rng()), k1[i] = static_cast<uint32_t>(rng());
      c0[i] = static_cast<uint32_t>(rng()), c1[i] = static_cast<uint32_t>(rng());
    }
  }
  OpCase c;
  c.label = "threefry2x32 vector u32[4,5]";
  c.op = ir::OpCode::Threefry2x32;
  c.inputs = {u32Tensor(shape, k0), u32Tensor(shape, k1), u32Tensor(shape, c0), u32Tensor(shape, c1)};
  c.reference = [](const std::vector<HostTensor>& in) {
    // A reference that disagrees with the published answers is itself wrong: return no results, which the
    // harness reports as a failure.
    if (!naiveMatchesKats()) {
      std::fprintf(stderr, "naiveThreefry does not reproduce the Random123 known answers\n");
      return std::vector<HostTensor>{};
    }
    HostTensor y0 = HostTensor::zeros(in[0].aval), y1 = HostTensor::zeros(in[0].aval);
    for (int64_t i = 0; i < in[0].numel(); ++i) {
      uint32_t a, b;
      naiveThreefry(static_cast<uint32_t>(in[0].getBits(i)), static_cast<uint32_t>(in[1].getBits(i)),
                    static_cast<uint32_t>(in[2].getBits(i)), static_cast<uint32_t>(in[3].getBits(i)), a, b);
      y0.setBits(i, a);
      y1.setBits(i, b);
    }
    return std::vector<HostTensor>{y0, y1};
  };
  cases.push_back(std::move(c));

  // Empty operands give empty results.
  OpCase e;
  e.label = "threefry2x32 empty u32[0]";
  e.op = ir::OpCode::Threefry2x32;
  for (int i = 0; i < 4; ++i) e.inputs.push_back(u32Tensor({0}, {}));
  e.reference = [](const std::vector<HostTensor>&) {
    return std::vector<HostTensor>{u32Tensor({0}, {}), u32Tensor({0}, {})};
  };
  cases.push_back(std::move(e));
}

// ---- host_callback ----

// A C++ callback (y = x * x + 1 and the sum of x, in double and rounded to the dtype), which every backend runs
// on the host; vmap batches it one example at a time, and its vjp refuses a cotangent.
void addHostCallbackCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (DType t : {DType::F32, DType::F64}) {
    Aval a{Shape{2, 3}, t};
    ir::HostCallback cb;
    cb.name = "square_plus_one";
    cb.operands = {a};
    cb.results = {a, Aval{Shape{}, t}};
    cb.fn = [](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> out) {
      auto run = [&](auto zero) {
        using T = decltype(zero);
        const T* x = in[0].as<T>();
        T sum = 0;
        for (int64_t i = 0; i < in[0].aval.numel(); ++i) {
          out[0].as<T>()[i] = x[i] * x[i] + T(1);
          sum += x[i];
        }
        *out[1].as<T>() = sum;
      };
      if (in[0].aval.dtype == DType::F32) run(0.0f);
      else run(0.0);
    };
    ir::HostCallbackPtr ptr = ir::makeHostCallback(std::move(cb));
    OpCase c;
    c.label = fmt::format("host_callback square_plus_one {}", a.toString());
    c.op = ir::OpCode::HostCallback;
    c.attrs = ir::HostCallbackAttrs{ptr->id, ptr};
    c.inputs = {randomTensor(a, rng)};
    c.reference = [a](const std::vector<HostTensor>& in) {
      HostTensor y = HostTensor::zeros(a), s = HostTensor::zeros(Aval{Shape{}, a.dtype});
      double sum = 0;
      for (int64_t i = 0; i < 6; ++i) {
        y.set(i, in[0].get(i) * in[0].get(i) + 1);
        sum += in[0].get(i);
      }
      s.set(0, sum);
      return std::vector<HostTensor>{y, s};
    };
    c.gradientRefused = true;
    cases.push_back(std::move(c));
  }
}

}  // namespace

void addMiscCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  addConstantCases(cases, rng);
  addThreefryCases(cases, rng);
  addHostCallbackCases(cases, rng);
}

}  // namespace tsr::test
