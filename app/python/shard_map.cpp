// shard_map for Python (tessera/_shard_map.py): a function written for one device's blocks, with its own
// collectives (tessera.lax.psum, all_gather, ...), traced once on the blocks' avals and compiled as the program
// every device of a mesh runs (spmd::SpmdExecutable::compileManual). Called with arrays it runs on the mesh and
// returns arrays split as its out_specs say; called inside a trace (jit, grad, vmap around it) it is one
// host_callback op whose function runs the compiled program on the mesh and returns whole arrays.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "app/python/bindings.h"
#include "engine/dist/communicator.h"
#include "engine/ir/host_callback.h"
#include "engine/ops/registry.h"
#include "engine/sharding/partitioner.h"
#include "engine/spmd/spmd.h"
#include "engine/transform/api.h"
#include "engine/transform/control_flow.h"

namespace tsr::python {

namespace {

using sharding::Mesh;
using sharding::NamedSharding;
using sharding::PartitionSpec;
using sharding::TensorSharding;
using Specs = std::vector<std::vector<std::vector<std::string>>>;  // per array: per dim, its mesh axes

class ShardMapProgram {
 public:
  // fn(local blocks) -> local blocks; globalAvals: the arguments' (shape, dtype); inSpecs per argument;
  // outSpecsFn() the specs per result, asked once fn is traced (the results' structure is known then).
  ShardMapProgram(const py::function& fn, const AvalSpecs& globalAvals, const Mesh& mesh, const Specs& inSpecs,
                  const py::function& outSpecsFn, const std::string& name)
      : m_name(name) {
    if (inSpecs.size() != globalAvals.size())
      throw py::value_error(fmt::format("shard_map({}): {} in_specs for {} arguments", name, inSpecs.size(),
                                        globalAvals.size()));
    AvalSpecs local;
    std::vector<TensorSharding> in;
    for (size_t i = 0; i < globalAvals.size(); ++i) {
      const Shape shape(globalAvals[i].first);
      TensorSharding t = shardingOf(mesh, inSpecs[i], shape, fmt::format("argument {}", i));
      local.emplace_back(t.localShape(mesh, shape).dims(), globalAvals[i].second);
      in.push_back(std::move(t));
    }
    m_traced = traceClosed(fn, local, name);
    const ir::Graph& g = m_traced.graph;
    const auto outSpecs = outSpecsFn().cast<Specs>();
    if (outSpecs.size() != g.outputs().size())
      throw py::value_error(fmt::format("shard_map({}): {} out_specs for {} results", name, outSpecs.size(),
                                        g.outputs().size()));
    for (const Array& c : m_traced.consts) in.push_back(TensorSharding::replicated(c.rank()));
    std::vector<TensorSharding> out;
    for (size_t i = 0; i < outSpecs.size(); ++i) {
      const Aval& block = g.aval(g.outputs()[i]);
      // The global shape: each dim the block's times the number of pieces the spec splits it into.
      std::vector<int64_t> dims = block.shape.dims();
      if (outSpecs[i].size() > dims.size())
        throw py::value_error(fmt::format("shard_map({}): out_specs[{}] names {} dims, but result {} is {}", name,
                                          i, outSpecs[i].size(), i, block.toString()));
      for (size_t d = 0; d < outSpecs[i].size(); ++d)
        for (const std::string& axis : outSpecs[i][d]) {
          if (mesh.axisIndex(axis) < 0)
            throw py::value_error(fmt::format("shard_map({}): out_specs[{}] names axis '{}', which {} lacks", name, i,
                                              axis, mesh.toString()));
          dims[d] *= mesh.axisSize(axis);
        }
      Aval global{Shape(dims), block.dtype};
      out.push_back(shardingOf(mesh, outSpecs[i], global.shape, fmt::format("result {}", i)));
      m_outAvals.push_back(global);
    }
    spmd::SpmdOptions options;
    options.name = name;
    // An argument's blocks may become a result's when the caller donates it (jit(..., donate_argnums)); the
    // run decides, so a program compiled to allow it serves every call.
    options.donatable.assign(globalAvals.size(), true);
    m_exe = orRaise(spmd::SpmdExecutable::compileManual(g, mesh, std::move(in), std::move(out), m_outAvals, options));
  }

  // Runs on arrays: each argument is put on the mesh as in_specs split it (where it is not already), and the
  // results are arrays on the mesh. donate[i]: the caller gives argument i up (jit's donate_argnums): where this
  // call holds its only other handle, its blocks may become a result's, and it is deleted, as in JAX.
  std::vector<Array> call(const std::vector<Array>& args, const std::vector<bool>& donate) {
    UserSite site;
    for (const Array& c : m_traced.consts)
      if (!c.isConcrete())
        throw py::value_error(fmt::format("shard_map({}): the function closes over a value of an enclosing trace; "
                                          "call it inside that trace", m_name));
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].isDeleted())
        raisePython(makeError("shard_map({}): argument {} ({}) was donated to a jitted function and deleted", m_name,
                              i, args[i].aval().toString()));
    Result<std::vector<Array>> results = Error{};
    {
      py::gil_scoped_release nogil;
      results = runOn(*m_exe, args, m_traced.consts, donate);
    }
    return orRaise(std::move(results));  // with the GIL: raising sets a Python error
  }

  // Inside a trace: one host_callback op over the whole arguments (and the values the function closes over),
  // whose function runs the program on the mesh. Pure: unused results are dropped like any op's.
  // consts: the values the function closes over, given explicitly (a custom_vjp's inputs, through which they
  // are differentiated); none: the ones it captured.
  std::vector<Array> embed(const std::vector<Array>& args, const std::optional<std::vector<Array>>& consts) {
    UserSite site;
    std::vector<Array> operands = args;
    const std::vector<Array>& closed = consts ? *consts : m_traced.consts;
    if (closed.size() != m_traced.consts.size())
      throw py::value_error(fmt::format("shard_map({}): {} values closed over, expected {}", m_name, closed.size(),
                                        m_traced.consts.size()));
    operands.insert(operands.end(), closed.begin(), closed.end());
    ir::HostCallback cb;
    cb.name = fmt::format("shard_map({})", m_name);
    for (const Array& a : operands) cb.operands.push_back(a.aval());
    cb.results = m_outAvals;
    cb.vmap = ir::VmapMethod::Sequential;
    const size_t numArgs = args.size();
    // The callback keeps the compiled program, not this object (whose consts may be an enclosing trace's).
    cb.fn = [exe = m_exe, numArgs, name = m_name](
                std::span<const ir::TensorView> ops, std::span<const ir::MutableTensorView> results) {
      if (dist::currentDevice())
        throw std::runtime_error(fmt::format(
            "shard_map({}) inside a program that itself runs on a mesh, where it cannot be split as its "
            "in_specs say (under vmap?): call it on one-device arrays", name));
      std::vector<Array> args, consts;
      for (size_t i = 0; i < ops.size(); ++i)
        (i < numArgs ? args : consts).push_back(Array::fromBytes(ops[i].aval, ops[i].data));
      auto outs = runOn(*exe, args, consts, {});
      if (!outs.ok()) throw std::runtime_error(outs.error().message);
      for (size_t i = 0; i < results.size(); ++i) {
        auto whole = spmd::fetchWhole((*outs)[i]);
        if (!whole.ok()) throw std::runtime_error(whole.error().message);
        std::memcpy(results[i].data, whole->buffer()->data(), static_cast<size_t>(results[i].aval.bytes()));
      }
    };
    cb.manual = manualSharding(operands.size());
    return hostCallback(ir::makeHostCallback(std::move(cb)), operands);
  }

  // What a program partitioned over the same mesh runs instead of the call: each device its own program on its
  // blocks, on its own thread, where the other devices run theirs (ir::ManualSharding).
  std::shared_ptr<const ir::ManualSharding> manualSharding(size_t numOperands) const {
    auto manual = std::make_shared<ir::ManualSharding>();
    const Mesh& mesh = m_exe->mesh();
    const sharding::PartitionResult& part = m_exe->partitioned();
    const ir::Graph& g = m_traced.graph;
    ir::HostCallback local;
    local.name = fmt::format("shard_map({})", m_name);
    for (size_t i = 0; i < numOperands; ++i) {
      manual->operands.push_back(spmd::constraintAttrs(NamedSharding{mesh, part.inputShardings[i].toSpec(mesh)}));
      local.operands.push_back(g.aval(g.inputs()[i]));
    }
    for (size_t r = 0; r < part.outputShardings.size(); ++r) {
      manual->results.push_back(spmd::constraintAttrs(NamedSharding{mesh, part.outputShardings[r].toSpec(mesh)}));
      local.results.push_back(g.aval(g.outputs()[r]));
    }
    local.fn = [exe = m_exe](std::span<const ir::TensorView> ops, std::span<const ir::MutableTensorView> results) {
      std::vector<runtime::BufferPtr> blocks;
      for (const ir::TensorView& v : ops) {
        auto b = runtime::Buffer::allocateUninitialized(v.aval.bytes());
        if (!b.ok()) throw std::runtime_error(b.error().message);
        if (v.aval.bytes() > 0) std::memcpy((*b)->data(), v.data, static_cast<size_t>(v.aval.bytes()));
        blocks.push_back(std::move(*b));
      }
      auto outs = exe->runOnThisDevice(blocks);
      if (!outs.ok()) throw std::runtime_error(outs.error().message);
      for (size_t r = 0; r < results.size(); ++r)
        if (results[r].aval.bytes() > 0)
          std::memcpy(results[r].data, (*outs)[r]->data(), static_cast<size_t>(results[r].aval.bytes()));
    };
    manual->perDevice = ir::makeHostCallback(std::move(local));
    return manual;
  }

  // The per-device program bound into the current trace (a shard_map body's), on the blocks and then the values
  // the function closes over: the function with those values as arguments.
  std::vector<Array> apply(const std::vector<Array>& inputs) const {
    UserSite site;
    if (inputs.size() != m_traced.graph.inputs().size())
      throw py::value_error(fmt::format("shard_map({}): {} inputs, expected {}", m_name, inputs.size(),
                                        m_traced.graph.inputs().size()));
    return bindGraph(m_traced.graph, inputs);
  }
  const std::vector<Array>& consts() const { return m_traced.consts; }

  // Whether the function closes over a value of the trace it was traced in (then it serves that trace alone).
  bool closesOverTrace() const {
    return std::any_of(m_traced.consts.begin(), m_traced.consts.end(), [](const Array& c) { return !c.isConcrete(); });
  }

  // The program every device runs, as text.
  std::string text() const { return ir::print(m_exe->program(), ops::registry()); }

 private:
  TensorSharding shardingOf(const Mesh& mesh, const std::vector<std::vector<std::string>>& dims, const Shape& shape,
                            const std::string& what) const {
    auto t = TensorSharding::fromSpec(mesh, PartitionSpec{dims}, shape);
    if (!t.ok()) throw py::value_error(fmt::format("shard_map({}): {}: {}", m_name, what, t.error().message));
    return std::move(t).value();
  }

  // The program's inputs: each argument put on the mesh as the program takes it (devicePut keeps an array that
  // is already), then the closed-over values whole.
  static Result<std::vector<Array>> runOn(spmd::SpmdExecutable& exe, const std::vector<Array>& args,
                                          const std::vector<Array>& consts, const std::vector<bool>& donate) {
    const Mesh& mesh = exe.mesh();
    const std::vector<TensorSharding>& in = exe.partitioned().inputShardings;
    if (args.size() + consts.size() != in.size())
      return makeError("expects {} arguments, got {}", in.size() - consts.size(), args.size());
    // Given up where the caller's handle and `args`' copy are the only ones (a donated argument the caller still
    // holds elsewhere is copied as usual).
    std::vector<bool> given(in.size(), false);
    for (size_t i = 0; i < args.size() && i < donate.size(); ++i)
      given[i] = donate[i] && args[i].isConcrete() && args[i].useCount() <= 2;
    std::vector<Array> inputs;
    for (size_t i = 0; i < args.size(); ++i) {
      TSR_ASSIGN(Array put, spmd::devicePut(args[i], NamedSharding{mesh, in[i].toSpec(mesh)}));
      inputs.push_back(std::move(put));
    }
    // What the function closes over is read whole by every device.
    for (const Array& c : consts) {
      TSR_ASSIGN(Array whole, spmd::fetchWhole(c));
      inputs.push_back(std::move(whole));
    }
    TSR_ASSIGN(std::vector<Array> results, exe.run(inputs, given));
    // An argument copied onto the mesh or resharded (the copy's blocks given up) is deleted all the same.
    for (size_t i = 0; i < args.size(); ++i)
      if (given[i] && !args[i].isDeleted()) {
        args[i].impl()->sharded.reset();
        args[i].impl()->buffer.reset();
      }
    return results;
  }

  std::string m_name;
  ClosedGraph m_traced;
  std::vector<Aval> m_outAvals;
  std::shared_ptr<spmd::SpmdExecutable> m_exe;
};

// The device groups of a collective over mesh axes `names` (major to minor): flattened, and the group size.
py::tuple axisGroups(const Mesh& mesh, const std::vector<std::string>& names) {
  std::vector<int> axes;
  for (const std::string& n : names) {
    int a = mesh.axisIndex(n);
    if (a < 0) {
      PyErr_SetString(PyExc_NameError,
                      fmt::format("unbound axis name: {} ({} has no such axis)", n, mesh.toString()).c_str());
      throw py::error_already_set();
    }
    if (std::find(axes.begin(), axes.end(), a) != axes.end())
      throw py::value_error(fmt::format("axis '{}' named twice", n));
    axes.push_back(a);
  }
  int64_t size = 1;
  for (int a : axes) size *= mesh.shape[static_cast<size_t>(a)];
  return py::make_tuple(sharding::deviceGroups(mesh, axes), size);
}

}  // namespace

void registerShardMap(py::module_& m) {
  py::class_<ShardMapProgram, std::shared_ptr<ShardMapProgram>>(m, "ShardMapProgram")
      .def(py::init<const py::function&, const AvalSpecs&, const Mesh&, const Specs&, const py::function&,
                    const std::string&>())
      .def("call", &ShardMapProgram::call, py::arg("args"), py::arg("donate") = std::vector<bool>{})
      .def("embed", &ShardMapProgram::embed, py::arg("args"), py::arg("consts") = std::nullopt)
      .def("apply", &ShardMapProgram::apply)
      .def("consts", &ShardMapProgram::consts)
      .def("text", &ShardMapProgram::text)
      .def("closes_over_trace", &ShardMapProgram::closesOverTrace);
  m.def("axis_groups", &axisGroups);
  m.def("tracing", [] { return Trace::current() != nullptr; });
  // The collectives of a shard_map body: each over device groups (flattened, groupSize members each).
  m.def("all_reduce", [](const Array& x, const std::vector<int64_t>& groups, int64_t size) {
    UserSite site;
    return bind1(ir::OpCode::AllReduce, {x}, ir::AllReduceAttrs{groups, size}, std::source_location::current());
  });
  m.def("all_gather", [](const Array& x, const std::vector<int64_t>& groups, int64_t size, int64_t dim) {
    UserSite site;
    return bind1(ir::OpCode::AllGather, {x}, ir::AllGatherAttrs{groups, size, dim}, std::source_location::current());
  });
  m.def("reduce_scatter", [](const Array& x, const std::vector<int64_t>& groups, int64_t size, int64_t dim) {
    UserSite site;
    return bind1(ir::OpCode::ReduceScatter, {x}, ir::AllGatherAttrs{groups, size, dim},
                 std::source_location::current());
  });
  m.def("all_to_all", [](const Array& x, const std::vector<int64_t>& groups, int64_t size, int64_t split,
                         int64_t concat) {
    UserSite site;
    return bind1(ir::OpCode::AllToAll, {x}, ir::AllToAllAttrs{groups, size, split, concat},
                 std::source_location::current());
  });
  m.def("collective_permute", [](const Array& x, const std::vector<int64_t>& pairs) {
    UserSite site;
    return bind1(ir::OpCode::CollectivePermute, {x}, ir::CollectivePermuteAttrs{pairs},
                 std::source_location::current());
  });
  // Each device's value (by device id): axis_index's table.
  m.def("device_table", [](const std::vector<int64_t>& table) {
    UserSite site;
    return bind1(ir::OpCode::DeviceTable, {}, ir::DeviceTableAttrs{table, DType::I32}, std::source_location::current());
  });
}

}  // namespace tsr::python
