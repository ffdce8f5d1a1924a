#include "engine/ops/nested_graphs.h"

#include <cstring>

#include <fmt/format.h>

#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/runtime/interpreter.h"

namespace tsr::ops {

Result<Aval> ioAval(std::string_view op, const ir::Graph& g, ir::ValueId v) {
  if (v < 0 || v >= g.numValues())
    return makeError("{}: nested graph '{}' refers to value %{}, out of range", op, g.name, v);
  return g.aval(v);
}

runtime::BufferPtr copyToBuffer(const void* data, int64_t bytes) {
  auto b = runtime::Buffer::allocate(bytes);
  if (!b.ok()) raise(b.takeError());
  if (bytes) std::memcpy((*b)->data(), data, static_cast<size_t>(bytes));
  return std::move(b).value();
}

std::vector<runtime::BufferPtr> runGraph(std::string_view op, const ir::Graph& g,
                                         const std::vector<runtime::BufferPtr>& inputs) {
  auto outs = runtime::interpret(g, registry(), inputs);
  if (!outs.ok()) raise(makeError("{}: in nested graph '{}': {}", op, g.name, outs.error().message));
  return std::move(outs).value();
}

Status checkGraphInputs(std::string_view op, std::span<const Aval> all, std::span<const Aval> operands,
                        const ir::Graph& g, std::string_view which) {
  if (g.inputs().size() != operands.size())
    return opError(op, all, fmt::format("{} takes {} inputs but {} has {} operands for it", which,
                                        g.inputs().size(), op, operands.size()));
  for (size_t i = 0; i < operands.size(); ++i) {
    TSR_ASSIGN(Aval have, ioAval(op, g, g.inputs()[i]));
    if (!(have == operands[i]))
      return opError(op, all, fmt::format("{} input {} is {} but the operand is {}", which, i, have.toString(),
                                          operands[i].toString()));
  }
  return {};
}

void copyOut(const ir::MutableTensorView& out, const runtime::BufferPtr& from) {
  if (out.aval.bytes()) std::memcpy(out.data, from->data(), static_cast<size_t>(out.aval.bytes()));
}

void runGraphKernel(std::string_view op, const ir::Graph& g, const ir::CpuKernelArgs& args, size_t first) {
  std::vector<runtime::BufferPtr> in;
  for (size_t i = first; i < args.inputs.size(); ++i)
    in.push_back(copyToBuffer(args.inputs[i].data, args.inputs[i].aval.bytes()));
  std::vector<runtime::BufferPtr> outs = runGraph(op, g, in);
  for (size_t i = 0; i < outs.size(); ++i) copyOut(args.outputs[i], outs[i]);
}

std::vector<Array> range(const std::vector<Array>& v, size_t from, size_t n) {
  return std::vector<Array>(v.begin() + static_cast<std::ptrdiff_t>(from),
                            v.begin() + static_cast<std::ptrdiff_t>(from + n));
}

}  // namespace tsr::ops
