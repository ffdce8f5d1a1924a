// tessera.export (tessera/export.py, as jax.export): a function's traced program as text that stands alone (its
// constants written in, as a project's model.py reaches the engine), and such text parsed back into a program
// that binds its ops into whatever runs it: eagerly, jit, grad, vmap. The text is the IR's own (ir::print), so
// `tessera ir` and `tessera compile` read it too.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "app/python/bindings.h"
#include "engine/ir/graph.h"
#include "engine/ops/registry.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"

namespace tsr::python {

namespace {

// Whether g, or a graph its nodes hold (a loop's body), calls a host function.
bool callsHost(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::OpCode::HostCallback) return true;
    for (const ir::GraphPtr& nested : ir::nestedGraphs(n.attrs))
      if (callsHost(*nested)) return true;
  }
  return false;
}

// fn (flat) traced on these avals, as text that stands alone. A call back into Python cannot travel with it.
std::string exportText(const py::function& fn, const AvalSpecs& avals, const std::string& name) {
  ClosedGraph cg = traceClosed(fn, avals, name);
  if (callsHost(cg.graph))
    throw py::value_error(fmt::format(
        "export({}): the function calls back into Python (debug.print, pure_callback, io_callback, shard_map), "
        "which a serialized program cannot hold", name));
  return ir::print(orRaise(inlineConsts(cg)), ops::registry());
}

py::list avalList(const ir::Graph& g, const std::vector<ir::ValueId>& values) {
  py::list out;
  for (ir::ValueId v : values) {
    const Aval& a = g.aval(v);
    out.append(py::make_tuple(a.shape.dims(), std::string(dtypeName(a.dtype))));
  }
  return out;
}

// A program parsed back from exportText's text.
class LoadedProgram {
 public:
  explicit LoadedProgram(const std::string& text) {
    Result<ir::Graph> g = ir::parse(text, ops::registry());
    if (!g.ok()) throw py::value_error("export: the serialized program does not parse: " + g.error().message);
    if (Status st = ir::verify(*g, ops::registry()); !st.ok())
      throw py::value_error("export: the serialized program is not valid: " + st.error().message);
    m_graph = std::make_shared<ir::Graph>(std::move(*g));
  }

  // The program's ops bound on these inputs (in its inputs' order) into the current trace, or run one by one.
  std::vector<Array> apply(const std::vector<Array>& inputs) const {
    UserSite site;
    const ir::Graph& g = *m_graph;
    if (inputs.size() != g.inputs().size())
      throw py::value_error(fmt::format("export({}): {} inputs, the program takes {}", g.name, inputs.size(),
                                        g.inputs().size()));
    for (size_t i = 0; i < inputs.size(); ++i)
      if (!(inputs[i].aval() == g.aval(g.inputs()[i])))
        throw py::value_error(fmt::format("export({}): input {} is {}, the program takes {}", g.name, i,
                                          inputs[i].aval().toString(), g.aval(g.inputs()[i]).toString()));
    return bindGraph(g, inputs);
  }

  py::list inAvals() const { return avalList(*m_graph, m_graph->inputs()); }
  py::list outAvals() const { return avalList(*m_graph, m_graph->outputs()); }
  const std::string& name() const { return m_graph->name; }

 private:
  std::shared_ptr<const ir::Graph> m_graph;
};

}  // namespace

void registerExport(py::module_& m) {
  m.def("export_text", &exportText);
  py::class_<LoadedProgram, std::shared_ptr<LoadedProgram>>(m, "LoadedProgram")
      .def(py::init<const std::string&>())
      .def("apply", &LoadedProgram::apply)
      .def_property_readonly("in_avals", &LoadedProgram::inAvals)
      .def_property_readonly("out_avals", &LoadedProgram::outAvals)
      .def_property_readonly("name", &LoadedProgram::name);
}

}  // namespace tsr::python
