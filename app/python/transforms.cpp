// jit, grad, vjp, trace, control flow, custom_vjp and random for Python. The tessera package flattens pytrees and static arguments
// (tessera/_transforms.py); these bindings see flat lists of Arrays and call the user's function back through a
// flat wrapper, which the engine traces like any C++ function.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <mutex>

#include <fmt/format.h>

#include "app/python/bindings.h"
#include "engine/compile/jit.h"
#include "engine/ops/registry.h"
#include "engine/random/random.h"
#include "engine/sharding/sharding.h"
#include "engine/spmd/spmd.h"
#include "engine/store/run_store.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/custom_vjp.h"
#include "engine/transform/remat.h"
#include "engine/transform/vmap.h"

namespace tsr::python {

namespace {

std::vector<Array> callFlat(const py::function& fn, const std::vector<Array>& args, CallbackErrors& errors) {
  return errors.guard([&] {
    py::list xs;
    for (const Array& a : args) xs.append(py::cast(a));
    return toArrays(fn(xs));
  });
}

py::list toList(const std::vector<Array>& xs) {
  py::list out;
  for (const Array& a : xs) out.append(py::cast(a));
  return out;
}

// Runs an engine entry point that calls Python back: the user's exception comes out first, then the engine's.
// Ctrl-C stops the engine's loops (an eager scan or while_loop) at their next iteration.
template <class F>
auto runEngine(CallbackErrors& errors, F&& f) -> decltype(f()) {
  InterruptWatch interrupt;
  try {
    return f();
  } catch (const Exception& e) {
    errors.rethrow();
    interrupt.raiseIfInterrupted();
    throw;
  }
}

// A jitted Python function: one engine Jit, whose cache keys on the leaves' avals and on `signature` (the
// Python side's pytree structure and static arguments, as text), which the callback hands back to Python.
class PyJit {
 public:
  PyJit(py::function flat, std::string name) : m_flat(std::move(flat)) {
    m_jit = std::make_unique<Jit>(
        [this](const Tree& args, const StaticArgs& statics) {
          py::gil_scoped_acquire gil;
          const std::string& signature = std::get<std::string>(statics.at("signature"));
          std::vector<Array> outs = m_callErrors->guard([&] {
            py::list xs;
            for (const Array& a : args.leaves()) xs.append(py::cast(a));
            return toArrays(m_flat(xs, signature));
          });
          std::vector<Tree> leaves(outs.begin(), outs.end());
          return Tree::list(std::move(leaves));
        },
        std::move(name));
    m_jit->setCallerHandles(1);  // the Python object of each argument array
  }

  // donated: the indices (as text) of the leaves whose buffers the call may take (donate_argnums); a signature's
  // leaves are the same at every call, so what its first call passes is kept with its compiled program.
  py::list call(const py::sequence& leaves, const std::string& signature, std::vector<std::string> donated) {
    std::vector<Tree> args;
    for (Array& a : toArrays(leaves)) args.emplace_back(std::move(a));
    Tree argTree = Tree::list(std::move(args));
    Result<Tree> out = Error{};
    CallbackErrors errors;  // this call's: another thread's call may start as soon as the lock is released
    InterruptWatch interrupt;
    {
      // Tracing takes the GIL back in the callback; compiling and running do not need it. One call at a time
      // (the cache is not shared between threads), the lock taken without the GIL so that a thread waiting for
      // it never blocks one that is tracing.
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(m_mutex);
      m_callErrors = &errors;
      m_jit->setDonatedArgs(std::move(donated));
      out = m_jit->call(argTree, {{"signature", signature}});
      m_callErrors = nullptr;
    }
    errors.rethrow();
    if (!out.ok()) {
      interrupt.raiseIfInterrupted();
      raisePython(out.error());
    }
    return toList(out->leaves());
  }

  const Jit& jit() const { return *m_jit; }

 private:
  py::function m_flat;  // (leaves, signature) -> output leaves
  std::mutex m_mutex;
  CallbackErrors* m_callErrors = nullptr;  // the running call's, set under m_mutex
  std::unique_ptr<Jit> m_jit;
};

// value_and_grad over flat leaves: fn(leaves) returns [loss, *aux_leaves].
py::tuple valueAndGradFlat(const py::function& fn, const py::sequence& leaves) {
  CallbackErrors errors;
  std::vector<Tree> params;
  for (Array& a : toArrays(leaves)) params.emplace_back(std::move(a));
  UserSite site;
  ValueAndGrad vg = runEngine(errors, [&] {
    return valueAndGradWithAux([&](const Tree& p) {
      std::vector<Array> outs = callFlat(fn, p.leaves(), errors);
      if (outs.empty()) raise(Error{"grad: the function returned nothing"});
      std::vector<Tree> aux(outs.begin() + 1, outs.end());
      return std::make_pair(outs[0], Tree::list(std::move(aux)));
    })(Tree::list(std::move(params)));
  });
  return py::make_tuple(vg.value, toList(vg.grads.leaves()), toList(vg.aux.leaves()));
}

// vjp over flat leaves: the outputs and a pullback from output cotangents (None: zero) to input cotangents.
py::tuple vjpFlat(const py::function& fn, const py::sequence& primals) {
  auto errors = std::make_shared<CallbackErrors>();
  UserSite site;
  VjpOutput v = runEngine(*errors, [&] {
    return vjp([fn, errors](const std::vector<Array>& xs) { return callFlat(fn, xs, *errors); }, toArrays(primals));
  });
  auto pullback = [pb = v.pullback, errors](const py::sequence& cts) {
    std::vector<Array> c;
    for (py::handle h : cts) c.push_back(h.is_none() ? Array() : toArray(h));
    UserSite site;
    return toList(runEngine(*errors, [&] { return pb(c); }));
  };
  return py::make_tuple(toList(v.outputs), py::cpp_function(pullback));
}

// vmap over flat leaves: inAxes per leaf (-1: shared by every example); the batch axis of every output is 0.
py::list vmapFlat(const py::function& fn, const py::sequence& args, const std::vector<int>& inAxes) {
  CallbackErrors errors;
  UserSite site;
  ArrayFn batched = vmap([&](const std::vector<Array>& xs) { return callFlat(fn, xs, errors); }, inAxes);
  return toList(runEngine(errors, [&] { return batched(toArrays(args)); }));
}

// lax.scan over flat leaves: body(carries..., x slices...) -> (new carries..., y slices...); returns the final
// carries followed by the stacked ys.
py::list scanFlatPy(const py::function& body, const py::sequence& carries, const py::sequence& xs, int64_t length,
                    bool reverse) {
  CallbackErrors errors;
  UserSite site;
  return toList(runEngine(errors, [&] {
    return scanFlat([&](const std::vector<Array>& in) { return callFlat(body, in, errors); }, {}, toArrays(carries),
                    toArrays(xs), length, reverse);
  }));
}

// lax.cond over flat leaves: one branch runs eagerly; under a trace both are traced into one cond op.
py::list condFlatPy(py::handle pred, const py::function& trueFn, const py::function& falseFn,
                    const py::sequence& operands) {
  CallbackErrors errors;
  UserSite site;
  return toList(runEngine(errors, [&] {
    return condFlat(
        toArray(pred), [&](const std::vector<Array>& xs) { return callFlat(trueFn, xs, errors); },
        [&](const std::vector<Array>& xs) { return callFlat(falseFn, xs, errors); }, toArrays(operands));
  }));
}

// lax.while_loop over flat leaves: cond(carries) -> bool scalar, body(carries) -> new carries.
py::list whileLoopFlatPy(const py::function& condFn, const py::function& bodyFn, const py::sequence& carries) {
  CallbackErrors errors;
  UserSite site;
  return toList(runEngine(errors, [&] {
    return whileLoopFlat([&](const std::vector<Array>& xs) { return callFlat(condFn, xs, errors); },
                         [&](const std::vector<Array>& xs) { return callFlat(bodyFn, xs, errors); }, {},
                         toArrays(carries));
  }));
}

// custom_vjp over flat leaves: f(operands) -> outputs, fwd(operands) -> outputs + residuals, bwd(operands +
// residuals + output cotangents) -> one cotangent per primal (the first numPrimals operands). All three are traced
// during this call.
py::list customVjpCallPy(const py::function& f, const py::function& fwd, const py::function& bwd,
                         const py::sequence& operands, size_t numPrimals) {
  CallbackErrors errors;
  UserSite site;
  auto flat = [&](const py::function& fn) -> ArrayFn {
    return [&](const std::vector<Array>& xs) { return callFlat(fn, xs, errors); };
  };
  return toList(
      runEngine(errors, [&] { return customVjpCall(flat(f), flat(fwd), flat(bwd), toArrays(operands), numPrimals); }));
}

// checkpoint over flat leaves: f(operands) -> outputs as one remat_call under the named policy.
py::list rematCallPy(const py::function& f, const py::sequence& operands, const std::string& policy) {
  auto parsed = parseRematPolicy(policy);
  if (!parsed.ok()) throw py::value_error("checkpoint: " + parsed.error().message);
  CallbackErrors errors;
  UserSite site;
  return toList(runEngine(errors, [&] {
    return rematCall([&](const std::vector<Array>& xs) { return callFlat(f, xs, errors); }, toArrays(operands), *parsed);
  }));
}

py::list optimizationBarrierPy(const py::sequence& values) {
  CallbackErrors errors;
  UserSite site;
  return toList(runEngine(errors, [&] { return optimizationBarrier(toArrays(values)); }));
}

void countNodes(const ir::Graph& g, bool nested, int& total, int& inNested, int& dots) {
  for (const ir::Node& n : g.nodes()) {
    ++total;
    inNested += nested;
    dots += n.op == ir::OpCode::DotGeneral;
    for (const ir::GraphPtr& body : ir::nestedGraphs(n.attrs))
      if (body) countNodes(*body, true, total, inNested, dots);
  }
}

}  // namespace

ClosedGraph traceClosed(const py::function& fn, const AvalSpecs& avals, const std::string& name) {
  CallbackErrors errors;
  std::vector<Aval> in;
  for (const auto& [dims, dtype] : avals) {
    auto d = parseDType(dtype);
    if (!d) throw py::type_error(fmt::format("trace: unknown dtype '{}'", dtype));
    in.push_back(Aval{Shape(dims), *d});
  }
  Result<ClosedGraph> cg = makeGraph([&](const std::vector<Array>& xs) { return callFlat(fn, xs, errors); }, in, name);
  errors.rethrow();
  if (!cg.ok()) raisePython(cg.error());
  return std::move(cg).value();
}

namespace {

// The IR of fn on these avals as text that stands alone (its constants written in), for another process to
// parse: how a project's model.py reaches the engine (tessera/project_trace.py).
std::string traceStandalone(const py::function& fn, const AvalSpecs& avals, const std::string& name) {
  ClosedGraph cg = traceClosed(fn, avals, name);
  Result<ir::Graph> g = inlineConsts(cg);
  if (!g.ok()) raisePython(g.error());
  return ir::print(*g, ops::registry());
}

// The IR of fn on these avals, printed as `tessera ir` prints a graph: the text, then a comment line with the
// node counts.
std::string traceFlat(const py::function& fn, const AvalSpecs& avals, const std::string& name) {
  const ClosedGraph cg = traceClosed(fn, avals, name);
  int total = 0, inNested = 0, dots = 0;
  countNodes(cg.graph, false, total, inNested, dots);
  std::string text = ir::print(cg.graph, ops::registry());
  text += fmt::format("// {} dot_general, {} nodes", dots, total);
  if (inNested) text += fmt::format(" ({} of them in nested graphs)", inNested);
  return text + "\n";
}

// jax.eval_shape over flat leaves: the outputs' (shape, dtype) of fn on these avals, traced, nothing run.
py::list evalShapeFlat(const py::function& fn, const AvalSpecs& avals) {
  const ClosedGraph cg = traceClosed(fn, avals, "eval_shape");
  py::list out;
  for (ir::ValueId v : cg.graph.outputs()) {
    const Aval& a = cg.graph.aval(v);
    out.append(py::make_tuple(a.shape.dims(), std::string(dtypeName(a.dtype))));
  }
  return out;
}

DType floatDtype(const std::string& name) {
  auto d = parseDType(name);
  if (!d) throw py::type_error(fmt::format("unknown dtype '{}'", name));
  return *d;
}

void defineRandom(py::module_& m) {
  // Seeds may be negative or above 2^63: JAX casts them to uint64 the same way.
  m.def("random_key", [](py::int_ seed) {
    UserSite site;
    uint64_t s = PyLong_AsUnsignedLongLongMask(seed.ptr());
    return random::key(s);
  });
  m.def("random_split", [](const Array& key, int64_t num) { UserSite site; return random::split(key, num); });
  m.def("random_fold_in", [](const Array& key, py::handle data) {
    UserSite site;
    if (py::isinstance<py::int_>(data)) return random::foldIn(key, static_cast<uint32_t>(PyLong_AsUnsignedLongMask(data.ptr())));
    return random::foldIn(key, toArray(data));
  });
  m.def("random_bits", [](const Array& key, const std::vector<int64_t>& shape, const std::string& dtype) {
    UserSite site;
    return random::bits(key, Shape(shape), floatDtype(dtype));
  });
  m.def("random_uniform", [](const Array& key, const std::vector<int64_t>& shape, const std::string& dtype,
                             double minval, double maxval) {
    UserSite site;
    return random::uniform(key, Shape(shape), floatDtype(dtype), minval, maxval);
  });
  m.def("random_normal", [](const Array& key, const std::vector<int64_t>& shape, const std::string& dtype) {
    UserSite site;
    return random::normal(key, Shape(shape), floatDtype(dtype));
  });
  m.def("random_bernoulli", [](const Array& key, double p, const std::vector<int64_t>& shape) {
    UserSite site;
    return random::bernoulli(key, p, Shape(shape));
  });
  m.def("random_categorical", [](const Array& key, py::handle logits, int64_t axis) {
    UserSite site;
    return random::categorical(key, toArray(logits), axis);
  });
}

// Meshes, shardings and device_put (jax.sharding): a PartitionSpec comes from Python as one list of mesh axis
// names per array dimension (empty: replicated).
void defineSharding(py::module_& m) {
  using sharding::Mesh;
  using sharding::NamedSharding;
  m.def("set_cpu_devices", [](int n) {
    Status s = spmd::setCpuDevices(n);
    if (!s.ok()) raisePython(s.error());
  });
  m.def("num_devices", [] {
    orRaise(spmd::devices());
    return spmd::numDevices();
  });
  py::class_<Mesh>(m, "Mesh")
      .def(py::init([](std::vector<int64_t> shape, std::vector<std::string> axes, std::vector<int> devices) {
             orRaise(spmd::devices());  // the devices exist before a mesh names them
             return orRaise(Mesh::create(std::move(shape), std::move(axes), std::move(devices)));
           }),
           py::arg("shape"), py::arg("axis_names"), py::arg("devices") = std::vector<int>{})
      .def_readonly("shape", &Mesh::shape)
      .def_readonly("axis_names", &Mesh::axes)
      .def_readonly("device_ids", &Mesh::devices)
      .def_property_readonly("size", &Mesh::size)
      .def("__eq__", [](const Mesh& a, const Mesh& b) { return a == b; })
      .def("__repr__", &Mesh::toString);
  py::class_<NamedSharding>(m, "NamedSharding")
      .def(py::init([](const Mesh& mesh, std::vector<std::vector<std::string>> dims) {
        return orRaise(NamedSharding::create(mesh, sharding::PartitionSpec{std::move(dims)}));
      }))
      .def_readonly("mesh", &NamedSharding::mesh)
      .def_property_readonly("spec", [](const NamedSharding& s) { return s.spec.dims; })
      .def("shard_shape", [](const NamedSharding& s, const std::vector<int64_t>& shape) {
        // As jax's: a dim its shards do not divide is an error, not a block rounded down.
        if (Status st = s.check(Shape(shape)); !st.ok()) raisePython(st.error());
        return s.shardShape(Shape(shape)).dims();
      })
      .def("__repr__", &NamedSharding::toString);
  m.def("device_put", [](const Array& x, const NamedSharding& s) {
    UserSite site;
    return orRaise(spmd::devicePut(x, s));
  });
  m.def("with_sharding_constraint", [](const Array& x, const NamedSharding& s) {
    UserSite site;
    return spmd::withShardingConstraint(x, s);
  });
  m.def("array_sharding", [](const Array& x) -> py::object {
    if (!x.isSharded()) return py::none();
    return py::cast(*x.sharding());
  });
  m.def("visualize_array_sharding", [](const Array& x, int width) {
    return orRaise(spmd::visualizeArraySharding(x, width));
  });
}

// The run store (engine/store: the SQLite file the CLI's runs and the IDE's Runs panel read), for
// tessera.runs: a plain script's run lands beside a project's.
void defineRuns(py::module_& m) {
  using store::RunStore;
  py::class_<RunStore>(m, "RunStore")
      .def(py::init([](const std::string& path) { return orRaise(RunStore::open(path)); }))
      .def_property_readonly("path", &RunStore::path)
      .def("create_run", [](RunStore& s, const std::string& name, const std::string& project, const std::string& config) {
        return orRaise(s.createRun(name, project, config));
      })
      .def("set_params", [](RunStore& s, int64_t run, const std::map<std::string, std::string>& params) {
        checked(s.setParams(run, params));
      })
      .def("add_tags", [](RunStore& s, int64_t run, const std::vector<std::string>& tags) { checked(s.addTags(run, tags)); })
      .def("log", [](RunStore& s, int64_t run, int64_t step, const std::vector<std::pair<std::string, double>>& values) {
        checked(s.logMetrics(run, step, values));
      })
      .def("finish", [](RunStore& s, int64_t run, bool ok, const std::string& message) {
        checked(s.finishRun(run, ok ? store::RunStatus::Finished : store::RunStatus::Failed, message));
      })
      .def("run", [](const RunStore& s, int64_t run) {
        store::RunInfo r = orRaise(s.run(run));
        return py::dict(py::arg("id") = r.id, py::arg("name") = r.name, py::arg("project") = r.project,
                        py::arg("config") = r.config, py::arg("status") = std::string(store::runStatusName(r.status)),
                        py::arg("message") = r.message, py::arg("tags") = r.tags);
      })
      .def("params", [](const RunStore& s, int64_t run) { return orRaise(s.params(run)); })
      .def("metrics", [](const RunStore& s, int64_t run, const std::string& key) {
        std::vector<std::pair<int64_t, double>> out;
        for (const store::MetricPoint& p : orRaise(s.metrics(run, key))) out.emplace_back(p.step, p.value);
        return out;
      });
}

}  // namespace

void registerTransforms(py::module_& m) {
  py::class_<PyJit>(m, "Jit")
      .def(py::init<py::function, std::string>())
      .def("call", &PyJit::call, py::arg("leaves"), py::arg("signature"), py::arg("donated") = std::vector<std::string>{})
      .def_property_readonly("hits", [](const PyJit& j) { return j.jit().stats().hits; })
      .def_property_readonly("misses", [](const PyJit& j) { return j.jit().stats().misses; })
      .def_property_readonly("compile_seconds", [](const PyJit& j) { return j.jit().stats().compileSeconds; })
      .def_property_readonly("cache_size", [](const PyJit& j) { return j.jit().cacheSize(); })
      .def_property_readonly("last_miss_reason", [](const PyJit& j) { return j.jit().lastMissReason(); });
  m.def("value_and_grad", &valueAndGradFlat);
  m.def("vjp", &vjpFlat);
  m.def("trace", &traceFlat);
  m.def("trace_standalone", &traceStandalone);
  m.def("eval_shape", &evalShapeFlat);
  m.def("vmap", &vmapFlat);
  m.def("scan", &scanFlatPy);
  m.def("cond", &condFlatPy);
  m.def("while_loop", &whileLoopFlatPy);
  m.def("custom_vjp_call", &customVjpCallPy);
  m.def("remat_call", &rematCallPy);
  m.def("optimization_barrier", &optimizationBarrierPy);
  defineRandom(m);
  defineSharding(m);
  defineRuns(m);
}

}  // namespace tsr::python
