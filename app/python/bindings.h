#pragma once
// Shared by the two halves of the _tessera extension: module.cpp (the Array type, conversions, errors, the
// Array API) and transforms.cpp (jit, grad, trace, random).
#include <pybind11/pybind11.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "engine/transform/array.h"
#include "engine/transform/provenance_source.h"
#include "engine/transform/trace.h"

namespace tsr::python {

namespace py = pybind11;

struct CodeInfo;

// The Python line that called into the engine: the innermost frame outside the tessera package. While alive,
// every op recorded or raised on this thread names that file:line (as C++ call sites do for C++ models). The
// stack is walked at once (the frames are gone later), but the provenance's strings are made only when an op
// asks for them: an eager op that succeeds never does.
class UserSite : public ProvenanceSource {
 public:
  UserSite();
  UserSite(const UserSite&) = delete;
  UserSite& operator=(const UserSite&) = delete;
  ir::Provenance provenance() const override;

 private:
  void addFunction(const std::string* name);

  std::string m_modulePath;        // the ModuleScope's path at the call ("" outside tessera.nn's modules)
  const CodeInfo* m_code = nullptr;  // the innermost user frame's code; null when there is none
  int m_line = 0;
  // The user's functions on the stack, innermost first, when they name the module path (names owned by the
  // code cache, which lives as long as the process).
  static constexpr size_t kInlineFunctions = 8;
  std::array<const std::string*, kInlineFunctions> m_functions{};
  size_t m_numFunctions = 0;
  std::vector<const std::string*> m_moreFunctions;
  LazyProvenanceScope m_scope;  // last: refers to this
};

// A Python value as an operand: an Array as it is; a Python scalar weakly typed against `like` (x * 2 keeps
// x's dtype, as in JAX); anything else through tessera.numpy.asarray.
Array toArray(py::handle value, const Array* like = nullptr);
std::vector<Array> toArrays(const py::sequence& values);

// Runs the engine with the GIL released; a Python callback the engine makes (a traced function) takes it back.
// A Python exception raised by the callback is kept and raised again when the engine call returns, so that the
// user sees their own exception (a ShapeError of an op inside jit, a KeyError in their code) unchanged.
class CallbackErrors {
 public:
  // Inside a callback: runs f (a Python call) and, when it raises, stores the exception and raises a
  // tsr::Exception that unwinds the engine.
  template <class F>
  auto guard(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (py::error_already_set& e) {
      if (!m_pending) m_pending = std::make_unique<py::error_already_set>(std::move(e));
    } catch (const py::builtin_exception& e) {  // a value pybind11 could not convert
      e.set_error();
      if (!m_pending) m_pending = std::make_unique<py::error_already_set>();
      else PyErr_Clear();
    }
    raise(Error{"the traced Python function raised an exception"});
  }
  // After the engine call, with the GIL held: raises the stored exception, if any.
  void rethrow();

 private:
  std::unique_ptr<py::error_already_set> m_pending;
};

// While alive, Ctrl-C also asks the engine to stop (engine/core/interrupt.h), so that a long compile or run
// ends at its next check instead of when it returns (interrupt.cpp). Taken with the GIL held, around an engine call; does nothing
// off Python's main thread or where SIGINT is ignored or left at its default.
class InterruptWatch {
 public:
  InterruptWatch();
  ~InterruptWatch();
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;
  // With the GIL held, after the engine call: when Ctrl-C stopped it, raises what Python's SIGINT handler raises
  // (KeyboardInterrupt).
  void raiseIfInterrupted();

 private:
  static unsigned long mainThread();
  bool m_active = false;
};

// numpy's dtype name for an engine dtype whose bytes numpy reads as they are; null for bf16, which numpy lacks.
const char* numpyDtype(DType t);

// The engine's Error as the matching Python exception (tessera.ShapeError, DTypeError, ...).
[[noreturn]] void raisePython(const Error& e);
// A result's value, or its error raised as raisePython does.
template <class T>
T orRaise(Result<T> r) {
  if (!r.ok()) raisePython(r.error());
  return std::move(r).value();
}
// An engine error as Python's exception; nothing where the call succeeded.
inline void checked(const Status& s) {
  if (!s.ok()) raisePython(s.error());
}

// Arguments' avals as Python gives them: (shape, dtype name).
using AvalSpecs = std::vector<std::pair<std::vector<int64_t>, std::string>>;
// fn (a flat function of Arrays) traced on these avals; its Python exception, if it raised, is raised again.
ClosedGraph traceClosed(const py::function& fn, const AvalSpecs& avals, const std::string& name);

void registerTransforms(py::module_& m);
// shard_map's programs and the collectives of its bodies (shard_map.cpp).
void registerShardMap(py::module_& m);
// The kernel profiler (profiler.cpp).
void registerProfiler(py::module_& m);
// tessera.export's standalone program text and the programs parsed back from it (export.cpp).
void registerExport(py::module_& m);
// Array.__dlpack__, __dlpack_device__ and from_dlpack (dlpack.cpp).
void registerDlpack(py::module_& m, py::class_<Array>& array);
// host_callback: a Python function called by a program (callbacks.cpp).
void registerCallbacks(py::module_& m);
// When `message` (an engine error) reports the exception a Python callback raised, sets that exception, with
// the message as a note, as the Python error and returns true. With the GIL held.
bool restoreCallbackError(const std::string& message);

}  // namespace tsr::python
