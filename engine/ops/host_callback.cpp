// host_callback: a call of a function of the host program with the op's operands (engine/ir/host_callback.h).
// Every backend runs it on the host through its CPU kernel (the CUDA backend's host path copies the operands
// over). Its rules: the callback's avals; the operands whole on every device (a callback sees whole arrays, as
// JAX's do); reverse mode refused when a cotangent reaches it (jax.pure_callback: give it a custom_vjp); vmap by
// the callback's method, the sequential one looping over the examples here. In an SPMD program an effect runs
// on one device and broadcasts its results (engine/ops/host_callback.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/core/mxcsr.h"
#include "engine/dist/communicator.h"
#include "engine/ir/host_callback.h"
#include "engine/ops/host_callback.h"
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

// The call, in the host's floating-point environment (jitted code flushes subnormals, which a user's numpy must
// not see), and outside the mesh: a program the function runs is its own, run by this device alone, and its
// effects must not wait for the mesh's other devices.
void call(const ir::HostCallback& cb, const ir::CpuKernelArgs& args) {
  MxcsrScope ieee(MxcsrScope::current() & ~MxcsrScope::kFlushSubnormals);
  CallbackMeshScope own({});
  cb.fn(args.inputs, args.outputs);
}

[[noreturn]] void fail(dist::DeviceContext& d, Error e) {
  d.fail(e);
  raise(std::move(e));
}

// The results' bytes one after another, to or from `bytes`.
void packResults(std::span<const ir::MutableTensorView> results, uint8_t* bytes) {
  for (const ir::MutableTensorView& r : results) {
    if (r.aval.bytes() > 0) std::memcpy(bytes, r.data, static_cast<size_t>(r.aval.bytes()));
    bytes += r.aval.bytes();
  }
}
void unpackResults(const uint8_t* bytes, std::span<const ir::MutableTensorView> results) {
  for (const ir::MutableTensorView& r : results) {
    if (r.aval.bytes() > 0) std::memcpy(r.data, bytes, static_cast<size_t>(r.aval.bytes()));
    bytes += r.aval.bytes();
  }
}

// An effect with results in an SPMD program: the mesh's first device calls, then every device of the mesh joins
// one all_reduce of the bytes [results..., failed], to which the others give zeros. Summed as u8, which wraps,
// the sum is the first device's bytes exactly whatever the results' dtypes (bool, -0.0, NaN payloads), and the
// flag travels with the values: one collective, where an all_gather would hand every device every device's copy.
// A failed call is the run's error on the first device and an error on the others, which never wait for values
// that will not come.
void callOnFirstDevice(const ir::HostCallback& cb, const ir::CpuKernelArgs& args, dist::DeviceContext& d,
                       std::span<const int> mesh) {
  int64_t bytes = 0;
  for (const ir::MutableTensorView& r : args.outputs) bytes += r.aval.bytes();
  std::vector<uint8_t> sent(static_cast<size_t>(bytes) + 1, 0);
  uint8_t& failed = sent.back();
  const bool first = d.position == mesh[0];
  std::exception_ptr failure;
  std::string why;
  if (first) {
    try {
      call(cb, args);
      packResults(args.outputs, sent.data());
    } catch (const std::exception& e) {
      failure = std::current_exception();
      why = e.what();
    } catch (...) {
      failure = std::current_exception();
      why = "an exception that is not a std::exception";
    }
    failed = failure ? 1 : 0;
  }
  Status st = d.comm->allReduce(d.position, mesh, sent.data(), sent.data(), bytes + 1, DType::U8);
  if (!st.ok()) fail(d, st.takeError());
  if (first) {
    if (!failure) return;
    d.fail(Error{why});  // the root cause, recorded before the others' echoes of it
    std::rethrow_exception(failure);
  }
  if (failed) {
    // Where the first device runs in this process, wait until it has failed the run (a call it never joins
    // returns when its failure aborts the communicator), so that the run reports its error, not this echo.
    // Under MPI its own process reports it.
    const std::vector<int> local = d.comm->localDevices();
    if (std::find(local.begin(), local.end(), mesh[0]) != local.end()) {
      uint8_t none = 0;
      (void)d.comm->allReduce(d.position, mesh, &none, &none, 1, DType::U8);
    }
    fail(d, makeError("{}: the call on device {} failed; that device reports why", cb.name, mesh[0]));
  }
  unpackResults(sent.data(), args.outputs);
}

void callbackKernel(const ir::CpuKernelArgs& args) {
  const auto& a = attrsAs<ir::HostCallbackAttrs>(args.attrs);
  ir::HostCallbackPtr cb = ir::hostCallbackOf(a);
  if (!cb) throw std::runtime_error(fmt::format("host_callback: no callback {} in this process", a.callback));
  dist::DeviceContext* d = dist::currentDevice();
  if (!cb->effectful || !d) return call(*cb, args);
  const std::span<const int> mesh = callbackMesh();
  if (!d->comm || std::find(mesh.begin(), mesh.end(), d->position) == mesh.end()) {
    // No mesh named (a shard_map body, whose devices hold different blocks): every device makes its own calls,
    // a print of its own block included, as JAX's shard_map does.
    return call(*cb, args);
  }
  if (cb->results.empty() || mesh.size() == 1) {
    if (d->position == mesh[0]) call(*cb, args);
    return;
  }
  callOnFirstDevice(*cb, args, *d, mesh);
}

std::vector<Array> callbackVjp(const ir::VjpArgs& args) {
  for (const Array& ct : args.cotangents)
    if (ct.valid()) {
      ir::HostCallbackPtr cb = ir::hostCallbackOf(attrsAs<ir::HostCallbackAttrs>(args.attrs));
      if (cb && !cb->noDerivative.empty()) raise(makeError("{}: {}", cb->name, cb->noDerivative));
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
  b.noDerivative = cb->noDerivative;
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

thread_local std::span<const int> t_mesh;

}  // namespace

CallbackMeshScope::CallbackMeshScope(std::span<const int> devices) : m_saved(t_mesh) { t_mesh = devices; }
CallbackMeshScope::~CallbackMeshScope() { t_mesh = m_saved; }
std::span<const int> callbackMesh() { return t_mesh; }

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
