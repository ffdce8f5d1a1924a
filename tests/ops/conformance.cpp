// The conformance check of one op case (harness.h: checkConformance): the op's CPU kernel, and the op as a
// one-node graph run by the interpreter with its operands fed directly, through a transpose and (binary
// elementwise ops) broadcast from one row, each against the case's independent reference.
#include <cmath>
#include <cstring>

#include "engine/ops/registry.h"
#include "engine/runtime/interpreter.h"
#include "tests/ops/harness.h"

namespace tsr::test {

namespace {

void defaultTolerance(DType t, double& rtol, double& atol) {
  switch (t) {
    case DType::F32: rtol = 2e-5; atol = 1e-6; break;
    case DType::F64: rtol = 1e-12; atol = 1e-14; break;
    case DType::BF16: rtol = 1.6e-2; atol = 1e-3; break;
    case DType::F16: rtol = 2e-3; atol = 1e-4; break;
    default: rtol = 0; atol = 0; break;
  }
}


// The first slice along dim 0 of `t`, as a tensor with dim 0 of size 1; and that slice tiled back to t's shape.
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

// How a case's operands reach the op inside the graph.
enum class Feed { Direct, Transposed, Broadcast };

}  // namespace

std::string compareTensors(const HostTensor& got, const HostTensor& want, double rtol, double atol) {
  if (!(got.aval == want.aval)) return "aval " + got.aval.toString() + ", reference " + want.aval.toString();
  for (int64_t i = 0; i < want.numel(); ++i) {
    double g = got.get(i), w = want.get(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    bool ok = isFloating(want.aval.dtype) ? std::fabs(g - w) <= atol + rtol * std::fabs(w)
                                          : got.getBits(i) == want.getBits(i);
    if (!ok) {
      return "element " + std::to_string(i) + " of " + want.aval.toString() + ": got " + std::to_string(g) +
             ", reference " + std::to_string(w);
    }
  }
  return "";
}

std::string compareWithReference(const HostTensor& got, const HostTensor& want, const OpCase& c) {
  double rtol, atol;
  defaultTolerance(want.aval.dtype, rtol, atol);
  if (c.rtol >= 0) rtol = c.rtol;
  if (c.atol >= 0) atol = c.atol;
  return compareTensors(got, want, rtol, atol);
}

HostTensor fromBuffer(const runtime::BufferPtr& b, const Aval& a) {
  HostTensor t = HostTensor::zeros(a);
  if (a.bytes()) std::memcpy(t.bytes.data(), b->data(), static_cast<size_t>(a.bytes()));
  return t;
}

runtime::BufferPtr toBuffer(const HostTensor& t) {
  auto b = runtime::Buffer::allocate(t.aval.bytes());
  if (t.aval.bytes()) std::memcpy((*b)->data(), t.bytes.data(), t.bytes.size());
  return *b;
}

std::vector<std::string> checkConformance(const OpCase& c, int* graphRuns) {
  const auto& reg = ops::registry();
  std::vector<std::string> messages;
  auto failed = [&messages](std::string m) {
    messages.push_back(std::move(m));
    return messages;
  };
  const ir::OpDef* def = reg.find(c.op);
  if (!def) return failed(c.label + ": op not registered");
  std::vector<Aval> avals;
  std::vector<runtime::BufferPtr> bufs;
  for (const auto& in : c.inputs) {
    avals.push_back(in.aval);
    auto b = runtime::Buffer::allocate(in.aval.bytes());
    if (!b.ok()) return failed(c.label + ": " + b.error().message);
    if (in.aval.bytes()) std::memcpy((*b)->data(), in.bytes.data(), in.bytes.size());
    bufs.push_back(*b);
  }
  std::vector<HostTensor> want = c.reference(c.inputs);

  // (1) the kernel directly.
  std::vector<Aval> outAvals;
  auto outs = runtime::runCpuOp(*def, bufs, avals, c.attrs, &outAvals);
  if (!outs.ok()) return failed(c.label + ": " + outs.error().message);
  if (outs->size() != want.size()) return failed(c.label + ": wrong number of results");
  for (size_t r = 0; r < want.size(); ++r) {
    std::string diff = compareWithReference(fromBuffer((*outs)[r], outAvals[r]), want[r], c);
    if (!diff.empty()) messages.push_back(c.label + " result " + std::to_string(r) + ": " + diff);
  }

  // (2) the same op as a graph, verified and interpreted: operands fed directly, operand 0 produced by a
  // transpose of transposed data, and (binary elementwise ops) operand 1 broadcast from its first row.
  for (Feed feed : {Feed::Direct, Feed::Transposed, Feed::Broadcast}) {
    std::vector<HostTensor> inputs = c.inputs;
    if (feed == Feed::Transposed && (inputs.empty() || inputs[0].aval.rank() != 2)) continue;
    if (feed == Feed::Broadcast && !(def->family == "elementwise" && inputs.size() == 2 &&
                                     inputs[1].aval.rank() >= 1 && inputs[1].aval.shape[0] > 1 &&
                                     inputs[0].aval.shape == inputs[1].aval.shape))
      continue;
    if (feed == Feed::Broadcast) inputs[1] = tileRows(firstRow(inputs[1]), inputs[1].aval.shape);
    std::vector<HostTensor> expect = feed == Feed::Broadcast ? c.reference(inputs) : want;
    const char* tag = feed == Feed::Direct ? " (graph)" : feed == Feed::Transposed ? " (transposed input)" : " (broadcast input)";

    ir::Graph g;
    std::vector<runtime::BufferPtr> feeds;
    std::vector<ir::ValueId> operands;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (feed == Feed::Transposed && i == 0) {
        HostTensor t = transposed(inputs[0]);
        ir::ValueId in = g.addInput(t.aval);
        feeds.push_back(toBuffer(t));
        auto tr = g.addNode(reg, ir::OpCode::Transpose, {in}, ir::TransposeAttrs{{1, 0}});
        if (!tr.ok()) return failed(c.label + tag + ": " + tr.error().message);
        operands.push_back((*tr)[0]);
      } else if (feed == Feed::Broadcast && i == 1) {
        HostTensor row = firstRow(inputs[1]);
        ir::ValueId in = g.addInput(row.aval);
        feeds.push_back(toBuffer(row));
        ir::Ints dims(static_cast<size_t>(row.aval.rank()));
        for (size_t d = 0; d < dims.size(); ++d) dims[d] = static_cast<int64_t>(d);
        auto bc = g.addNode(reg, ir::OpCode::BroadcastInDim, {in},
                            ir::BroadcastInDimAttrs{inputs[1].aval.shape.dims(), dims});
        if (!bc.ok()) return failed(c.label + tag + ": " + bc.error().message);
        operands.push_back((*bc)[0]);
      } else {
        operands.push_back(g.addInput(inputs[i].aval));
        feeds.push_back(toBuffer(inputs[i]));
      }
    }
    auto res = g.addNode(reg, c.op, operands, c.attrs);
    if (!res.ok()) return failed(c.label + tag + ": " + res.error().message);
    g.setOutputs(*res);
    auto st = ir::verify(g, reg);
    if (!st.ok()) return failed(c.label + tag + ": " + st.error().message);
    auto gouts = runtime::interpret(g, reg, feeds);
    if (!gouts.ok()) return failed(c.label + tag + ": " + gouts.error().message);
    for (size_t r = 0; r < expect.size(); ++r) {
      std::string diff = compareWithReference(fromBuffer((*gouts)[r], g.aval((*res)[r])), expect[r], c);
      if (!diff.empty()) messages.push_back(c.label + tag + " result " + std::to_string(r) + ": " + diff);
    }
    if (graphRuns) ++*graphRuns;
  }
  return messages;
}

}  // namespace tsr::test
