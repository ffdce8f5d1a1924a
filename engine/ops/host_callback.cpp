// host_callback: a call of a function of the host program with the op's operands (engine/ir/host_callback.h).
// Every backend runs it on the host through its CPU kernel (the CUDA backend's host path copies the operands
// over). Its rules: the callback's avals; the operands whole on every device (a callback sees whole arrays, as
// JAX's do); reverse mode refused when a cotangent reaches it (jax.pure_callback: give it a custom_vjp); vmap by
// the callback's method, the sequential one looping over the examples here.
#include <fmt/format.h>

#include <stdexcept>

#include "engine/core/mxcsr.h"
#include "engine/dist/communicator.h"
#include "engine/ir/host_callback.h"
#include "engine/ops/op_helpers.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/transform/trace.h"

namespace tsr::ops {

namespace {

constexpr const char* kName = "host_callback";

Result<std::vector<Aval>> inferCallback(std::span<const Aval> ops, const ir::Attrs& attrs) {
  const auto& a = attrsAs<ir::HostCallbackAttrs>(attrs);
  ir::HostCallbackPtr cb = ir::hostCallbackOf(a);
  if (!cb)
    return opError(kName, ops, fmt::format("no callback {} in this process (a callback lives with the program "
                                           "that traced it)", a.callback));
  if (ops.size() != cb->operands.size() || !std::equal(ops.begin(), ops.end(), cb->operands.begin()))
    return opError(kName, ops, fmt::format("{} takes {}", cb->name, describeAvals(cb->operands)));
  return cb->results;
}

ir::Cost costCallback(std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
  return movementCost(in, out);
}

void callbackKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::HostCallbackAttrs>(args.attrs);
  ir::HostCallbackPtr cb = ir::hostCallbackOf(a);
  if (!cb) throw std::runtime_error(fmt::format("host_callback: no callback {} in this process", a.callback));
  // An effect with no results in an SPMD program (a print) runs once, on the first device, which holds its
  // operands whole (the shard rule gathers them), as JAX runs jax.debug.print. One with results runs on every
  // device, each of which needs them.
  if (cb->effectful && cb->results.empty())
    if (const dist::DeviceContext* d = dist::currentDevice(); d && d->position != 0) return;
  // The host's floating-point environment: jitted code flushes subnormals, which a user's numpy must not see.
  MxcsrScope ieee(MxcsrScope::current() & ~MxcsrScope::kFlushSubnormals);
  cb->fn(args.inputs, args.outputs);
}

std::vector<Array> callbackVjp(const ir::VjpArgs& args) {
  for (const Array& ct : args.cotangents)
    if (ct.valid()) {
      ir::HostCallbackPtr cb = ir::hostCallbackOf(attrsAs<ir::HostCallbackAttrs>(args.attrs));
      raise(makeError("{}: a host callback has no derivative; to differentiate through it, give it one with "
                      "custom_vjp (or custom_jvp)", cb ? cb->name : std::string(kName)));
    }
  return std::vector<Array>(args.operands.size());
}

// Example b's slice of a view whose leading dim is the batch.
ir::TensorView sliceOf(const ir::TensorView& v, const Aval& example, int64_t b) {
  return {static_cast<const char*>(v.data) + b * example.bytes(), example, 0};
}
ir::MutableTensorView sliceOf(const ir::MutableTensorView& v, const Aval& example, int64_t b) {
  return {static_cast<char*>(v.data) + b * example.bytes(), example, 0};
}

ir::BatchResult batchCallback(const ir::BatchArgs& args) {
  ir::HostCallbackPtr cb = ir::hostCallbackOf(attrsAs<ir::HostCallbackAttrs>(args.attrs));
  if (!cb) raise(makeError("{}: no callback in this process", kName));
  if (cb->vmap == ir::VmapMethod::Refused)
    raise(makeError("{}: vmap needs to know how to batch the call: give vmap_method ('sequential', "
                    "'expand_dims' or 'broadcast_all')", cb->name));
  const int64_t n = args.batchSize;
  std::vector<Array> operands;
  std::vector<bool> batched;
  for (size_t i = 0; i < args.operands.size(); ++i) {
    const Array& x = args.operands[i];
    const int bd = args.batchDims[i];
    if (bd >= 0 || cb->vmap == ir::VmapMethod::BroadcastAll) {
      operands.push_back(moveBatchDim(x, bd, 0, n));
      batched.push_back(true);
    } else {
      operands.push_back(cb->vmap == ir::VmapMethod::ExpandDims ? expandDims(x, 0) : x);
      batched.push_back(false);
    }
  }
  ir::HostCallback b;
  b.name = cb->name;
  b.effectful = cb->effectful;
  b.vmap = cb->vmap;
  for (const Array& x : operands) b.operands.push_back(x.aval());
  for (const Aval& r : cb->results) {
    std::vector<int64_t> dims{n};
    dims.insert(dims.end(), r.shape.dims().begin(), r.shape.dims().end());
    b.results.push_back(Aval{Shape(std::move(dims)), r.dtype});
  }
  if (cb->vmap == ir::VmapMethod::Sequential) {
    // One call per example: the batched operands' and the results' slices, the others as they are.
    b.fn = [cb, batched, n](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> out) {
      std::vector<ir::TensorView> ins(in.size());
      std::vector<ir::MutableTensorView> outs(out.size());
      for (int64_t e = 0; e < n; ++e) {
        for (size_t i = 0; i < in.size(); ++i) ins[i] = batched[i] ? sliceOf(in[i], cb->operands[i], e) : in[i];
        for (size_t r = 0; r < out.size(); ++r) outs[r] = sliceOf(out[r], cb->results[r], e);
        cb->fn(ins, outs);
      }
    };
  } else {
    b.fn = cb->fn;  // the function takes the whole batch: its results carry the batch dim
  }
  ir::HostCallbackPtr ptr = ir::makeHostCallback(std::move(b));
  ir::HostCallbackAttrs attrs{ptr->id, ptr};
  ir::BatchResult out;
  out.results = bind(ir::OpCode::HostCallback, operands, attrs, std::source_location::current());
  out.batchDims.assign(out.results.size(), 0);
  return out;
}

}  // namespace

void registerHostCallbackOps(ir::OpRegistry& reg) {
  ir::OpDef def = coreOp(ir::OpCode::HostCallback, "host_callback", ir::FusionKind::Opaque, -1, -1);
  def.minOperands = 0;
  def.infer = inferCallback;
  def.cost = costCallback;
  def.cpu = callbackKernel;
  def.cpuWritesWholeResult = true;
  def.vjp = callbackVjp;
  def.vjpRefused = true;
  def.batch = batchCallback;
  def.shard = replicatedShardRule();
  addCoreOp(reg, std::move(def));
}

}  // namespace tsr::ops
