#include "tests/ops/harness.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "engine/ops/registry.h"
#include "engine/transform/trace.h"

namespace tsr::test {

HostTensor HostTensor::zeros(const Aval& aval) {
  HostTensor t;
  t.aval = aval;
  t.bytes.assign(static_cast<size_t>(aval.bytes()), 0);
  return t;
}

HostTensor HostTensor::fromValues(const Aval& aval, const std::vector<double>& values) {
  HostTensor t = zeros(aval);
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.numel(); ++i)
    t.set(static_cast<int64_t>(i), values[i]);
  return t;
}

double HostTensor::get(int64_t i) const {
  return dispatchDType(aval.dtype, [&]<class T>() -> double {
    T v;
    std::memcpy(&v, bytes.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return static_cast<float>(v);
    else return static_cast<double>(v);
  });
}

void HostTensor::set(int64_t i, double value) {
  dispatchDType(aval.dtype, [&]<class T>() {
    T v;
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) v = T(static_cast<float>(value));
    else if constexpr (std::is_same_v<T, bool>) v = value != 0.0;
    else if constexpr (std::is_integral_v<T>) v = static_cast<T>(static_cast<int64_t>(value));
    else v = static_cast<T>(value);
    std::memcpy(bytes.data() + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
  });
}

uint64_t HostTensor::getBits(int64_t i) const {
  uint64_t b = 0;
  auto sz = static_cast<size_t>(dtypeSize(aval.dtype));
  std::memcpy(&b, bytes.data() + static_cast<size_t>(i) * sz, sz);
  return b;
}

void HostTensor::setBits(int64_t i, uint64_t b) {
  auto sz = static_cast<size_t>(dtypeSize(aval.dtype));
  std::memcpy(bytes.data() + static_cast<size_t>(i) * sz, &b, sz);
}

std::vector<Array> applyOp(const OpCase& c, const std::vector<Array>& xs) {
  return bind(c.op, xs, c.attrs, std::source_location::current());
}

Array toArray(const HostTensor& t) { return Array::fromBytes(t.aval, t.bytes.data()); }

HostTensor toHost(const Array& a) {
  HostTensor t = HostTensor::zeros(a.aval());
  if (a.aval().bytes()) std::memcpy(t.bytes.data(), a.buffer()->data(), t.bytes.size());
  return t;
}

HostTensor randomTensor(const Aval& aval, std::mt19937& rng, double lo, double hi) {
  HostTensor t = HostTensor::zeros(aval);
  std::uniform_real_distribution<double> real(lo, hi);
  std::uniform_int_distribution<int> small(-5, 5);
  std::uniform_int_distribution<int> smallU(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (aval.dtype) {
      case DType::Bool: t.set(i, static_cast<double>(rng() & 1u)); break;
      case DType::U8:
      case DType::U32: t.set(i, smallU(rng)); break;
      case DType::I32:
      case DType::I64: t.set(i, small(rng)); break;
      default: t.set(i, real(rng)); break;
    }
  }
  return t;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (int d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + idx[static_cast<size_t>(d)];
  return flat;
}

int printFailures(const std::vector<Failure>& failures) {
  std::map<std::string, std::vector<const Failure*>> perOp;
  for (const auto& f : failures) perOp[f.op].push_back(&f);
  auto line = [](const Failure& f) { return f.op + " | " + f.where + ": " + f.what; };
  std::vector<const Failure*> rest;
  for (const auto& [op, fs] : perOp) {
    std::fprintf(stderr, "%s\n", line(*fs[0]).c_str());
    rest.insert(rest.end(), fs.begin() + 1, fs.end());
  }
  for (size_t i = 0; i < std::min<size_t>(60, rest.size()); ++i) std::fprintf(stderr, "%s\n", line(*rest[i]).c_str());
  for (const auto& [op, fs] : perOp) {
    std::set<std::string> where;
    for (const Failure* f : fs) where.insert(f->where);
    std::string list;
    int shown = 0;
    for (const auto& w : where)
      if (shown++ < 8) list += (list.empty() ? "" : "; ") + w;
    if (where.size() > 8) list += fmt::format("; and {} more", where.size() - 8);
    std::fprintf(stderr, "%s: %zu failures in %zu cases: %s\n", op.c_str(), fs.size(), where.size(), list.c_str());
  }
  return static_cast<int>(perOp.size());
}

std::vector<OpCase> allCases() {
  std::mt19937 rng(1234);
  std::vector<OpCase> cases;
  addElementwiseCases(cases, rng);
  addLayoutCases(cases, rng);
  addReductionCases(cases, rng);
  addCumulativeCases(cases, rng);
  addSortCases(cases, rng);
  addContractionCases(cases, rng);
  addIndexingCases(cases, rng);
  addMiscCases(cases, rng);
  addControlFlowCases(cases, rng);
  addCollectiveCases(cases, rng);
  addShardingCases(cases, rng);
  addConvolutionCases(cases, rng);
  addWindowCases(cases, rng);
  addAttentionCases(cases, rng);
  addBatchNormCases(cases, rng);
  addCrossEntropyCases(cases, rng);
  addLinalgCases(cases, rng);
  return cases;
}

const std::vector<Shape>& edgeShapes() {
  static const std::vector<Shape> shapes = {Shape{},     Shape{1},       Shape{7},        Shape{1, 1},
                                            Shape{3, 1}, Shape{1, 4},    Shape{2, 3},     Shape{2, 3, 5},
                                            Shape{2, 1, 3, 1}, Shape{33, 17}};
  return shapes;
}

const std::vector<DType>& allDTypes() {
  static const std::vector<DType> types = {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32,
                                           DType::I64, DType::U8,  DType::U32,  DType::Bool};
  return types;
}

void flushSubnormals(HostTensor& t) {
  auto flush = [&t]<class T>() {
    for (int64_t i = 0; i < t.numel(); ++i) {
      T v;
      std::memcpy(&v, t.bytes.data() + i * sizeof(T), sizeof(T));
      if (std::fpclassify(v) == FP_SUBNORMAL) v = std::signbit(v) ? T(-0.0) : T(0.0);
      std::memcpy(t.bytes.data() + i * sizeof(T), &v, sizeof(T));
    }
  };
  if (t.aval.dtype == DType::F32) flush.template operator()<float>();
  if (t.aval.dtype == DType::F64) flush.template operator()<double>();
}

HostTensor transposed(const HostTensor& t) {
  HostTensor r = HostTensor::zeros(Aval{Shape{t.aval.shape[1], t.aval.shape[0]}, t.aval.dtype});
  for (int64_t i = 0; i < t.aval.shape[0]; ++i)
    for (int64_t j = 0; j < t.aval.shape[1]; ++j) r.setBits(j * t.aval.shape[0] + i, t.getBits(i * t.aval.shape[1] + j));
  return r;
}

namespace {

// The first slice along dim 0 of `t`, as a tensor with dim 0 of size 1; and that slice tiled back to a shape.
HostTensor firstRow(const HostTensor& t) {
  auto dims = t.aval.shape.dims();
  dims[0] = 1;
  HostTensor r = HostTensor::zeros(Aval{Shape(dims), t.aval.dtype});
  for (int64_t i = 0; i < r.numel(); ++i) r.setBits(i, t.getBits(i));
  return r;
}
HostTensor tileRows(const HostTensor& row, const Shape& shape) {
  HostTensor r = HostTensor::zeros(Aval{shape, row.aval.dtype});
  for (int64_t i = 0; i < r.numel(); ++i) r.setBits(i, row.getBits(i % row.numel()));
  return r;
}

}  // namespace

Result<std::optional<FedGraph>> fedCaseGraph(const OpCase& c, Feed feed) {
  const auto& reg = ops::registry();
  const ir::OpDef* def = reg.find(c.op);
  if (!def) return makeError("{}: op not registered", c.label);
  const std::vector<HostTensor>& in = c.inputs;
  if (feed == Feed::Transposed && (in.empty() || in[0].aval.rank() != 2)) return std::optional<FedGraph>();
  if (feed == Feed::Broadcast &&
      !(def->family == "elementwise" && in.size() == 2 && in[1].aval.rank() >= 1 && in[1].aval.shape[0] > 1 &&
        in[0].aval.shape == in[1].aval.shape))
    return std::optional<FedGraph>();
  FedGraph f;
  f.operands = in;
  f.tag = feed == Feed::Direct ? " (graph)" : feed == Feed::Transposed ? " (transposed input)" : " (broadcast input)";
  std::vector<ir::ValueId> operands;
  for (size_t i = 0; i < in.size(); ++i) {
    if (feed == Feed::Transposed && i == 0) {
      HostTensor t = transposed(in[0]);
      ir::ValueId v = f.graph.addInput(t.aval);
      f.inputs.push_back(std::move(t));
      auto tr = f.graph.addNode(reg, ir::OpCode::Transpose, {v}, ir::TransposeAttrs{{1, 0}});
      if (!tr.ok()) return makeError("{}{}: {}", c.label, f.tag, tr.error().message);
      operands.push_back((*tr)[0]);
    } else if (feed == Feed::Broadcast && i == 1) {
      HostTensor row = firstRow(in[1]);
      f.operands[1] = tileRows(row, in[1].aval.shape);
      ir::ValueId v = f.graph.addInput(row.aval);
      ir::Ints dims(static_cast<size_t>(row.aval.rank()));
      for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
      f.inputs.push_back(std::move(row));
      auto bc = f.graph.addNode(reg, ir::OpCode::BroadcastInDim, {v},
                                ir::BroadcastInDimAttrs{in[1].aval.shape.dims(), dims});
      if (!bc.ok()) return makeError("{}{}: {}", c.label, f.tag, bc.error().message);
      operands.push_back((*bc)[0]);
    } else {
      operands.push_back(f.graph.addInput(in[i].aval));
      f.inputs.push_back(in[i]);
    }
  }
  auto res = f.graph.addNode(reg, c.op, operands, c.attrs);
  if (!res.ok()) return makeError("{}{}: {}", c.label, f.tag, res.error().message);
  f.graph.setOutputs(*res);
  return std::optional<FedGraph>(std::move(f));
}

Result<ir::Graph> caseGraph(const OpCase& c, bool transposedOperand0) {
  TSR_ASSIGN(std::optional<FedGraph> f, fedCaseGraph(c, transposedOperand0 ? Feed::Transposed : Feed::Direct));
  if (!f) return makeError("{}: operand 0 is not rank 2", c.label);
  return std::move(f->graph);
}

}  // namespace tsr::test
