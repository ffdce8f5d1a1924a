// Conformance cases for the reduction family. References visit every input element with unravel(), find
// its result element by dropping the reduced axes, and accumulate in double (floats) or in 64-bit
// integers that wrap like C's unsigned arithmetic (integers).
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {

namespace {

using ir::Ints;
using ir::OpCode;

std::string bracket(const Ints& v) { return "[" + joinInts(v) + "]"; }

bool inAxes(const Ints& axes, int64_t d) { return std::find(axes.begin(), axes.end(), d) != axes.end(); }

// Integer element i of t as int64 (u32 read as unsigned, so it stays non-negative).
int64_t intAt(const HostTensor& t, int64_t i) {
  uint64_t b = t.getBits(i);
  switch (t.aval.dtype) {
    case DType::I32: return static_cast<int32_t>(b);
    case DType::I64: return static_cast<int64_t>(b);
    case DType::U8: return static_cast<uint8_t>(b);
    case DType::U32: return static_cast<uint32_t>(b);
    default: return static_cast<int64_t>(t.get(i));  // bool
  }
}

std::pair<int64_t, int64_t> intRange(DType t) {
  switch (t) {
    case DType::I32: return {std::numeric_limits<int32_t>::lowest(), std::numeric_limits<int32_t>::max()};
    case DType::I64: return {std::numeric_limits<int64_t>::lowest(), std::numeric_limits<int64_t>::max()};
    case DType::U8: return {0, 255};
    case DType::U32: return {0, std::numeric_limits<uint32_t>::max()};
    default: return {0, 1};  // bool
  }
}

// reduce_<kind>(x){axes} computed naively.
HostTensor reduceRef(OpCode kind, const HostTensor& x, const Ints& axes) {
  const Shape& s = x.aval.shape;
  Shape outShape;
  for (int d = 0; d < s.rank(); ++d)
    if (!inAxes(axes, d)) outShape.dims().push_back(s[d]);
  HostTensor out = HostTensor::zeros(Aval{outShape, x.aval.dtype});
  auto outIndex = [&](int64_t i) {
    std::vector<int64_t> idx = unravel(i, s), kept;
    for (int d = 0; d < s.rank(); ++d)
      if (!inAxes(axes, d)) kept.push_back(idx[static_cast<size_t>(d)]);
    return ravel(kept, outShape);
  };
  bool isMax = kind == OpCode::ReduceMax, isMin = kind == OpCode::ReduceMin;
  if (isFloating(x.aval.dtype)) {
    double inf = std::numeric_limits<double>::infinity();
    double init = kind == OpCode::ReduceSum ? 0.0 : kind == OpCode::ReduceProd ? 1.0 : isMax ? -inf : inf;
    std::vector<double> acc(static_cast<size_t>(out.numel()), init);
    for (int64_t i = 0; i < x.numel(); ++i) {
      double& a = acc[static_cast<size_t>(outIndex(i))];
      double v = x.get(i);
      if (kind == OpCode::ReduceSum) a += v;
      else if (kind == OpCode::ReduceProd) a *= v;
      else if (std::isnan(v) || std::isnan(a)) a = std::nan("");
      else a = isMax ? std::max(a, v) : std::min(a, v);
    }
    for (int64_t i = 0; i < out.numel(); ++i) out.set(i, acc[static_cast<size_t>(i)]);
    return out;
  }
  if (isMax || isMin) {
    auto [lo, hi] = intRange(x.aval.dtype);
    std::vector<int64_t> acc(static_cast<size_t>(out.numel()), isMax ? lo : hi);
    for (int64_t i = 0; i < x.numel(); ++i) {
      int64_t& a = acc[static_cast<size_t>(outIndex(i))];
      a = isMax ? std::max(a, intAt(x, i)) : std::min(a, intAt(x, i));
    }
    for (int64_t i = 0; i < out.numel(); ++i) out.setBits(i, static_cast<uint64_t>(acc[static_cast<size_t>(i)]));
    return out;
  }
  std::vector<uint64_t> acc(static_cast<size_t>(out.numel()), kind == OpCode::ReduceSum ? 0u : 1u);
  for (int64_t i = 0; i < x.numel(); ++i) {
    uint64_t& a = acc[static_cast<size_t>(outIndex(i))];
    auto v = static_cast<uint64_t>(intAt(x, i));
    a = kind == OpCode::ReduceSum ? a + v : a * v;
  }
  for (int64_t i = 0; i < out.numel(); ++i) out.setBits(i, acc[static_cast<size_t>(i)]);
  return out;
}

// argmax/argmin: the first index of the extreme value; NaN beats every number, so the first NaN wins.
HostTensor argRef(bool isMax, const HostTensor& x, int64_t axis, DType indexType) {
  const Shape& s = x.aval.shape;
  Shape outShape = s;
  outShape.dims().erase(outShape.dims().begin() + axis);
  HostTensor out = HostTensor::zeros(Aval{outShape, indexType});
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> idx = unravel(o, outShape);
    idx.insert(idx.begin() + axis, 0);
    int64_t best = 0;
    double bestV = x.get(ravel(idx, s));
    for (int64_t k = 1; k < s[static_cast<int>(axis)] && !std::isnan(bestV); ++k) {
      idx[static_cast<size_t>(axis)] = k;
      double v = x.get(ravel(idx, s));
      if (std::isnan(v) || (isMax ? v > bestV : v < bestV)) {
        best = k;
        bestV = v;
      }
    }
    out.set(o, static_cast<double>(best));
  }
  return out;
}

// Floats in [0.5, 1.5] keep long products finite; integers stay small but still overflow in the long cases.
HostTensor inputFor(OpCode op, const Aval& a, std::mt19937& rng) {
  if (op == OpCode::ReduceProd && isFloating(a.dtype)) return randomTensor(a, rng, 0.5, 1.5);
  return randomTensor(a, rng);
}

void addCase(std::vector<OpCase>& cases, OpCode op, const ir::Attrs& attrs, const std::string& what,
             std::vector<HostTensor> inputs, Reference ref) {
  const ir::OpDef* def = ops::registry().find(op);
  if (!def) return;
  std::vector<Aval> avals;
  for (const auto& in : inputs) avals.push_back(in.aval);
  if (!def->infer(avals, attrs).ok()) return;
  std::string label = fmt::format("{} {} {}", def->name, dtypeName(inputs[0].aval.dtype), what);
  cases.push_back(OpCase{label, op, attrs, std::move(inputs), std::move(ref)});
}

void addReduceCase(std::vector<OpCase>& cases, OpCode op, HostTensor x, const Ints& axes, const std::string& note = "") {
  std::string what = x.aval.shape.toString() + " axes " + bracket(axes) + note;
  addCase(cases, op, ir::ReduceAttrs{axes}, what, {std::move(x)},
          [op, axes](const std::vector<HostTensor>& in) { return std::vector<HostTensor>{reduceRef(op, in[0], axes)}; });
}

void addReduceOps(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, Ints>> variants = {
      {Shape{}, {}},           {Shape{7}, {0}},          {Shape{7}, {}},              {Shape{2, 3}, {0}},
      {Shape{2, 3}, {1}},      {Shape{2, 3}, {1, 0}},    {Shape{2, 3, 5}, {1}},       {Shape{2, 3, 5}, {0, 2}},
      {Shape{2, 3, 5}, {0, 1, 2}}, {Shape{2, 3, 5}, {2}}, {Shape{2, 1, 3, 1}, {1, 3}}, {Shape{2, 1, 3, 1}, {0, 2}},
      {Shape{33, 17}, {0}},    {Shape{33, 17}, {1}},     {Shape{0, 3}, {0}},          {Shape{0, 3}, {1}},
      {Shape{3, 4, 5, 6}, {0, 2}}, {Shape{3, 4, 5, 6}, {1, 3}}, {Shape{1000}, {0}},
  };
  const OpCode ops[] = {OpCode::ReduceSum, OpCode::ReduceMax, OpCode::ReduceMin, OpCode::ReduceProd};
  for (OpCode op : ops) {
    for (const auto& [shape, axes] : variants)
      for (DType t : allDTypes()) addReduceCase(cases, op, inputFor(op, Aval{shape, t}, rng), axes);

    // NaN and infinities: max/min propagate NaN, sums and products follow IEEE.
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
      HostTensor x = HostTensor::fromValues(Aval{Shape{3, 5}, t},
                                            {1, nan, 3, -2, 0.5, -inf, 1, 2, inf, 0, 0.25, 0.5, -1, nan, nan});
      addReduceCase(cases, op, x, {1}, " with nan/inf");
      addReduceCase(cases, op, x, {0}, " with nan/inf");
    }
  }

  // Integer sums and products wrap like C.
  HostTensor u8 = HostTensor::zeros(Aval{Shape{300}, DType::U8});
  for (int64_t i = 0; i < u8.numel(); ++i) u8.set(i, 200 + static_cast<double>(i % 50));
  HostTensor i32 = HostTensor::fromValues(Aval{Shape{2, 3}, DType::I32}, {2e9, 2e9, -5, -2e9, -2e9, 7});
  HostTensor i64 = HostTensor::fromValues(Aval{Shape{3}, DType::I64}, {3037000500, 3037000500, 7});
  HostTensor u32 = HostTensor::fromValues(Aval{Shape{2, 2}, DType::U32}, {4e9, 1e9, 3e9, 3});
  for (OpCode op : {OpCode::ReduceSum, OpCode::ReduceProd}) {
    addReduceCase(cases, op, u8, {0}, " wrapping");
    addReduceCase(cases, op, i32, {1}, " wrapping");
    addReduceCase(cases, op, i64, {0}, " wrapping");
    addReduceCase(cases, op, u32, {0, 1}, " wrapping");
  }
}

// reduce_and / reduce_or over bools: every output element visits its inputs (unravel, no shared code with the
// numeric reference); empty reductions give true / false.
HostTensor logicalRef(bool isAnd, const HostTensor& x, const Ints& axes) {
  const Shape& s = x.aval.shape;
  Shape outShape;
  for (int d = 0; d < s.rank(); ++d)
    if (!inAxes(axes, d)) outShape.dims().push_back(s[d]);
  HostTensor out = HostTensor::zeros(Aval{outShape, DType::Bool});
  for (int64_t o = 0; o < out.numel(); ++o) {
    const std::vector<int64_t> kept = unravel(o, outShape);
    bool acc = isAnd;
    for (int64_t i = 0; i < x.numel(); ++i) {
      std::vector<int64_t> idx = unravel(i, s);
      std::vector<int64_t> k;
      for (int d = 0; d < s.rank(); ++d)
        if (!inAxes(axes, d)) k.push_back(idx[static_cast<size_t>(d)]);
      if (k != kept) continue;
      acc = isAnd ? acc && x.get(i) != 0 : acc || x.get(i) != 0;
    }
    out.set(o, acc ? 1 : 0);
  }
  return out;
}

void addLogicalReduceOps(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, Ints>> variants = {
      {Shape{}, {}},      {Shape{7}, {0}},        {Shape{2, 3}, {1}},    {Shape{2, 3}, {0, 1}}, {Shape{2, 3, 5}, {0, 2}},
      {Shape{2, 3, 5}, {1}}, {Shape{33, 17}, {0}}, {Shape{33, 17}, {1}}, {Shape{0, 3}, {0}},    {Shape{4, 0}, {1}},
  };
  for (OpCode op : {OpCode::ReduceAnd, OpCode::ReduceOr}) {
    const bool isAnd = op == OpCode::ReduceAnd;
    for (const auto& variant : variants) {
      const Shape& shape = variant.first;  // clang 14 captures no structured binding (the reference lambda)
      const auto& axes = variant.second;
      // Mostly true, mostly false and even: every row outcome appears.
      for (double pTrue : {0.9, 0.1, 0.5}) {
        HostTensor x = HostTensor::zeros(Aval{shape, DType::Bool});
        std::bernoulli_distribution coin(pTrue);
        for (int64_t i = 0; i < x.numel(); ++i) x.set(i, coin(rng) ? 1 : 0);
        addCase(cases, op, ir::ReduceAttrs{axes}, fmt::format("{} axes {} p {}", shape.toString(), bracket(axes), pTrue),
                {std::move(x)}, [isAnd, axes](const std::vector<HostTensor>& in) {
                  return std::vector<HostTensor>{logicalRef(isAnd, in[0], axes)};
                });
      }
    }
  }
}

// Values from {0, 1, 2} so that most rows have ties.
HostTensor tiedTensor(const Aval& a, std::mt19937& rng) {
  HostTensor t = HostTensor::zeros(a);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(rng() % (a.dtype == DType::Bool ? 2 : 3)));
  return t;
}

void addArgOps(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, int64_t>> variants = {
      {Shape{7}, 0},      {Shape{2, 3}, 0},  {Shape{2, 3}, 1},       {Shape{2, 3, 5}, 1}, {Shape{33, 17}, 0},
      {Shape{33, 17}, 1}, {Shape{1}, 0},     {Shape{2, 1, 3, 1}, 2}, {Shape{0, 3}, 1},
  };
  for (OpCode op : {OpCode::Argmax, OpCode::Argmin}) {
    bool isMax = op == OpCode::Argmax;
    int n = 0;
    for (const auto& [shape, axis] : variants) {
      for (DType t : allDTypes()) {
        // Alternate the index dtype and between distinct and tied values across cases.
        DType indexType = (n % 2) ? DType::I64 : DType::I32;
        bool tied = (n++ / 2) % 2;
        HostTensor x = tied ? tiedTensor(Aval{shape, t}, rng) : randomTensor(Aval{shape, t}, rng);
        ir::ArgReduceAttrs a{axis, indexType};
        addCase(cases, op, a,
                fmt::format("{} axis {} -> {}{}", shape.toString(), axis, dtypeName(indexType), tied ? " ties" : ""),
                {x}, [isMax, a](const std::vector<HostTensor>& in) {
                  return std::vector<HostTensor>{argRef(isMax, in[0], a.axis, a.indexDtype)};
                });
      }
    }
    // NaN: the first NaN of a row wins for both ops.
    double nan = std::nan("");
    for (DType t : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      HostTensor x = HostTensor::fromValues(Aval{Shape{3, 4}, t}, {1, nan, 3, nan, 5, -1, 5, 2, nan, 0, 9, -9});
      for (int64_t axis : {0, 1}) {
        ir::ArgReduceAttrs a{axis, DType::I32};
        addCase(cases, op, a, fmt::format("[3,4] axis {} with nan", axis), {x},
                [isMax, a](const std::vector<HostTensor>& in) {
                  return std::vector<HostTensor>{argRef(isMax, in[0], a.axis, a.indexDtype)};
                });
      }
    }
  }
}

}  // namespace

void addReductionCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  addReduceOps(cases, rng);
  addLogicalReduceOps(cases, rng);
  addArgOps(cases, rng);
}

}  // namespace tsr::test
