#include "engine/spmd/spmd.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "engine/ir/graph.h"
#include "engine/ops/layout_copy.h"
#include "engine/ops/host_callback.h"
#include "engine/ops/registry.h"
#include "engine/passes/inline_calls.h"
#include "engine/passes/pipeline.h"
#include "engine/runtime/interpreter.h"
#include "engine/transform/trace.h"

namespace tsr::spmd {

// ---- devices ----

namespace {

struct DeviceState {
  std::mutex mutex;
  std::shared_ptr<dist::Communicator> comm;
  int requested = 0;  // setCpuDevices
};

DeviceState& deviceState() {
  static DeviceState s;
  return s;
}

}  // namespace

Result<std::shared_ptr<dist::Communicator>> devices() {
  DeviceState& s = deviceState();
  std::lock_guard lock(s.mutex);
  if (s.comm) return s.comm;
  if (dist::launchedUnderMpi()) {
    TSR_ASSIGN(s.comm, dist::makeMpiCommunicator());
  } else {
    s.comm = dist::makeInProcessCommunicator(s.requested > 0 ? s.requested : dist::configuredCpuDevices());
  }
  return s.comm;
}

Status setCpuDevices(int n) {
  if (n < 1 || n > 1024) return makeError("setCpuDevices: {} devices (expected 1..1024)", n);
  DeviceState& s = deviceState();
  std::lock_guard lock(s.mutex);
  if (s.comm && s.comm->numDevices() != n)
    return makeError("setCpuDevices({}): this process already runs {} devices; set it before the first sharded "
                     "array (or set TESSERA_CPU_DEVICES)", n, s.comm->numDevices());
  s.requested = n;
  return {};
}

int numDevices() {
  auto d = devices();
  return d.ok() ? (*d)->numDevices() : 1;
}

namespace {

Status checkMeshFits(const sharding::Mesh& mesh, const dist::Communicator& comm) {
  for (int d : mesh.devices)
    if (d >= comm.numDevices())
      return makeError("{} needs {} devices, but this process has {} ({}; set TESSERA_CPU_DEVICES={} for virtual "
                       "CPU devices)", mesh.toString(), mesh.size(), comm.numDevices(), comm.kind(), mesh.size());
  return {};
}

}  // namespace

namespace {

// Copies the block [start, start + blockShape) of a row-major array into a new buffer.
Result<runtime::BufferPtr> extractBlock(const void* whole, const Shape& wholeShape, const std::vector<int64_t>& start,
                                        const Shape& blockShape, int64_t elem) {
  TSR_ASSIGN(runtime::BufferPtr out, runtime::Buffer::allocateUninitialized(blockShape.numel() * elem));
  ops::runStridedCopy(ops::blockCopy(wholeShape.dims(), start, blockShape.dims(), /*toBlock=*/true), elem, whole,
                      out->data());
  return out;
}

std::shared_ptr<const sharding::NamedSharding> namedSharding(const sharding::Mesh& mesh,
                                                             const sharding::TensorSharding& t) {
  return std::make_shared<const sharding::NamedSharding>(sharding::NamedSharding{mesh, t.toSpec(mesh)});
}

Result<sharding::TensorSharding> tensorSharding(const sharding::NamedSharding& s, const Shape& shape) {
  return sharding::TensorSharding::fromSpec(s.mesh, s.spec, shape);
}

// Each input's blocks per device: a sharded array's own; a one-device array's buffer, shared read-only by
// every device (it is replicated).
std::vector<runtime::BufferPtr> blocksOf(const Array& a, size_t numDevices) {
  if (a.isSharded()) {
    std::vector<runtime::BufferPtr> b = a.shards()->shards;
    b.resize(numDevices);
    return b;
  }
  return std::vector<runtime::BufferPtr>(numDevices, a.buffer());
}

}  // namespace

// ---- SpmdExecutable ----

struct SpmdExecutable::Impl {
  ir::Graph global;
  sharding::ShardingPlan plan;
  sharding::PartitionResult partitioned;
  ir::Graph program;
  std::unique_ptr<runtime::Executable> exe;  // the CPU's, shared by every local device; else the first one's
  std::map<int, std::unique_ptr<runtime::Executable>> deviceExes;  // other backends: each local device's own
  std::shared_ptr<dist::Communicator> comm;

  std::vector<Aval> outAvals;  // the outputs' global avals
  // The mesh host_callback's effects see: they run on its first device (engine/ops/host_callback.h). Empty for
  // shard_map's programs, whose devices hold different blocks and make their own calls.
  std::vector<int> callbackMesh;
  runtime::Executable* executableFor(int position) {
    auto it = deviceExes.find(position);
    return it != deviceExes.end() ? it->second.get() : exe.get();
  }
  // Device `position`'s program on these blocks, on the calling thread (the device's): compiled, or interpreted.
  Result<std::vector<runtime::BufferPtr>> runDevice(int position, const std::vector<runtime::BufferPtr>& blocks,
                                                    const std::vector<bool>& donated) {
    ops::CallbackMeshScope callbacks(callbackMesh);
    if (!exe) return runtime::interpret(program, ops::registry(), blocks);
    return executableFor(position)->run(blocks, donated);
  }
  SpmdOptions options;
};

namespace {

// The per-device program after the compiler's pipeline, named `name`.
Status optimise(ir::Graph& program, const std::string& name) {
  program.name = name;
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(ops::registry());
  auto report = pm.run(program, ctx);
  if (!report.ok()) return makeError("{}: {}", name, report.error().message);
  return {};
}

}  // namespace

Result<SpmdPlan> planSpmd(const ir::Graph& global, const sharding::Mesh& mesh,
                          const sharding::ShardingAnnotations& annotations, const std::string& name) {
  const ir::OpRegistry& reg = ops::registry();
  SpmdPlan out;
  // Calls that run their body as it is (custom_vjp, remat) are inlined first, so their ops are sharded like any
  // others instead of the call being computed whole on every device.
  ir::Graph inlined = global;
  {
    passes::InlineCalls inlineCalls;
    passes::PassContext ctx(reg);
    auto changed = inlineCalls.run(inlined, ctx);
    if (!changed.ok()) return makeError("{}: {}", name, changed.error().message);
  }
  TSR_ASSIGN(out.plan, sharding::propagateShardings(inlined, reg, mesh, annotations));
  TSR_ASSIGN(out.partitioned, sharding::partition(inlined, reg, out.plan));
  out.program = out.partitioned.local;
  TSR_TRY(optimise(out.program, name));
  return out;
}

SpmdExecutable::SpmdExecutable() : m(std::make_unique<Impl>()) {}
SpmdExecutable::~SpmdExecutable() = default;

namespace {

// The executable's options and this process's devices, which must hold the mesh.
Status prepare(SpmdExecutable::Impl& im, const sharding::Mesh& mesh, const SpmdOptions& options) {
  im.options = options;
  TSR_ASSIGN(im.comm, devices());
  return checkMeshFits(mesh, *im.comm);
}

// Compiles the per-device program for the local devices of `mesh` with the registered backend.
Status compileLocal(SpmdExecutable::Impl& im, const sharding::Mesh& mesh) {
  const SpmdOptions& options = im.options;
  if (options.interpret) return {};
  runtime::CompileOptions co;
  co.name = options.name;
  co.donatable = options.donatable;
  co.donatable.resize(im.program.inputs().size(), false);
  co.native = true;
  // The CPU backend's devices share one executable (its runs are independent); a GPU per device needs a
  // program compiled for each local device (under mpirun: one, the rank's GPU).
  const std::vector<int> local = im.comm->localDevices();
  const bool perDevice = options.device != "cpu";
  for (size_t i = 0; i < (perDevice ? local.size() : 1); ++i) {
    if (perDevice && std::find(mesh.devices.begin(), mesh.devices.end(), local[i]) == mesh.devices.end()) continue;
    co.localDevice = static_cast<int>(i);
    TSR_ASSIGN(std::unique_ptr<runtime::Executable> e, runtime::compileOn(options.device, im.program, ops::registry(), co));
    if (!im.exe) im.exe = std::move(e);
    else im.deviceExes.emplace(local[i], std::move(e));
  }
  if (!im.exe) return makeError("{}: no device of {} runs in this process", options.name, mesh.toString());
  return {};
}

}  // namespace

Result<std::unique_ptr<SpmdExecutable>> SpmdExecutable::compile(const ir::Graph& global, const sharding::Mesh& mesh,
                                                                const sharding::ShardingAnnotations& annotations,
                                                                const SpmdOptions& options) {
  std::unique_ptr<SpmdExecutable> self(new SpmdExecutable());
  Impl& im = *self->m;
  TSR_TRY(prepare(im, mesh, options));
  im.global = global;
  for (ir::ValueId v : global.outputs()) im.outAvals.push_back(global.aval(v));
  TSR_ASSIGN(SpmdPlan planned, planSpmd(global, mesh, annotations, options.name));
  im.plan = std::move(planned.plan);
  im.partitioned = std::move(planned.partitioned);
  im.program = std::move(planned.program);
  im.callbackMesh = mesh.devices;
  TSR_TRY(compileLocal(im, mesh));
  return self;
}

Result<std::unique_ptr<SpmdExecutable>> SpmdExecutable::compileManual(const ir::Graph& local, const sharding::Mesh& mesh,
                                                                      std::vector<sharding::TensorSharding> inShardings,
                                                                      std::vector<sharding::TensorSharding> outShardings,
                                                                      std::vector<Aval> outAvals,
                                                                      const SpmdOptions& options) {
  if (inShardings.size() != local.inputs().size() || outShardings.size() != local.outputs().size() ||
      outAvals.size() != local.outputs().size())
    return makeError("{}: {} inputs and {} outputs, but {} input and {} output shardings", options.name,
                     local.inputs().size(), local.outputs().size(), inShardings.size(), outShardings.size());
  for (size_t i = 0; i < outAvals.size(); ++i) {
    const Shape block = outShardings[i].localShape(mesh, outAvals[i].shape);
    const Aval& have = local.aval(local.outputs()[i]);
    if (!(block == have.shape) || have.dtype != outAvals[i].dtype)
      return makeError("{}: output {} is {} on each device, but {} split {} has blocks of {}", options.name, i,
                       have.toString(), outAvals[i].toString(), outShardings[i].toString(mesh), block.toString());
  }
  std::unique_ptr<SpmdExecutable> self(new SpmdExecutable());
  Impl& im = *self->m;
  TSR_TRY(prepare(im, mesh, options));
  im.global = local;
  im.outAvals = std::move(outAvals);
  im.plan.mesh = mesh;
  im.partitioned.local = local;
  im.partitioned.inputShardings = std::move(inShardings);
  im.partitioned.outputShardings = std::move(outShardings);
  im.program = local;
  TSR_TRY(optimise(im.program, options.name));
  TSR_TRY(compileLocal(im, mesh));
  return self;
}

Result<std::vector<std::vector<runtime::BufferPtr>>> SpmdExecutable::run(
    const std::vector<std::vector<runtime::BufferPtr>>& inputs, const std::vector<bool>& donated) {
  Impl& im = *m;
  const sharding::Mesh& mesh = im.plan.mesh;
  const ir::Graph& g = im.program;
  if (inputs.size() != g.inputs().size())
    return makeError("{}: expects {} inputs, got {}", im.options.name, g.inputs().size(), inputs.size());
  const auto numDev = static_cast<size_t>(im.comm->numDevices());
  std::vector<std::vector<runtime::BufferPtr>> outputs(g.outputs().size(), std::vector<runtime::BufferPtr>(numDev));
  std::vector<bool> inMesh(numDev, false);
  for (int d : mesh.devices) inMesh[static_cast<size_t>(d)] = true;
  Status st = dist::runOnDevices(*im.comm, [&](int device) -> Status {
    if (!inMesh[static_cast<size_t>(device)]) return {};
    std::vector<runtime::BufferPtr> bufs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto& perDevice = inputs[i];
      if (static_cast<size_t>(device) >= perDevice.size() || !perDevice[static_cast<size_t>(device)])
        return makeError("{}: input {} has no block on device {}", im.options.name, i, device);
      bufs.push_back(perDevice[static_cast<size_t>(device)]);
    }
    TSR_ASSIGN(std::vector<runtime::BufferPtr> outs, im.runDevice(device, bufs, donated));
    for (size_t o = 0; o < outs.size(); ++o) outputs[o][static_cast<size_t>(device)] = std::move(outs[o]);
    return {};
  });
  if (!st.ok()) return makeError("{}: {}", im.options.name, st.error().message);
  return outputs;
}

Result<std::vector<runtime::BufferPtr>> SpmdExecutable::runOnThisDevice(const std::vector<runtime::BufferPtr>& inputs) {
  Impl& im = *m;
  const dist::DeviceContext* d = dist::currentDevice();
  const sharding::Mesh& mesh = im.plan.mesh;
  if (!d || d->comm != im.comm.get() ||
      std::find(mesh.devices.begin(), mesh.devices.end(), d->position) == mesh.devices.end())
    return makeError("{}: runs on a device of {} only", im.options.name, mesh.toString());
  if (inputs.size() != im.program.inputs().size())
    return makeError("{}: expects {} inputs, got {}", im.options.name, im.program.inputs().size(), inputs.size());
  return im.runDevice(d->position, inputs, {});
}

Result<std::vector<Array>> SpmdExecutable::run(const std::vector<Array>& inputs, const std::vector<bool>& donated) {
  const sharding::Mesh& mesh = m->plan.mesh;
  const auto& want = m->partitioned.inputShardings;
  if (inputs.size() != want.size()) return makeError("{}: expects {} inputs, got {}", m->options.name, want.size(), inputs.size());
  const auto numDev = static_cast<size_t>(m->comm->numDevices());
  std::vector<std::vector<runtime::BufferPtr>> blocks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].isConcrete()) return makeError("{}: input {} is not a concrete array", m->options.name, i);
    TSR_ASSIGN(sharding::TensorSharding t, shardingOn(inputs[i], mesh));
    if (!(t == want[i]))
      return makeError("{}: input {} is split {}, the program was compiled for {}", m->options.name, i,
                       t.toString(mesh), want[i].toString(mesh));
    blocks.push_back(blocksOf(inputs[i], numDev));
  }
  // A sharded input is given up only when its storage and every block belong to it alone (a one-device input
  // is one buffer read by every device: never).
  std::vector<bool> give(inputs.size(), false);
  for (size_t i = 0; i < inputs.size() && i < donated.size(); ++i) {
    if (!donated[i] || !inputs[i].isSharded() || inputs[i].impl()->sharded.use_count() != 1) continue;
    give[i] = std::all_of(inputs[i].shards()->shards.begin(), inputs[i].shards()->shards.end(),
                          [](const runtime::BufferPtr& b) { return !b || b.use_count() == 2; });  // + blocks[i]
  }
  auto results = run(blocks, give);
  if (!results.ok()) return results.takeError();
  for (size_t i = 0; i < inputs.size(); ++i)
    if (give[i]) inputs[i].impl()->sharded.reset();  // deleted, as in JAX
  installEagerRunner();
  std::vector<Array> arrays;
  for (size_t i = 0; i < results->size(); ++i)
    arrays.push_back(Array::fromShards(m->outAvals[i], namedSharding(mesh, m->partitioned.outputShardings[i]),
                                       std::move((*results)[i])));
  return arrays;
}

const sharding::Mesh& SpmdExecutable::mesh() const { return m->plan.mesh; }
const sharding::ShardingPlan& SpmdExecutable::plan() const { return m->plan; }
const ir::Graph& SpmdExecutable::global() const { return m->global; }
const sharding::PartitionResult& SpmdExecutable::partitioned() const { return m->partitioned; }
const ir::Graph& SpmdExecutable::program() const { return m->program; }
const runtime::Executable* SpmdExecutable::executable() const { return m->exe.get(); }

// ---- Arrays on a mesh ----

ir::ShardingConstraintAttrs constraintAttrs(const sharding::NamedSharding& s) {
  ir::ShardingConstraintAttrs a;
  a.meshShape = s.mesh.shape;
  for (size_t i = 0; i < s.mesh.axes.size(); ++i) a.meshAxes += (i ? "," : "") + s.mesh.axes[i];
  a.devices.assign(s.mesh.devices.begin(), s.mesh.devices.end());
  a.spec = s.spec.toString();
  return a;
}

Result<sharding::TensorSharding> shardingOn(const Array& x, const sharding::Mesh& mesh) {
  if (!x.isSharded()) return sharding::TensorSharding::replicated(x.rank());
  if (!(x.sharding()->mesh == mesh))
    return makeError("an array on {} used with arrays on {}", x.sharding()->mesh.toString(), mesh.toString());
  return sharding::TensorSharding::fromSpec(mesh, x.sharding()->spec, x.shape());
}

sharding::NamedSharding replicatedOn(const sharding::Mesh& mesh) { return sharding::NamedSharding{mesh, {}}; }

namespace {

// Compiled one-op programs for eager ops on sharded arrays, by graph text and shardings.
struct EagerCache {
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<SpmdExecutable>> programs;
};

EagerCache& eagerCache() {
  static EagerCache c;
  return c;
}

Result<std::vector<Array>> runEager(ir::OpCode op, const std::vector<Array>& operands, const ir::Attrs& attrs) {
  const ir::OpRegistry& reg = ops::registry();
  const sharding::Mesh* mesh = nullptr;
  for (const Array& a : operands)
    if (a.isSharded()) {
      if (!mesh) mesh = &a.sharding()->mesh;
      else if (!(*mesh == a.sharding()->mesh))
        return makeError("operands on different meshes: {} and {}", mesh->toString(), a.sharding()->mesh.toString());
    }
  ir::Graph g;
  g.name = reg.get(op).name;
  std::vector<ir::ValueId> ins;
  sharding::ShardingAnnotations ann;
  std::string key;
  for (const Array& a : operands) {
    if (!a.isConcrete()) return makeError("an operand is not a concrete array");
    ins.push_back(g.addInput(a.aval()));
    sharding::TensorSharding t = sharding::TensorSharding::replicated(a.rank());
    if (a.isSharded()) {
      TSR_ASSIGN(t, tensorSharding(*a.sharding(), a.shape()));
    }
    key += t.toString(*mesh) + ";";
    ann.inputs.push_back(t);
  }
  TSR_ASSIGN(auto outs, g.addNode(reg, op, ins, attrs));
  g.setOutputs(outs);
  key += ir::print(g, reg) + mesh->toString();
  for (int d : mesh->devices) key += fmt::format(",{}", d);

  std::shared_ptr<SpmdExecutable> exe;
  {
    EagerCache& c = eagerCache();
    std::lock_guard lock(c.mutex);
    auto it = c.programs.find(key);
    if (it != c.programs.end()) exe = it->second;
  }
  if (!exe) {
    TSR_ASSIGN(std::unique_ptr<SpmdExecutable> made, SpmdExecutable::compile(g, *mesh, ann, SpmdOptions{.name = g.name, .donatable = {}}));
    exe = std::move(made);
    EagerCache& c = eagerCache();
    std::lock_guard lock(c.mutex);
    c.programs.emplace(key, exe);
  }
  return exe->run(operands);
}

}  // namespace

void installEagerRunner() {
  static std::once_flag once;
  std::call_once(once, [] { shardedOpRunner() = runEager; });
}

Array withShardingConstraint(const Array& x, const sharding::NamedSharding& s) {
  if (!x.isTracer()) {
    auto r = devicePut(x, s);
    if (!r.ok()) raise(r.takeError());
    return std::move(r).value();
  }
  return bind1(ir::OpCode::ShardingConstraint, {x}, constraintAttrs(s), std::source_location::current());
}

Result<Array> devicePut(const Array& x, const sharding::NamedSharding& s) {
  if (!x.valid()) return makeError("devicePut: an empty Array");
  if (x.isTracer()) return capture([&] { return withShardingConstraint(x, s); });
  if (!x.isConcrete()) return makeError("devicePut: the array ({}) was donated and deleted", x.aval().toString());
  TSR_TRY(s.check(x.shape()));
  TSR_ASSIGN(auto comm, devices());
  TSR_TRY(checkMeshFits(s.mesh, *comm));
  installEagerRunner();
  TSR_ASSIGN(sharding::TensorSharding want, tensorSharding(s, x.shape()));
  auto named = namedSharding(s.mesh, want);

  if (x.isSharded() && x.sharding()->mesh == s.mesh) {
    // A reshard on the same mesh: a program that is only the constraint, partitioned into its collectives.
    TSR_ASSIGN(sharding::TensorSharding have, tensorSharding(*x.sharding(), x.shape()));
    if (have == want) return x;
    ir::Graph g;
    g.name = "reshard";
    ir::ValueId in = g.addInput(x.aval());
    TSR_ASSIGN(auto outs, g.addNode(ops::registry(), ir::OpCode::ShardingConstraint, {in}, constraintAttrs(s)));
    g.setOutputs(outs);
    sharding::ShardingAnnotations ann;
    ann.inputs.push_back(have);
    TSR_ASSIGN(auto exe, SpmdExecutable::compile(g, s.mesh, ann, SpmdOptions{.name = "reshard", .donatable = {}}));
    TSR_ASSIGN(auto results, exe->run({blocksOf(x, static_cast<size_t>(comm->numDevices()))}));
    return Array::fromShards(x.aval(), named, std::move(results[0]));
  }

  // From one device (or another mesh, through the host): each device copies its block.
  Array whole = x.gathered();
  TSR_ASSIGN(std::vector<sharding::Shard> blocks, s.layout(x.shape()));
  std::vector<runtime::BufferPtr> shards(static_cast<size_t>(comm->numDevices()));
  std::vector<int> local = comm->localDevices();
  const Shape blockShape = want.localShape(s.mesh, x.shape());
  for (const sharding::Shard& b : blocks)
    for (int d : b.devices) {
      if (std::find(local.begin(), local.end(), d) == local.end()) continue;
      TSR_ASSIGN(shards[static_cast<size_t>(d)],
                 extractBlock(whole.buffer()->data(), x.shape(), b.start, blockShape,
                              dtypeSize(x.dtype())));
    }
  return Array::fromShards(x.aval(), named, std::move(shards));
}

Result<Array> fetchWhole(const Array& x) {
  if (!x.isSharded()) return x;
  TSR_ASSIGN(auto comm, devices());
  const sharding::NamedSharding& s = *x.sharding();
  const bool replicated = std::all_of(s.spec.dims.begin(), s.spec.dims.end(), [](const auto& d) { return d.empty(); });
  Array whole = x;
  // The decision depends only on the sharding, never on which blocks this rank holds: every rank takes it alike.
  if (!replicated && comm->localDevices().size() < static_cast<size_t>(comm->numDevices())) {
    TSR_ASSIGN(whole, devicePut(x, replicatedOn(s.mesh)));
  }
  return capture([&] { return whole.gathered(); });
}

Result<bool> isPrimaryProcess() {
  if (!dist::launchedUnderMpi()) return true;
  TSR_ASSIGN(auto comm, devices());
  std::vector<int> local = comm->localDevices();
  return std::find(local.begin(), local.end(), 0) != local.end();
}

Status processBarrier() {
  if (!dist::launchedUnderMpi()) return {};
  TSR_ASSIGN(auto comm, devices());
  std::vector<int> group(static_cast<size_t>(comm->numDevices()));
  std::iota(group.begin(), group.end(), 0);
  int32_t one = 1, sum = 0;
  return comm->allReduce(comm->localDevices().front(), group, &one, &sum, 1, DType::I32);
}

Result<std::string> visualizeArraySharding(const Array& x, int width) {
  if (!x.valid()) return makeError("visualizeArraySharding: an empty Array");
  if (x.isSharded()) return sharding::visualizeSharding(x.shape(), *x.sharding(), width);
  TSR_ASSIGN(sharding::Mesh one, sharding::Mesh::create({1}, {"d"}));
  return sharding::visualizeSharding(x.shape(), replicatedOn(one), width);
}

}  // namespace tsr::spmd
