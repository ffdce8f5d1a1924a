// Conformance cases for the layout family. Each reference walks the result with unravel() and finds the
// source element with index arithmetic written from the XLA/StableHLO definitions, copying raw bits so it
// is exact for every dtype.
#include <algorithm>
#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {

namespace {

using ir::Ints;
using ir::OpCode;
using MakeInputs = std::function<std::vector<HostTensor>(DType)>;

std::string bracket(const Ints& v) { return "[" + joinInts(v) + "]"; }

// Adds one case per dtype the op's infer rule accepts for the inputs `make` builds.
void addForDTypes(std::vector<OpCase>& cases, OpCode op, const ir::Attrs& attrs, const std::string& what,
                  const MakeInputs& make, const Reference& ref) {
  const ir::OpDef* def = ops::registry().find(op);
  if (!def) return;
  for (DType t : allDTypes()) {
    std::vector<HostTensor> inputs = make(t);
    std::vector<Aval> avals;
    for (const auto& in : inputs) avals.push_back(in.aval);
    if (!def->infer(avals, attrs).ok()) continue;
    std::string label = fmt::format("{} {} {}", def->name, dtypeName(t), what);
    cases.push_back(OpCase{label, op, attrs, std::move(inputs), ref});
  }
}

// Result element idx is source element srcFlat(idx), or the element with bits `fillBits` where srcFlat returns -1.
template <class F>
HostTensor gatherRef(const HostTensor& src, const Shape& outShape, F&& srcFlat, uint64_t fillBits = 0) {
  HostTensor out = HostTensor::zeros(Aval{outShape, src.aval.dtype});
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t s = srcFlat(unravel(i, outShape));
    out.setBits(i, s < 0 ? fillBits : src.getBits(s));
  }
  return out;
}

HostTensor scalarI32(int64_t v) { return HostTensor::fromValues(Aval{Shape{}, DType::I32}, {static_cast<double>(v)}); }

void addBroadcastInDim(std::vector<OpCase>& cases, std::mt19937& rng) {
  struct V { Shape in; Ints shape, dims; };
  const std::vector<V> variants = {
      {Shape{}, {3, 4}, {}},          {Shape{3}, {2, 3}, {1}},           {Shape{3}, {3, 2}, {0}},
      {Shape{1, 4}, {3, 4}, {0, 1}},  {Shape{2, 1, 3}, {2, 5, 3, 4}, {0, 1, 2}},
      {Shape{1}, {1}, {0}},           {Shape{2, 3}, {2, 0, 3}, {0, 2}},  {Shape{5, 1}, {4, 5, 7}, {1, 2}},
  };
  for (const V& v : variants) {
    ir::BroadcastInDimAttrs a{v.shape, v.dims};
    auto ref = [a](const std::vector<HostTensor>& in) {
      const Shape& s = in[0].aval.shape;
      return std::vector<HostTensor>{gatherRef(in[0], Shape(a.shape), [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> idx(static_cast<size_t>(s.rank()));
        for (int i = 0; i < s.rank(); ++i) idx[i] = s[i] == 1 ? 0 : o[static_cast<size_t>(a.broadcastDims[i])];
        return ravel(idx, s);
      })};
    };
    addForDTypes(cases, OpCode::BroadcastInDim, a,
                 v.in.toString() + " -> " + bracket(v.shape) + " dims " + bracket(v.dims),
                 [&](DType t) { return std::vector<HostTensor>{randomTensor(Aval{v.in, t}, rng)}; }, ref);
  }
}

void addReshape(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, Ints>> variants = {
      {Shape{2, 3}, {6}},  {Shape{}, {1, 1}},       {Shape{2, 3, 4}, {4, 6}}, {Shape{7}, {7, 1}},
      {Shape{1}, {}},      {Shape{2, 1, 3, 1}, {3, 2}}, {Shape{0, 3}, {3, 0}},
  };
  for (const auto& variant : variants) {
    const auto& in = variant.first;
    const auto& shape = variant.second;
    ir::ReshapeAttrs a{shape};
    auto ref = [a](const std::vector<HostTensor>& x) {
      return std::vector<HostTensor>{gatherRef(x[0], Shape(a.shape), [&](const std::vector<int64_t>& o) {
        return ravel(o, Shape(a.shape));
      })};
    };
    addForDTypes(cases, OpCode::Reshape, a, in.toString() + " -> " + bracket(shape),
                 [&](DType t) { return std::vector<HostTensor>{randomTensor(Aval{in, t}, rng)}; }, ref);
  }
}

void addTranspose(std::vector<OpCase>& cases, std::mt19937& rng) {
  std::vector<std::pair<Shape, Ints>> variants = {
      {Shape{}, {}},           {Shape{7}, {0}},          {Shape{33, 17}, {1, 0}}, {Shape{3, 1}, {1, 0}},
      {Shape{2, 3, 1, 4}, {3, 1, 0, 2}}, {Shape{40, 3, 37}, {2, 1, 0}},
  };
  Ints perm = {0, 1, 2};
  do variants.push_back({Shape{2, 3, 4}, perm});
  while (std::next_permutation(perm.begin(), perm.end()));
  for (const auto& variant : variants) {
    const auto& in = variant.first;
    const auto& p = variant.second;
    ir::TransposeAttrs a{p};
    auto ref = [a](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      Shape outShape;
      for (int64_t d : a.perm) outShape.dims().push_back(s[static_cast<int>(d)]);
      return std::vector<HostTensor>{gatherRef(x[0], outShape, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> idx(o.size());
        for (size_t i = 0; i < o.size(); ++i) idx[static_cast<size_t>(a.perm[i])] = o[i];
        return ravel(idx, s);
      })};
    };
    addForDTypes(cases, OpCode::Transpose, a, in.toString() + " perm " + bracket(p),
                 [&](DType t) { return std::vector<HostTensor>{randomTensor(Aval{in, t}, rng)}; }, ref);
  }
}

void addSlice(std::vector<OpCase>& cases, std::mt19937& rng) {
  struct V { Shape in; Ints starts, limits, strides; };
  const std::vector<V> variants = {
      {Shape{}, {}, {}, {}},
      {Shape{7}, {1}, {6}, {2}},
      {Shape{4, 5}, {0, 1}, {4, 5}, {1, 1}},
      {Shape{5, 6, 7}, {1, 0, 2}, {5, 6, 7}, {2, 3, 1}},
      {Shape{4}, {2}, {2}, {1}},
      {Shape{3, 1, 4, 2}, {0, 0, 1, 1}, {3, 1, 4, 2}, {2, 1, 2, 5}},
      {Shape{33, 17}, {3, 2}, {30, 17}, {4, 3}},
  };
  for (const V& v : variants) {
    ir::SliceAttrs a{v.starts, v.limits, v.strides};
    auto ref = [a](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      Shape outShape;
      for (size_t i = 0; i < a.starts.size(); ++i) {
        int64_t n = 0;
        for (int64_t j = a.starts[i]; j < a.limits[i]; j += a.strides[i]) ++n;
        outShape.dims().push_back(n);
      }
      return std::vector<HostTensor>{gatherRef(x[0], outShape, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> idx(o.size());
        for (size_t i = 0; i < o.size(); ++i) idx[i] = a.starts[i] + o[i] * a.strides[i];
        return ravel(idx, s);
      })};
    };
    addForDTypes(cases, OpCode::Slice, a,
                 fmt::format("{} {}:{}:{}", v.in.toString(), bracket(v.starts), bracket(v.limits), bracket(v.strides)),
                 [&](DType t) { return std::vector<HostTensor>{randomTensor(Aval{v.in, t}, rng)}; }, ref);
  }
}

// XLA clamps a dynamic start so that [start, start + size) lies inside [0, dim).
int64_t clampStart(int64_t start, int64_t dim, int64_t size) { return std::max<int64_t>(0, std::min(start, dim - size)); }

int64_t startValue(const HostTensor& t) {
  return t.aval.dtype == DType::U32 ? static_cast<int64_t>(static_cast<uint32_t>(t.getBits(0)))
                                    : static_cast<int64_t>(t.get(0));
}

void addDynamicSlice(std::vector<OpCase>& cases, std::mt19937& rng) {
  struct V { Shape in; Ints starts, sizes; DType indexType = DType::I32; };
  const std::vector<V> variants = {
      {Shape{}, {}, {}},
      {Shape{5}, {2}, {3}},
      {Shape{5}, {4}, {3}},
      {Shape{5}, {-3}, {2}},
      {Shape{4, 6}, {1, 5}, {2, 3}},
      {Shape{3, 4, 5}, {-1, 2, 100}, {3, 2, 1}},
      {Shape{4, 6}, {2, 2}, {0, 3}},
      {Shape{6, 5}, {3, 1}, {2, 4}, DType::I64},
      {Shape{6, 5}, {7, 1}, {2, 4}, DType::U32},
  };
  for (const V& v : variants) {
    ir::DynamicSliceAttrs a{v.sizes};
    auto ref = [a](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      std::vector<int64_t> start;
      for (int i = 0; i < s.rank(); ++i)
        start.push_back(clampStart(startValue(x[static_cast<size_t>(1 + i)]), s[i], a.sizes[static_cast<size_t>(i)]));
      return std::vector<HostTensor>{gatherRef(x[0], Shape(a.sizes), [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> idx(o.size());
        for (size_t i = 0; i < o.size(); ++i) idx[i] = start[i] + o[i];
        return ravel(idx, s);
      })};
    };
    auto make = [&](DType t) {
      std::vector<HostTensor> in{randomTensor(Aval{v.in, t}, rng)};
      for (int64_t s : v.starts) {
        HostTensor idx = HostTensor::zeros(Aval{Shape{}, v.indexType});
        idx.setBits(0, static_cast<uint64_t>(s));
        in.push_back(idx);
      }
      return in;
    };
    addForDTypes(cases, OpCode::DynamicSlice, a,
                 fmt::format("{} starts {} ({}) sizes {}", v.in.toString(), bracket(v.starts),
                             dtypeName(v.indexType), bracket(v.sizes)),
                 make, ref);
  }
}

void addDynamicUpdateSlice(std::vector<OpCase>& cases, std::mt19937& rng) {
  struct V { Shape in, update; Ints starts; };
  const std::vector<V> variants = {
      {Shape{}, Shape{}, {}},
      {Shape{5}, Shape{2}, {4}},
      {Shape{4, 6}, Shape{2, 3}, {1, -2}},
      {Shape{3, 4, 5}, Shape{1, 4, 2}, {2, 0, 9}},
      {Shape{4, 3}, Shape{0, 3}, {1, 0}},
      {Shape{2, 3, 1, 4}, Shape{2, 2, 1, 3}, {0, 1, 0, 1}},
  };
  for (const V& v : variants) {
    auto ref = [](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      const Shape& u = x[1].aval.shape;
      std::vector<int64_t> start;
      for (int i = 0; i < s.rank(); ++i) start.push_back(clampStart(startValue(x[static_cast<size_t>(2 + i)]), s[i], u[i]));
      HostTensor out = x[0];
      for (int64_t j = 0; j < x[1].numel(); ++j) {
        std::vector<int64_t> idx = unravel(j, u);
        for (size_t i = 0; i < idx.size(); ++i) idx[i] += start[i];
        out.setBits(ravel(idx, s), x[1].getBits(j));
      }
      return std::vector<HostTensor>{out};
    };
    auto make = [&](DType t) {
      std::vector<HostTensor> in{randomTensor(Aval{v.in, t}, rng), randomTensor(Aval{v.update, t}, rng)};
      for (int64_t s : v.starts) in.push_back(scalarI32(s));
      return in;
    };
    addForDTypes(cases, OpCode::DynamicUpdateSlice, ir::NoAttrs{},
                 fmt::format("{} <- {} at {}", v.in.toString(), v.update.toString(), bracket(v.starts)), make, ref);
  }
}

void addConcatenate(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<std::vector<Shape>, int64_t>> variants = {
      {{Shape{3}}, 0},
      {{Shape{2, 3}, Shape{4, 3}}, 0},
      {{Shape{2, 3}, Shape{2, 1}, Shape{2, 4}}, 1},
      {{Shape{2, 3, 4}, Shape{2, 3, 4}}, 2},
      {{Shape{2, 0}, Shape{2, 3}, Shape{2, 0}}, 1},
      {{Shape{2, 1, 3, 1}, Shape{2, 2, 3, 1}}, 1},
      {{Shape{1}, Shape{1}, Shape{1}, Shape{1}}, 0},
  };
  for (const auto& variant : variants) {
    const auto& shapes = variant.first;
    const auto& axis = variant.second;
    ir::ConcatenateAttrs a{axis};
    auto ref = [axis](const std::vector<HostTensor>& x) {
      auto ax = static_cast<int>(axis);
      Shape outShape = x[0].aval.shape;
      outShape[ax] = 0;
      for (const auto& t : x) outShape[ax] += t.aval.shape[ax];
      HostTensor out = HostTensor::zeros(Aval{outShape, x[0].aval.dtype});
      for (int64_t i = 0; i < out.numel(); ++i) {
        std::vector<int64_t> idx = unravel(i, outShape);
        size_t k = 0;
        while (idx[static_cast<size_t>(ax)] >= x[k].aval.shape[ax]) idx[static_cast<size_t>(ax)] -= x[k++].aval.shape[ax];
        out.setBits(i, x[k].getBits(ravel(idx, x[k].aval.shape)));
      }
      return std::vector<HostTensor>{out};
    };
    std::string what;
    for (const auto& s : shapes) what += s.toString() + " ";
    auto make = [&](DType t) {
      std::vector<HostTensor> in;
      for (const auto& s : shapes) in.push_back(randomTensor(Aval{s, t}, rng));
      return in;
    };
    addForDTypes(cases, OpCode::Concatenate, a, what + "axis " + std::to_string(axis), make, ref);
  }
}

void addPad(std::vector<OpCase>& cases, std::mt19937& rng) {
  struct V { Shape in; Ints low, high, interior; };
  const std::vector<V> variants = {
      {Shape{}, {}, {}, {}},
      {Shape{5}, {1}, {2}, {0}},
      {Shape{5}, {-1}, {-2}, {0}},
      {Shape{5}, {0}, {0}, {2}},
      {Shape{3}, {-2}, {0}, {1}},
      {Shape{2, 3}, {1, -1}, {0, 2}, {1, 0}},
      {Shape{3, 4}, {-2, 0}, {1, -3}, {1, 2}},
      {Shape{0}, {1}, {1}, {3}},
      {Shape{2, 1, 3}, {0, 2, -1}, {1, 0, -1}, {2, 0, 1}},
  };
  for (const V& v : variants) {
    ir::PadAttrs a{v.low, v.high, v.interior};
    auto ref = [a](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      Shape outShape;
      for (int i = 0; i < s.rank(); ++i) {
        auto u = static_cast<size_t>(i);
        outShape.dims().push_back(a.low[u] + a.high[u] + s[i] + std::max<int64_t>(s[i] - 1, 0) * a.interior[u]);
      }
      auto src = [&](const std::vector<int64_t>& o) -> int64_t {
        std::vector<int64_t> idx(o.size());
        for (size_t i = 0; i < o.size(); ++i) {
          int64_t p = o[i] - a.low[i], step = a.interior[i] + 1;
          if (p < 0 || p % step != 0 || p / step >= s[static_cast<int>(i)]) return -1;
          idx[i] = p / step;
        }
        return ravel(idx, s);
      };
      return std::vector<HostTensor>{gatherRef(x[0], outShape, src, x[1].getBits(0))};
    };
    auto make = [&](DType t) {
      return std::vector<HostTensor>{randomTensor(Aval{v.in, t}, rng), randomTensor(Aval{Shape{}, t}, rng)};
    };
    addForDTypes(cases, OpCode::Pad, a,
                 fmt::format("{} low {} high {} interior {}", v.in.toString(), bracket(v.low), bracket(v.high),
                             bracket(v.interior)),
                 make, ref);
  }
}

void addIota(std::vector<OpCase>& cases) {
  const std::vector<std::pair<Ints, int64_t>> variants = {
      {{5}, 0}, {{2, 3}, 1}, {{2, 3}, 0}, {{2, 3, 4}, 1}, {{1}, 0}, {{0, 3}, 1}, {{2, 1, 3, 2}, 3},
  };
  for (const auto& variant : variants) {
    const auto& shape = variant.first;
    const auto& dim = variant.second;
    for (DType t : allDTypes()) {
      ir::IotaAttrs a{shape, t, dim};
      auto ref = [a](const std::vector<HostTensor>&) {
        Shape s(a.shape);
        HostTensor out = HostTensor::zeros(Aval{s, a.dtype});
        for (int64_t i = 0; i < out.numel(); ++i) out.set(i, static_cast<double>(unravel(i, s)[static_cast<size_t>(a.dimension)]));
        return std::vector<HostTensor>{out};
      };
      if (!ops::registry().find(OpCode::Iota)->infer({}, a).ok()) continue;
      cases.push_back(OpCase{fmt::format("iota {} {} dimension {}", dtypeName(t), bracket(shape), dim), OpCode::Iota, a,
                             {}, ref});
    }
  }
}

void addRev(std::vector<OpCase>& cases, std::mt19937& rng) {
  const std::vector<std::pair<Shape, Ints>> variants = {
      {Shape{}, {}},          {Shape{7}, {0}},         {Shape{2, 3}, {0, 1}},          {Shape{2, 3}, {1}},
      {Shape{2, 3, 4}, {2, 0}}, {Shape{3, 1, 4, 2}, {1, 3}}, {Shape{2, 3}, {}},          {Shape{0, 3}, {0}},
  };
  for (const auto& variant : variants) {
    const auto& in = variant.first;
    const auto& dims = variant.second;
    ir::RevAttrs a{dims};
    auto ref = [a](const std::vector<HostTensor>& x) {
      const Shape& s = x[0].aval.shape;
      return std::vector<HostTensor>{gatherRef(x[0], s, [&](const std::vector<int64_t>& o) {
        std::vector<int64_t> idx = o;
        for (int64_t d : a.dims) idx[static_cast<size_t>(d)] = s[static_cast<int>(d)] - 1 - o[static_cast<size_t>(d)];
        return ravel(idx, s);
      })};
    };
    addForDTypes(cases, OpCode::Rev, a, in.toString() + " dims " + bracket(dims),
                 [&](DType t) { return std::vector<HostTensor>{randomTensor(Aval{in, t}, rng)}; }, ref);
  }
}

}  // namespace

void addLayoutCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  addBroadcastInDim(cases, rng);
  addReshape(cases, rng);
  addTranspose(cases, rng);
  addSlice(cases, rng);
  addDynamicSlice(cases, rng);
  addDynamicUpdateSlice(cases, rng);
  addConcatenate(cases, rng);
  addPad(cases, rng);
  addIota(cases);
  addRev(cases, rng);
}

}  // namespace tsr::test
