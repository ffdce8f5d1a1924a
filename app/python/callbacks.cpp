// Host callbacks from Python (jax.pure_callback, io_callback, jax.debug.callback): a Python function as an
// engine host callback (engine/ir/host_callback.h). The engine calls it with the operands' bytes, from whatever
// thread runs the program; it takes the GIL, gives the function numpy copies, and checks what comes back.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <stdexcept>

#include "app/python/bindings.h"
#include "engine/ir/host_callback.h"
#include "engine/transform/api.h"

namespace tsr::python {

namespace {

// A Python callable that programs hold: released with the GIL, as a program may die on any thread (a jitted
// function's cache is dropped with the GIL released), and left alone while the interpreter shuts down.
class PyCallable {
 public:
  explicit PyCallable(py::object fn) : m_fn(std::move(fn)) {}
  PyCallable(const PyCallable&) = delete;
  PyCallable& operator=(const PyCallable&) = delete;
  ~PyCallable() {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) {
      m_fn.release();
      return;
    }
    py::gil_scoped_acquire gil;
    m_fn = py::object();
  }
  const py::object& fn() const { return m_fn; }

 private:
  py::object m_fn;
};

// numpy's dtype for values of `t` given to Python: bf16, which numpy lacks, as float32.
py::dtype hostDtype(DType t) { return py::dtype(numpyDtype(t == DType::BF16 ? DType::F32 : t)); }

py::array toNumpy(const ir::TensorView& v) {
  std::vector<py::ssize_t> shape(v.aval.shape.dims().begin(), v.aval.shape.dims().end());
  py::array out(hostDtype(v.aval.dtype), shape);
  const int64_t n = v.aval.numel();
  if (v.aval.dtype == DType::BF16) {
    auto* dst = static_cast<float*>(out.mutable_data());
    const auto* src = static_cast<const uint16_t*>(v.data);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16BitsToFloat(src[i]);
  } else if (n > 0) {
    std::memcpy(out.mutable_data(), v.data, static_cast<size_t>(v.aval.bytes()));
  }
  return out;
}

// A shape as Python writes a tuple: (), (3,), (3, 4).
std::string shapeText(const Shape& s) {
  const auto& d = s.dims();
  return d.size() == 1 ? fmt::format("({},)", d[0]) : fmt::format("({})", fmt::join(d, ", "));
}

// Copies the function's result r into out, converted to its dtype (as JAX casts a callback's results); a shape
// other than the one declared is an error.
void fromNumpy(py::handle r, const ir::MutableTensorView& out, const std::string& name, size_t index) {
  py::array a = py::module_::import("numpy").attr("asarray")(r);
  Shape got(std::vector<int64_t>(a.shape(), a.shape() + a.ndim()));
  if (got != out.aval.shape)
    throw std::runtime_error(fmt::format("{}: result {} has shape {}, but {} was declared", name, index,
                                         shapeText(got), shapeText(out.aval.shape)));
  py::array c = py::array::ensure(a.attr("astype")(hostDtype(out.aval.dtype)), py::array::c_style);
  const int64_t n = out.aval.numel();
  if (out.aval.dtype == DType::BF16) {
    auto* dst = static_cast<uint16_t*>(out.data);
    const auto* src = static_cast<const float*>(c.data());
    for (int64_t i = 0; i < n; ++i) dst[i] = floatToBf16Bits(src[i]);
  } else if (n > 0) {
    std::memcpy(out.data, c.data(), static_cast<size_t>(out.aval.bytes()));
  }
}

// The exception the latest failing Python callback raised, kept (with the GIL) until the engine's error that
// carries `text` reaches Python, where the user sees their own exception rather than an engine error.
struct PendingError {
  std::string text;
  std::unique_ptr<py::error_already_set> error;
};
PendingError& pendingError() {
  static PendingError* p = new PendingError;  // never destroyed: it may hold a Python object at exit
  return *p;
}

// "KeyError: 'x' (at model.py:12 in read)": the exception and the innermost frame that raised it.
std::string describe(py::error_already_set& e) {
  std::string text = py::str(e.type().attr("__name__")).cast<std::string>();
  if (std::string v = py::str(e.value()).cast<std::string>(); !v.empty()) text += ": " + v;
  py::object tb = e.trace();
  if (tb && !tb.is_none()) {
    while (!tb.attr("tb_next").is_none()) tb = tb.attr("tb_next");
    py::object code = tb.attr("tb_frame").attr("f_code");
    text += fmt::format(" (at {}:{} in {})", py::str(code.attr("co_filename")).cast<std::string>(),
                        tb.attr("tb_lineno").cast<int>(), py::str(code.attr("co_name")).cast<std::string>());
  }
  return text;
}

// fn(list of numpy arrays) -> list of results (the Python side flattens and unflattens the user's trees).
ir::HostCallback::Fn callFromEngine(std::shared_ptr<PyCallable> fn, std::string name) {
  return [fn = std::move(fn), name = std::move(name)](std::span<const ir::TensorView> in,
                                                      std::span<const ir::MutableTensorView> out) {
    py::gil_scoped_acquire gil;
    try {
      py::list args;
      for (const ir::TensorView& v : in) args.append(toNumpy(v));
      py::object r = fn->fn()(args);
      py::list results(r);
      if (results.size() != out.size())
        throw std::runtime_error(fmt::format("{}: the function returned {} values, {} were declared", name,
                                             results.size(), out.size()));
      for (size_t i = 0; i < out.size(); ++i) fromNumpy(results[i], out[i], name, i);
    } catch (py::error_already_set& e) {
      // The program fails with a message naming the callback and the exception; Python gets the exception.
      std::string text = fmt::format("{} raised {}", name, describe(e));
      PendingError& p = pendingError();
      p.text = text;
      p.error = std::make_unique<py::error_already_set>(std::move(e));
      throw std::runtime_error(text);
    }
  };
}

ir::VmapMethod vmapMethod(const std::string& m) {
  if (m == "sequential" || m == "sequential_unrolled") return ir::VmapMethod::Sequential;
  if (m == "expand_dims") return ir::VmapMethod::ExpandDims;
  if (m == "broadcast_all") return ir::VmapMethod::BroadcastAll;
  if (m == "none") return ir::VmapMethod::Refused;
  throw py::value_error(fmt::format("vmap_method must be 'sequential', 'sequential_unrolled', 'expand_dims', "
                                    "'broadcast_all' or None; got '{}'", m));
}

}  // namespace

bool restoreCallbackError(const std::string& message) {
  PendingError& p = pendingError();
  if (!p.error || p.text.empty() || message.find(p.text) == std::string::npos) return false;
  std::unique_ptr<py::error_already_set> error = std::move(p.error);
  p.text.clear();
  py::object value = error->value();
  if (py::hasattr(value, "add_note")) value.attr("add_note")(message);
  error->restore();
  return true;
}

void registerCallbacks(py::module_& m) {
  // host_callback(fn, operands, results: [(shape, dtype name)], effectful, vmap_method, name, no_derivative="")
  // -> [Array]; no_derivative: the error when a cotangent reaches the call (empty: the default one).
  m.def("host_callback", [](py::function fn, const py::sequence& operands,
                            const std::vector<std::pair<std::vector<int64_t>, std::string>>& results,
                            bool effectful, const std::string& vmap, const std::string& name,
                            const std::string& noDerivative) {
    UserSite site;
    std::vector<Array> args = toArrays(operands);
    ir::HostCallback cb;
    cb.name = name;
    for (const Array& a : args) cb.operands.push_back(a.aval());
    for (const auto& [dims, dtype] : results) {
      auto t = parseDType(dtype);
      if (!t) throw py::type_error(fmt::format("{}: unknown result dtype '{}'", name, dtype));
      for (int64_t d : dims)
        if (d < 0) throw py::value_error(fmt::format("{}: negative dimension in a result shape", name));
      cb.results.push_back(Aval{Shape(dims), *t});
    }
    cb.effectful = effectful;
    cb.vmap = vmapMethod(vmap);
    cb.noDerivative = noDerivative;
    cb.fn = callFromEngine(std::make_shared<PyCallable>(std::move(fn)), name);
    ir::HostCallbackPtr ptr = ir::makeHostCallback(std::move(cb));
    return hostCallback(ptr, args);
  }, py::arg("fn"), py::arg("operands"), py::arg("results"), py::arg("effectful"), py::arg("vmap_method"),
     py::arg("name"), py::arg("no_derivative") = std::string());
}

}  // namespace tsr::python
