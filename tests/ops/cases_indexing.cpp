// gather / scatter_add / scatter / scatter_mul / scatter_min / scatter_max cases: embedding lookup,
// take_along_axis with batch dims, a middle axis, scalar and empty indices, out-of-range indices (clamped by
// gather, dropped by the scatters) and duplicate indices (which scatter_add accumulates, scatter_mul multiplies,
// scatter_min and scatter_max compare, and where scatter keeps the last update in index order), for every data
// dtype and index dtype the ops accept. The references are naive multi-index loops.
#include <algorithm>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

namespace tsr::test {
namespace {

struct GatherSpec {
  std::string name;
  Shape x, idx;
  int64_t axis = 0, batchDims = 0;
  std::vector<double> indices;  // empty: random in [-2, A + 2), so some fall outside [0, A)
};

std::vector<GatherSpec> gatherSpecs() {
  return {
      {"embedding [V,C] by [B,T]", {7, 4}, {2, 3}, 0, 0, {0, 6, 3, 3, 1, 5}},
      {"embedding, out-of-range indices", {7, 4}, {2, 3}, 0, 0, {-1, 7, 100, 2, -100, 6}},
      {"take_along_axis [B,T,V] by [B,T]", {2, 3, 5}, {2, 3}, 2, 2, {}},
      {"batch dims then inner dim", {2, 3, 5, 4}, {2, 3, 2}, 2, 2, {}},
      {"middle axis", {2, 5, 3}, {4}, 1, 0, {4, 0, 2, 2}},
      {"middle axis, one batch dim", {2, 5, 3}, {2, 4}, 1, 1, {}},
      {"middle axis, rank-2 indices", {3, 6, 2}, {2, 2}, 1, 0, {}},
      {"last axis", {3, 4}, {5}, 1, 0, {}},
      {"scalar index", {5, 3}, {}, 0, 0, {3}},
      {"scalar index on axis 1", {5, 3}, {}, 1, 0, {2}},
      {"scalar index out of range", {5, 3}, {}, 0, 0, {9}},
      {"size-1 axis", {1, 4}, {3}, 0, 0, {0, 1, -1}},
      {"empty indices", {5, 3}, {0}, 0, 0, {}},
      {"duplicate indices", {5, 3}, {6}, 0, 0, {1, 1, 1, 4, 4, -1}},
  };
}

const std::vector<DType> kIndexDTypes = {DType::I32, DType::I64, DType::U32};

HostTensor makeIndices(const GatherSpec& s, DType t, std::mt19937& rng) {
  Aval a{s.idx, t};
  if (!s.indices.empty()) return HostTensor::fromValues(a, s.indices);
  // u32 wraps negatives to huge values, which are out of range all the same.
  std::uniform_int_distribution<int64_t> pick(-2, s.x[static_cast<int>(s.axis)] + 1);
  HostTensor h = HostTensor::zeros(a);
  for (int64_t i = 0; i < h.numel(); ++i) h.set(i, static_cast<double>(pick(rng)));
  return h;
}

Shape gatheredShape(const Shape& x, const Shape& idx, int64_t axis, int64_t batchDims) {
  std::vector<int64_t> d(x.dims().begin(), x.dims().begin() + axis);
  d.insert(d.end(), idx.dims().begin() + batchDims, idx.dims().end());
  d.insert(d.end(), x.dims().begin() + axis + 1, x.dims().end());
  return Shape(d);
}

// Calls f(gatheredFlat, xFlat or -1 when the index is out of range, clampedXFlat) for every gathered element.
template <class F>
void forEachGathered(const HostTensor& x, const HostTensor& idx, int64_t axis, int64_t bd, F&& f) {
  Shape out = gatheredShape(x.aval.shape, idx.aval.shape, axis, bd);
  const int r = idx.aval.rank() - static_cast<int>(bd);
  const auto a = static_cast<size_t>(axis);
  const double size = static_cast<double>(x.aval.shape[static_cast<int>(axis)]);
  for (int64_t o = 0; o < out.numel(); ++o) {
    std::vector<int64_t> oi = unravel(o, out);
    std::vector<int64_t> ii(oi.begin(), oi.begin() + bd);
    ii.insert(ii.end(), oi.begin() + axis, oi.begin() + axis + r);
    double j = idx.get(ravel(ii, idx.aval.shape));
    double clamped = std::min(std::max(j, 0.0), size - 1);
    std::vector<int64_t> xi(oi.begin(), oi.begin() + axis);
    xi.push_back(0);
    xi.insert(xi.end(), oi.begin() + axis + r, oi.end());
    xi[a] = static_cast<int64_t>(clamped);
    int64_t clampedFlat = ravel(xi, x.aval.shape);
    f(o, (j >= 0 && j < size) ? clampedFlat : -1, clampedFlat);
  }
}

HostTensor naiveGather(const HostTensor& x, const HostTensor& idx, int64_t axis, int64_t bd) {
  HostTensor out = HostTensor::zeros(Aval{gatheredShape(x.aval.shape, idx.aval.shape, axis, bd), x.aval.dtype});
  forEachGathered(x, idx, axis, bd,
                  [&](int64_t o, int64_t, int64_t clamped) { out.setBits(o, x.getBits(clamped)); });
  return out;
}

HostTensor naiveScatterAdd(const HostTensor& x, const HostTensor& idx, const HostTensor& upd, int64_t axis,
                           int64_t bd) {
  std::vector<double> acc(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) acc[static_cast<size_t>(i)] = x.get(i);
  forEachGathered(x, idx, axis, bd, [&](int64_t u, int64_t target, int64_t) {
    if (target >= 0) acc[static_cast<size_t>(target)] += upd.get(u);
  });
  return HostTensor::fromValues(x.aval, acc);
}

// scatter and its combining variants: updates folded into x in index order (forEachGathered visits the updates
// row-major, so the updates of one target come in the order of their indices). Integers multiply modulo 2^bits;
// min and max let NaN win, as the elementwise ops do.
HostTensor naiveScatter(ir::OpCode op, const HostTensor& x, const HostTensor& idx, const HostTensor& upd,
                        int64_t axis, int64_t bd) {
  HostTensor out = x;
  const bool integer = isInteger(x.aval.dtype);
  std::vector<double> acc(static_cast<size_t>(x.numel()));
  std::vector<uint64_t> wrapped(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    acc[static_cast<size_t>(i)] = x.get(i);
    if (integer) wrapped[static_cast<size_t>(i)] = static_cast<uint64_t>(static_cast<int64_t>(x.get(i)));
  }
  forEachGathered(x, idx, axis, bd, [&](int64_t u, int64_t target, int64_t) {
    if (target < 0) return;
    double& a = acc[static_cast<size_t>(target)];
    const double v = upd.get(u);
    switch (op) {
      case ir::OpCode::Scatter: out.setBits(target, upd.getBits(u)); break;
      case ir::OpCode::ScatterMul:
        a *= v;
        if (integer) wrapped[static_cast<size_t>(target)] *= static_cast<uint64_t>(static_cast<int64_t>(v));
        break;
      case ir::OpCode::ScatterMin: a = (a < v || a != a) ? a : v; break;
      case ir::OpCode::ScatterMax: a = (a > v || a != a) ? a : v; break;
      default: break;
    }
  });
  if (op == ir::OpCode::Scatter) return out;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (op == ir::OpCode::ScatterMul && integer) out.setBits(i, wrapped[static_cast<size_t>(i)]);
    else out.set(i, acc[static_cast<size_t>(i)]);
  }
  return out;
}

bool accepts(ir::OpCode op, const std::vector<Aval>& operands, const ir::Attrs& attrs) {
  const ir::OpDef* def = ops::registry().find(op);
  return def && def->infer(operands, attrs).ok();
}

}  // namespace

void addIndexingCases(std::vector<OpCase>& cases, std::mt19937& rng) {
  for (const GatherSpec& s : gatherSpecs()) {
    ir::GatherAttrs at;
    at.axis = s.axis;
    at.batchDims = s.batchDims;
    Shape gathered = gatheredShape(s.x, s.idx, s.axis, s.batchDims);
    for (DType t : allDTypes()) {
      for (DType it : kIndexDTypes) {
        Aval xa{s.x, t}, ia{s.idx, it}, ua{gathered, t};
        std::string where = fmt::format("{} x {} idx {}{} axis {} batch_dims {}", dtypeName(t), s.x.toString(),
                                        dtypeName(it), s.idx.toString(), s.axis, s.batchDims);
        if (accepts(ir::OpCode::Gather, {xa, ia}, at)) {
          OpCase c;
          c.label = "gather " + s.name + " " + where;
          c.op = ir::OpCode::Gather;
          c.attrs = at;
          c.inputs = {randomTensor(xa, rng), makeIndices(s, it, rng)};
          c.reference = [at](const std::vector<HostTensor>& in) {
            return std::vector<HostTensor>{naiveGather(in[0], in[1], at.axis, at.batchDims)};
          };
          cases.push_back(std::move(c));
        }
        if (accepts(ir::OpCode::ScatterAdd, {xa, ia, ua}, at)) {
          OpCase c;
          c.label = "scatter_add " + s.name + " " + where;
          c.op = ir::OpCode::ScatterAdd;
          c.attrs = at;
          c.inputs = {randomTensor(xa, rng), makeIndices(s, it, rng), randomTensor(ua, rng)};
          c.reference = [at](const std::vector<HostTensor>& in) {
            return std::vector<HostTensor>{naiveScatterAdd(in[0], in[1], in[2], at.axis, at.batchDims)};
          };
          cases.push_back(std::move(c));
        }
        for (ir::OpCode op : {ir::OpCode::Scatter, ir::OpCode::ScatterMul, ir::OpCode::ScatterMin,
                              ir::OpCode::ScatterMax}) {
          if (!accepts(op, {xa, ia, ua}, at)) continue;
          OpCase c;
          c.label = fmt::format("{} {} {}", ir::coreOpName(op), s.name, where);
          c.op = op;
          c.attrs = at;
          c.inputs = {randomTensor(xa, rng), makeIndices(s, it, rng), randomTensor(ua, rng)};
          c.reference = [op, at](const std::vector<HostTensor>& in) {
            return std::vector<HostTensor>{naiveScatter(op, in[0], in[1], in[2], at.axis, at.batchDims)};
          };
          cases.push_back(std::move(c));
        }
      }
    }
  }
  // scatter_mul with zeros among updates that share an index, and a zero in x: the gradient check's case for
  // the products that leave one factor out (no division by a zero update).
  {
    ir::GatherAttrs at{0, 0};
    OpCase c;
    c.label = "scatter_mul zero updates at repeated indices f64";
    c.op = ir::OpCode::ScatterMul;
    c.attrs = at;
    c.inputs = {HostTensor::fromValues(Aval{Shape{4, 2}, DType::F64}, {1.5, -0.5, 0.0, 2.0, 0.75, 1.25, -1.0, 0.5}),
                HostTensor::fromValues(Aval{Shape{6}, DType::I32}, {0, 0, 1, 2, 2, 2}),
                HostTensor::fromValues(Aval{Shape{6, 2}, DType::F64},
                                       {0.0, 1.5, -2.0, 0.0, 0.5, -1.5, 0.0, 0.0, 1.25, 0.0, -0.75, 2.0})};
    c.reference = [at](const std::vector<HostTensor>& in) {
      return std::vector<HostTensor>{naiveScatter(ir::OpCode::ScatterMul, in[0], in[1], in[2], at.axis, at.batchDims)};
    };
    cases.push_back(std::move(c));
  }
}

}  // namespace tsr::test
