// The kernel profiler for Python (tessera/profiler.py, as jax.profiler): while a Profiler is started, every kernel
// launch of every program in the process is recorded (engine/runtime/profiler.h), with host spans the script
// marks (TraceAnnotation, StepTraceAnnotation); stopped, the trace goes to a Chrome/Perfetto JSON file and/or a
// run store profile, which `tessera runs`, `tessera runs export-trace` and the IDE's Timeline read.
#include <pybind11/stl.h>

#include <optional>

#include <fmt/format.h>

#include "app/python/bindings.h"
#include "engine/runtime/profiler.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"

namespace tsr::python {

namespace {

class PyProfiler {
 public:
  void start() {
    if (m_scope) throw py::value_error("the profiler is already started");
    m_profiler.clear();
    m_scope.emplace(m_profiler);
  }
  void stop() {
    if (!m_scope) throw py::value_error("the profiler is not started");
    m_scope.reset();
  }
  bool running() const { return m_scope.has_value(); }
  void mark(const std::string& name, int64_t startNs, int64_t durationNs) {
    m_profiler.mark(runtime::ProfileMark{name, startNs, durationNs, 0});
  }
  size_t launches() const { return m_profiler.events().size(); }

  void writeChromeTrace(const std::string& path) const {
    checked(runtime::writeChromeTrace(path, runtime::Trace::from(m_profiler)));
  }

  // A profile of run `run` in the store: the launches, the kernels, the marks; firstStep/lastStep the steps the
  // marks name (0 when none). Returns the profile's id.
  int64_t save(store::RunStore& db, int64_t run, const std::string& name, int64_t firstStep, int64_t lastStep) const {
    const int64_t id = orRaise(db.createProfile(run, name, firstStep, lastStep));
    checked(train::saveTrace(db, id, runtime::Trace::from(m_profiler)));
    return id;
  }

  // The kernels by name, longest total time first: (name, kind, launches, total ns, flops, bytes).
  py::list summary() const {
    py::list out;
    for (const auto& k : train::summarizeKernels(runtime::Trace::from(m_profiler)))
      out.append(py::make_tuple(k.name, k.kind, k.count, k.totalNs, k.flops, k.bytes));
    return out;
  }

 private:
  runtime::Profiler m_profiler;
  std::optional<runtime::ProfilerScope> m_scope;
};

}  // namespace

void registerProfiler(py::module_& m) {
  py::class_<PyProfiler>(m, "Profiler")
      .def(py::init<>())
      .def("start", &PyProfiler::start)
      .def("stop", &PyProfiler::stop)
      .def_property_readonly("running", &PyProfiler::running)
      .def("mark", &PyProfiler::mark)
      .def_property_readonly("launches", &PyProfiler::launches)
      .def("write_chrome_trace", &PyProfiler::writeChromeTrace, py::call_guard<py::gil_scoped_release>())
      .def("save", &PyProfiler::save, py::call_guard<py::gil_scoped_release>())
      .def("summary", &PyProfiler::summary);
  m.def("profiler_now_ns", &runtime::Profiler::nowNs);
}

}  // namespace tsr::python
