#include "engine/ops/op_helpers.h"

#include <fmt/format.h>

namespace tsr::ops {

std::string describeAvals(std::span<const Aval> avals) {
  std::string s;
  for (size_t i = 0; i < avals.size(); ++i) {
    if (i) s += (i + 1 == avals.size()) ? " and " : ", ";
    s += avals[i].toString();
  }
  return s;
}

Error opError(std::string_view op, std::span<const Aval> operands, std::string_view what) {
  if (operands.empty()) return Error{fmt::format("{}: {}", op, what)};
  return Error{fmt::format("{}: {}; operands {}", op, what, describeAvals(operands))};
}

std::string bracket(const ir::Ints& v) { return fmt::format("[{}]", joinInts(v)); }

Status checkArity(std::string_view op, std::span<const Aval> operands, size_t n) {
  if (operands.size() != n)
    return Error{fmt::format("{}: expects {} operand{}, got {}", op, n, n == 1 ? "" : "s", operands.size())};
  return {};
}

ir::Cost elementwiseCost(std::span<const Aval> in, std::span<const Aval> out, double flopsPerElement) {
  ir::Cost c;
  for (const auto& a : in) c.bytesRead += a.bytes();
  for (const auto& a : out) {
    c.bytesWritten += a.bytes();
    c.flops += flopsPerElement * static_cast<double>(a.numel());
  }
  return c;
}

ir::Cost movementCost(std::span<const Aval> in, std::span<const Aval> out) { return elementwiseCost(in, out, 0); }

void addCoreOp(ir::OpRegistry& reg, ir::OpDef def) {
  TSR_CHECK(def.infer && def.cost && def.cpu);
  auto r = reg.add(std::move(def));
  TSR_CHECK_MSG(r.ok(), r.ok() ? "" : r.error().message.c_str());
}

ir::OpDef coreOp(ir::OpCode code, std::string family, ir::FusionKind fusion, int numOperands, int numResults) {
  ir::OpDef d;
  d.code = code;
  d.name = ir::coreOpName(code);
  d.family = std::move(family);
  d.fusion = fusion;
  d.numOperands = numOperands;
  d.numResults = numResults;
  d.attrsIndex = ir::coreAttrsIndex(code);
  return d;
}

}  // namespace tsr::ops
