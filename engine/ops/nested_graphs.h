#pragma once
// What the ops whose attrs hold nested graphs (scan, cond, while_loop, custom_vjp_call) share: checking a nested
// graph's signature against the operands in their infer rules, and running it on host buffers in their CPU kernels
// (with the reference interpreter).
#include <span>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/ir/op_def.h"
#include "engine/runtime/buffer.h"
#include "engine/transform/array.h"

namespace tsr::ops {

// The aval of a graph's input or output, or an error for a malformed graph (verify() names the problem).
Result<Aval> ioAval(std::string_view op, const ir::Graph& g, ir::ValueId v);

// Checks that g takes exactly `operands` (what `which` names in messages: "the true branch", "the body"); `all`
// are the op's operands, for the message.
Status checkGraphInputs(std::string_view op, std::span<const Aval> all, std::span<const Aval> operands,
                        const ir::Graph& g, std::string_view which);

// A copy of host bytes as a buffer the interpreter takes; raises when the allocation fails (kernels cannot return
// errors; the caller's capture() turns this into one).
runtime::BufferPtr copyToBuffer(const void* data, int64_t bytes);
// Runs g with the reference interpreter; raises an error naming the op and the graph.
std::vector<runtime::BufferPtr> runGraph(std::string_view op, const ir::Graph& g,
                                         const std::vector<runtime::BufferPtr>& inputs);
void copyOut(const ir::MutableTensorView& out, const runtime::BufferPtr& from);
// A kernel that is g: runs it on the kernel's inputs from `first` on and writes the kernel's outputs.
void runGraphKernel(std::string_view op, const ir::Graph& g, const ir::CpuKernelArgs& args, size_t first);

// v[from, from + n).
std::vector<Array> range(const std::vector<Array>& v, size_t from, size_t n);

}  // namespace tsr::ops
