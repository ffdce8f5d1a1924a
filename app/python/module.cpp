// _tessera: the engine's Array and its numpy-like API for Python. The pure-Python package tessera/ (numpy.py,
// tree_util.py, random.py, ...) gives these functions JAX's names and signatures; this file only converts
// values and errors at the boundary. Arrays are the engine's own handles: an op called from Python runs eagerly
// on the CPU, or is recorded when its operands are tracers (inside jit, grad, trace).
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <limits>
#include <map>
#include <regex>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "app/python/bindings.h"
#include "engine/backends/backends.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/core/env_options.h"
#include "engine/nn/attention.h"
#include "engine/nn/conv_layers.h"
#include "engine/transform/api.h"
#include "engine/transform/autocast.h"

namespace tsr::python {

namespace {

std::string gPackageDir;  // frames under this folder belong to tessera itself, not to the user
PyObject* gTesseraError = nullptr;
PyObject* gShapeError = nullptr;
PyObject* gDTypeError = nullptr;
PyObject* gConcretizationError = nullptr;
PyObject* gDeletedArrayError = nullptr;
py::object gAsarray;  // tessera.numpy.asarray, set when the package is imported
PyTypeObject* gArrayType = nullptr;  // the Array class, and pybind11's record of it (set when it is defined)
const py::detail::type_info* gArrayInfo = nullptr;

// The engine's errors are one type with a message that starts with the op ("matmul: inner dimensions
// differ: f32[2,3] @ f32[4,5] ..."); the Python type is chosen from what the message is about.
PyObject* exceptionTypeFor(const std::string& message) {
  std::string m = message;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return std::tolower(c); });
  auto has = [&](const char* word) { return m.find(word) != std::string::npos; };
  if (has("traced array") || has("while tracing")) return gConcretizationError;
  if (has("donated to a jitted function and deleted")) return gDeletedArrayError;
  // "indices must be i32, i64 or u32, got f32", "the loss must be floating point", "a key is a u32[2] array".
  static const std::regex kDtypeRule(R"(must be (a |an )?(floating|integer|bool|bf16|[fiu](8|16|32|64)\b))");
  if (has("dtype") || has("u32[2] array") || std::regex_search(m, kDtypeRule)) return gDTypeError;
  if (has("shape") || has("rank") || has("axis") || has("axes") || has("dimension") || has("broadcast") ||
      has(" dim ") || has("[")) return gShapeError;
  return gTesseraError;
}

PyObject* newException(const char* name, PyObject* base1, PyObject* base2) {
  PyObject* bases = base2 ? PyTuple_Pack(2, base1, base2) : PyTuple_Pack(1, base1);
  PyObject* type = PyErr_NewException(name, bases, nullptr);
  Py_DECREF(bases);
  return type;
}

// The Array a Python object holds, or null (a Python scalar, a numpy array). Valid while the object is. The
// exact class is recognised without pybind11's type lookups (an eager op asks twice per call).
const Array* heldArray(py::handle h) {
  if (Py_TYPE(h.ptr()) == gArrayType)
    return reinterpret_cast<py::detail::instance*>(h.ptr())->get_value_and_holder(gArrayInfo).value_ptr<Array>();
  if (py::isinstance<Array>(h)) return &h.cast<const Array&>();
  return nullptr;
}

DType dtypeFromName(const std::string& name) {
  auto d = parseDType(name);
  if (!d) throw py::type_error(fmt::format("unknown dtype '{}' (expected f32, bf16, f16, f64, i32, i64, u8, u32 or bool)", name));
  return *d;
}

Shape toShape(const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d < 0) raise(makeError("negative dimension in shape {}", Shape(dims).toString()));
  return Shape(dims);
}

py::tuple shapeTuple(const Array& a) {
  const auto& dims = a.shape().dims();
  py::tuple t(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) t[i] = py::int_(dims[i]);
  return t;
}

}  // namespace

const char* numpyDtype(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F64: return "float64";
    case DType::F16: return "float16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::U32: return "uint32";
    case DType::Bool: return "bool";
    case DType::BF16: return nullptr;
  }
  return nullptr;
}

namespace {

// A read-only numpy array over the array's own buffer (no copy). The capsule holds a reference to the buffer,
// so the numpy array stays valid whatever happens to the Array. bf16, which numpy lacks, comes back as f32 (a
// copy); a sharded array is gathered first (a copy).
py::array hostView(const Array& x) {
  if (!x.valid()) throw py::value_error("empty Array");
  UserSite site;
  Array a = x.isSharded() ? x.gathered() : x;
  if (a.dtype() == DType::BF16) a = astype(a, DType::F32);
  if (!a.isConcrete() || !a.buffer()) {
    a.toFloats();  // raises the engine's own message for tracers and donated arrays
    throw py::value_error("the array has no host buffer");
  }
  runtime::BufferPtr buffer = a.buffer();
  auto* owner = new runtime::BufferPtr(buffer);
  py::capsule keep(owner, [](void* p) { delete static_cast<runtime::BufferPtr*>(p); });
  std::vector<py::ssize_t> shape(a.shape().dims().begin(), a.shape().dims().end());
  std::vector<py::ssize_t> strides;
  for (int64_t s : a.shape().strides()) strides.push_back(static_cast<py::ssize_t>(s * dtypeSize(a.dtype())));
  py::array out(py::dtype(numpyDtype(a.dtype())), shape, strides, buffer->data(), keep);
  py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return out;
}

// A C-contiguous host buffer of `dtype`'s element size, copied into a new engine array.
Array fromBuffer(const py::buffer& b, const std::string& dtypeName) {
  DType dtype = dtypeFromName(dtypeName);
  py::buffer_info info = b.request();
  if (info.itemsize != dtypeSize(dtype))
    throw py::type_error(fmt::format("from_buffer: items of {} bytes cannot hold {}", info.itemsize, dtypeName));
  std::vector<int64_t> dims(info.shape.begin(), info.shape.end());
  int64_t expect = info.itemsize;
  for (int i = info.ndim - 1; i >= 0; --i) {
    if (info.shape[i] > 1 && info.strides[i] != expect) throw py::value_error("from_buffer: the buffer is not C-contiguous");
    expect *= info.shape[i];
  }
  return Array::fromBytes(Aval{Shape(dims), dtype}, info.ptr);
}

// A Python int as a value of the integer dtype t, as JAX's weakly typed ints (x64 off): it must fit int32 (int64
// beside an int64 array, JAX's x64 mode), else OverflowError (2**40 with an int32 array), and is then wrapped
// into t (300 with a uint8 array is 44; -1 is 255).
int64_t pythonIntIn(py::handle value, DType t) {
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  const bool wide = t == DType::I64;
  if (overflow != 0 || (!wide && (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()))) {
    const std::string text = py::str(value);
    PyErr_Format(PyExc_OverflowError, "Python int %s too large to convert to %s", text.c_str(),
                 wide ? "int64" : "int32");
    throw py::error_already_set();
  }
  switch (t) {
    case DType::U8: return static_cast<uint8_t>(v);
    case DType::U32: return static_cast<uint32_t>(v);
    default: return v;
  }
}

Array scalarFor(py::handle value, const Array* like) {
  if (py::isinstance<py::bool_>(value)) {
    bool v = value.cast<bool>();
    return like ? scalarLike(*like, v) : Array::scalar(v, DType::Bool);
  }
  if (py::isinstance<py::int_>(value)) {
    const DType t = like && like->dtype() != DType::Bool ? like->dtype() : DType::I32;
    if (isFloating(t)) return scalarLike(*like, PyLong_AsDouble(value.ptr()));
    const double v = static_cast<double>(pythonIntIn(value, t));
    return like && like->dtype() != DType::Bool ? scalarLike(*like, v) : Array::scalar(v, DType::I32);
  }
  double v = value.cast<double>();
  return like && isFloating(like->dtype()) ? scalarLike(*like, v) : Array::scalar(v, DType::F32);
}

// Binary ops take any operands: the Array among them types the scalars.
template <Array (*Op)(const Array&, const Array&, std::source_location)>
Array binary(py::handle a, py::handle b) {
  UserSite site;
  const auto loc = std::source_location::current();
  if (const Array* x = heldArray(a)) {
    if (const Array* y = heldArray(b)) return Op(*x, *y, loc);
    return Op(*x, toArray(b, x), loc);
  }
  Array y = toArray(b);
  return Op(toArray(a, &y), y, loc);
}

// + and * as jax.numpy's add and multiply: on two bool arrays they are logical or and logical and (a bool
// result), which the engine's add and mul, arithmetic only, refuse.
Array addOrLogicalOr(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return bitwiseOr(a, b, loc);
  return add(a, b, loc);
}

Array mulOrLogicalAnd(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return bitwiseAnd(a, b, loc);
  return mul(a, b, loc);
}

// maximum and minimum of two bool arrays: logical or and logical and, as jax.numpy's (the engine's max and min
// take numbers only).
Array maxOrLogicalOr(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return bitwiseOr(a, b, loc);
  return maximum(a, b, loc);
}

Array minOrLogicalAnd(const Array& a, const Array& b, std::source_location loc) {
  if (a.dtype() == DType::Bool && b.dtype() == DType::Bool) return bitwiseAnd(a, b, loc);
  return minimum(a, b, loc);
}

// abs and sign as jax.numpy's: abs returns unsigned and bool arrays as they are, sign of an unsigned array is
// 0 or 1 (the engine's abs and sign take signed numbers only).
Array absOfAny(const Array& x, std::source_location loc) {
  if (x.valid() && (isUnsigned(x.dtype()) || x.dtype() == DType::Bool)) return x;
  return abs(x, loc);
}

Array signOfAny(const Array& x, std::source_location loc) {
  if (x.valid() && isUnsigned(x.dtype())) return astype(notEqual(x, scalarLike(x, 0.0, loc), loc), x.dtype(), loc);
  return sign(x, loc);
}

// Shifts as jax.numpy's: >> is logical on unsigned types (arithmetic on signed ones); bools shift as int32.
Array boolsAsI32(const Array& x, const Array& other, std::source_location loc) {
  return x.dtype() == DType::Bool && other.dtype() == DType::Bool ? astype(x, DType::I32, loc) : x;
}

Array shiftLeftOfAny(const Array& a, const Array& b, std::source_location loc) {
  return shiftLeft(boolsAsI32(a, b, loc), boolsAsI32(b, a, loc), loc);
}

Array shiftRightOfAny(const Array& a, const Array& b, std::source_location loc) {
  if (isUnsigned(promoteTypes(a.dtype(), b.dtype()))) return shiftRightLogical(a, b, loc);
  return shiftRightArithmetic(boolsAsI32(a, b, loc), boolsAsI32(b, a, loc), loc);
}

// A new reference to a Python Array holding `a`, made as pybind11 makes it, without its type lookup.
PyObject* toPython(Array&& a) {
  return py::detail::type_caster_generic::cast(
             &a, py::return_value_policy::move, py::handle(), gArrayInfo, nullptr,
             [](const void* p) -> void* { return new Array(std::move(*const_cast<Array*>(static_cast<const Array*>(p)))); })
      .ptr();
}

// The binary ops of tessera.numpy (tnp.add(x, y), ...) as METH_FASTCALL functions: pybind11's dispatcher
// allocates its argument vectors and tries overloads on every call, a large part of an eager op on a few
// elements. Errors become Python exceptions as the dispatcher makes them (the translators registered below).
template <Array (*Op)(const Array&, const Array&, std::source_location)>
PyObject* fastBinary(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_Format(PyExc_TypeError, "takes 2 arguments (x, y), got %zd", nargs);
    return nullptr;
  }
  try {
    return toPython(binary<Op>(args[0], args[1]));
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    if (!py::detail::apply_exception_translators(py::detail::get_local_internals().registered_exception_translators) &&
        !py::detail::apply_exception_translators(py::detail::get_internals().registered_exception_translators))
      PyErr_SetString(PyExc_SystemError, "an exception escaped the exception translators");
  }
  return nullptr;
}

// Adds a METH_FASTCALL function to the module.
void defFast(py::module_& m, const char* name, PyObject* (*fn)(PyObject*, PyObject* const*, Py_ssize_t)) {
  static std::deque<PyMethodDef> defs;  // PyMethodDefs must outlive their functions
  defs.push_back(PyMethodDef{name, reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fn)), METH_FASTCALL,
                             nullptr});
  py::object f = py::reinterpret_steal<py::object>(PyCFunction_NewEx(&defs.back(), nullptr, m.attr("__name__").ptr()));
  if (!f) throw py::error_already_set();
  m.attr(name) = f;
}

template <Array (*Op)(const Array&, std::source_location)>
Array unary(py::handle x) {
  UserSite site;
  return Op(toArray(x), std::source_location::current());
}

// The operand order flipped, for the reflected operators (2 - x).
template <Array (*Op)(const Array&, const Array&, std::source_location)>
Array reflected(py::handle a, py::handle b) { return binary<Op>(b, a); }

template <Array (*Op)(const Array&, Axes, bool, std::source_location)>
Array reduction(py::handle x, const Axes& axes, bool keepDims) {
  UserSite site;
  return Op(toArray(x), axes, keepDims, std::source_location::current());
}

void defineArray(py::module_& m) {
  py::class_<Array> array(m, "Array");
  array
      .def_property_readonly("shape", &shapeTuple)
      .def_property_readonly("_dtype_name", [](const Array& a) { return std::string(dtypeName(a.dtype())); })
      .def_property_readonly("ndim", &Array::rank)
      .def_property_readonly("size", &Array::numel)
      .def_property_readonly("is_tracer", &Array::isTracer)
      // jax.Array.is_deleted: donated to a jitted function, its buffer taken by the call's outputs.
      .def("is_deleted", [](const Array& a) { return a.isDeleted(); })
      .def("_host_view", &hostView)
      .def("item", [](const Array& a) -> py::object {
        UserSite site;
        double v = a.item();
        if (a.dtype() == DType::Bool) return py::bool_(v != 0);
        if (!isFloating(a.dtype())) return py::int_(static_cast<int64_t>(v));
        return py::float_(v);
      })
      .def("__len__", [](const Array& a) {
        if (a.rank() == 0) throw py::type_error("len() of a 0-d array");
        return a.shape()[0];
      })
      .def("__repr__", [](const Array& a) {
        if (a.isTracer()) return fmt::format("Traced<{}>", a.aval().toString());
        return "Array(" + a.toString() + ")";
      })
      .def("__add__", &binary<addOrLogicalOr>).def("__radd__", &reflected<addOrLogicalOr>)
      .def("__sub__", &binary<sub>).def("__rsub__", &reflected<sub>)
      .def("__mul__", &binary<mulOrLogicalAnd>).def("__rmul__", &reflected<mulOrLogicalAnd>)
      .def("__truediv__", &binary<div>).def("__rtruediv__", &reflected<div>)
      .def("__pow__", &binary<pow>).def("__rpow__", &reflected<pow>)
      .def("__matmul__", &binary<matmul>).def("__rmatmul__", &reflected<matmul>)
      .def("__and__", &binary<bitwiseAnd>).def("__or__", &binary<bitwiseOr>).def("__xor__", &binary<bitwiseXor>)
      .def("__lt__", &binary<less>).def("__le__", &binary<lessEqual>)
      .def("__gt__", &binary<greater>).def("__ge__", &binary<greaterEqual>)
      .def("__eq__", &binary<equal>).def("__ne__", &binary<notEqual>)
      // % and // are numpy's (the divisor's sign), written in tessera/_np_elementwise.py over rem.
      .def("__neg__", &unary<neg>).def("__abs__", &unary<absOfAny>).def("__invert__", &unary<logicalNot>)
      .def("__pos__", [](const Array& a) { return a; });
  gArrayType = reinterpret_cast<PyTypeObject*>(array.ptr());
  gArrayInfo = py::detail::get_type_info(typeid(Array));
  registerDlpack(m, array);
}

// Padding as JAX takes it: "SAME", "VALID" or a sequence of (low, high) pairs.
ConvPadding toPadding(const py::object& padding) {
  if (py::isinstance<py::str>(padding)) return ConvPadding(padding.cast<std::string>());
  return ConvPadding(padding.cast<std::vector<std::pair<int64_t, int64_t>>>());
}

void defineOps(py::module_& m) {
  m.def("from_buffer", &fromBuffer, py::arg("buffer"), py::arg("dtype"));
  m.def("full", [](const std::vector<int64_t>& shape, double value, const std::string& dtype) {
    UserSite site;
    return Array::full(toShape(shape), value, dtypeFromName(dtype));
  });
  // The engine's promotion of two dtypes (by engine name), for tnp.promote_types and tnp.result_type.
  m.def("promote_types", [](const std::string& a, const std::string& b) {
    return std::string(dtypeName(promoteTypes(dtypeFromName(a), dtypeFromName(b))));
  });
  m.def("scalar", [](py::handle value, const std::optional<Array>& like) { return scalarFor(value, like ? &*like : nullptr); },
        py::arg("value"), py::arg("like") = py::none());

#define TSR_UNARY(pyName, fn) m.def(pyName, &unary<fn>)
  TSR_UNARY("neg", neg); TSR_UNARY("abs", absOfAny); TSR_UNARY("sign", signOfAny); TSR_UNARY("exp", exp);
  TSR_UNARY("exp2", exp2); TSR_UNARY("log", log); TSR_UNARY("log1p", log1p); TSR_UNARY("expm1", expm1);
  TSR_UNARY("sqrt", sqrt); TSR_UNARY("rsqrt", rsqrt); TSR_UNARY("tanh", tanh); TSR_UNARY("sigmoid", sigmoid);
  TSR_UNARY("sin", sin); TSR_UNARY("cos", cos); TSR_UNARY("tan", tan); TSR_UNARY("erf", erf);
  TSR_UNARY("erf_inv", erfInv); TSR_UNARY("floor", floor); TSR_UNARY("ceil", ceil); TSR_UNARY("round", round);
  TSR_UNARY("isfinite", isFinite); TSR_UNARY("logical_not", logicalNot); TSR_UNARY("relu", relu);
  TSR_UNARY("square", square); TSR_UNARY("lgamma", lgamma); TSR_UNARY("digamma", digamma);
  TSR_UNARY("stop_gradient", stopGradient);
#undef TSR_UNARY
  m.def("integer_pow", [](py::handle x, int64_t exponent) { UserSite site; return integerPow(toArray(x), exponent); });
  m.def("gelu", [](py::handle x, bool approximate) { UserSite site; return gelu(toArray(x), approximate); });

#define TSR_BINARY(pyName, fn) defFast(m, pyName, &fastBinary<fn>)
  TSR_BINARY("add", addOrLogicalOr); TSR_BINARY("subtract", sub); TSR_BINARY("multiply", mulOrLogicalAnd); TSR_BINARY("divide", div);
  TSR_BINARY("rem", rem); TSR_BINARY("power", pow); TSR_BINARY("maximum", maxOrLogicalOr);
  TSR_BINARY("minimum", minOrLogicalAnd); TSR_BINARY("arctan2", atan2); TSR_BINARY("bitwise_and", bitwiseAnd);
  TSR_BINARY("bitwise_or", bitwiseOr); TSR_BINARY("bitwise_xor", bitwiseXor); TSR_BINARY("equal", equal);
  TSR_BINARY("not_equal", notEqual); TSR_BINARY("less", less); TSR_BINARY("less_equal", lessEqual);
  TSR_BINARY("greater", greater); TSR_BINARY("greater_equal", greaterEqual); TSR_BINARY("matmul", matmul);
  TSR_BINARY("left_shift", shiftLeftOfAny); TSR_BINARY("right_shift", shiftRightOfAny);
#undef TSR_BINARY
  m.def("where", [](py::handle c, py::handle a, py::handle b) {
    UserSite site;
    bool aArray = py::isinstance<Array>(a), bArray = py::isinstance<Array>(b);
    Array x = aArray ? a.cast<Array>() : Array(), y = bArray ? b.cast<Array>() : Array();
    if (!aArray) x = toArray(a, bArray ? &y : nullptr);
    if (!bArray) y = toArray(b, &x);
    return where(toArray(c), x, y);
  });
  m.def("clip", [](py::handle x, py::handle lo, py::handle hi) {
    UserSite site;
    Array a = toArray(x);
    return clamp(a, toArray(lo, &a), toArray(hi, &a));
  });

  m.def("sum", &reduction<sum>); m.def("mean", &reduction<mean>); m.def("max", &reduction<max>);
  m.def("min", &reduction<min>); m.def("prod", &reduction<prod>);
  m.def("all", &reduction<all>); m.def("any", &reduction<any>);
#define TSR_CUMULATIVE(pyName, fn)                                        \
  m.def(pyName, [](py::handle x, int64_t axis, bool reverse) {            \
    UserSite site;                                                        \
    return fn(toArray(x), axis, reverse);                                 \
  })
  TSR_CUMULATIVE("cumsum", cumsum); TSR_CUMULATIVE("cumprod", cumprod); TSR_CUMULATIVE("cummax", cummax);
  TSR_CUMULATIVE("cumlogsumexp", cumlogsumexp);
#undef TSR_CUMULATIVE
  m.def("sort", [](const std::vector<Array>& operands, int64_t dimension, bool isStable, int64_t numKeys) {
    UserSite site;
    return sort(operands, dimension, isStable, numKeys);
  });
  m.def("argsort", [](py::handle x, int64_t axis) { UserSite site; return argsort(toArray(x), axis); });
  m.def("top_k", [](py::handle x, int64_t k) {
    UserSite site;
    auto [values, indices] = topK(toArray(x), k);
    return py::make_tuple(values, indices);
  });
  // Linear algebra (jax.lax.linalg's primitives; tessera.lax.linalg and tessera.numpy.linalg build on them).
  m.def("cholesky", [](py::handle a, bool symmetrizeInput) { UserSite site; return cholesky(toArray(a), symmetrizeInput); });
  m.def("triangular_solve", [](py::handle a, py::handle b, bool leftSide, bool lower, bool transposeA, bool unitDiagonal) {
    UserSite site;
    return triangularSolve(toArray(a), toArray(b), leftSide, lower, transposeA, unitDiagonal);
  });
  m.def("lu", [](py::handle a) {
    UserSite site;
    auto r = lu(toArray(a));
    return py::make_tuple(r[0], r[1], r[2]);
  });
  m.def("eigh", [](py::handle a, bool symmetrizeInput) {
    UserSite site;
    auto r = eigh(toArray(a), symmetrizeInput);
    return py::make_tuple(r[0], r[1]);
  });
  m.def("svd", [](py::handle a, bool fullMatrices, bool computeUv) -> py::object {
    UserSite site;
    auto r = svd(toArray(a), fullMatrices, computeUv);
    if (!computeUv) return py::cast(r[0]);
    return py::make_tuple(r[0], r[1], r[2]);
  });
  m.def("qr", [](py::handle a, bool fullMatrices) {
    UserSite site;
    auto r = qr(toArray(a), fullMatrices);
    return py::make_tuple(r[0], r[1]);
  });
  m.def("argmax", [](py::handle x, int64_t axis) { UserSite site; return argmax(toArray(x), axis); });
  m.def("argmin", [](py::handle x, int64_t axis) { UserSite site; return argmin(toArray(x), axis); });
  m.def("logsumexp", [](py::handle x, const Axes& axes, bool keepDims) { UserSite site; return logsumexp(toArray(x), axes, keepDims); });
  m.def("softmax", [](py::handle x, int64_t axis) { UserSite site; return softmax(toArray(x), axis); });
  m.def("log_softmax", [](py::handle x, int64_t axis) { UserSite site; return logSoftmax(toArray(x), axis); });
  m.def("softmax_cross_entropy_with_integer_labels", [](py::handle logits, py::handle labels) {
    UserSite site;
    return softmaxCrossEntropyWithIntegerLabels(toArray(logits), toArray(labels));
  });
  m.def("dot_product_attention", [](py::handle q, py::handle k, py::handle v, bool causal) {
    UserSite site;
    return dotProductAttention(toArray(q), toArray(k), toArray(v), causal);
  });
  // The kernels OpenBLAS should run where it fell back to its generic ones on a CPU it does not know ("" otherwise).
  m.def("blas_core_fallback", &cpu::blasCoreFallback);
  // What implementation=None picks (TESSERA_FUSED_ATTENTION; auto: the CPU, the GPU with bf16 matmuls).
  m.def("fused_attention_default",
        [] { return nn::fusedAttentionFor(envOptions().device, envOptions().matmulPrecision); });
  // batch_norm_training (x, scale, offset) -> [y, mean, var] over every dim but `axis`; its vjp is batch_norm_grad.
  m.def("batch_norm_training", [](py::handle x, py::handle scale, py::handle offset, double epsilon, int64_t axis) {
    UserSite site;
    return nn::batchNormTrainingOp(toArray(x), toArray(scale), toArray(offset), epsilon, axis);
  });
  // Whether BatchNorm trains through it by default (TESSERA_FUSED_BATCH_NORM=on).
  m.def("fused_batch_norm_default", [] { return nn::fusedBatchNorm(); });
  // What the nn layers call under autocast: a product's operand in the compute dtype, a norm's input widened.
  m.def("autocast_operand", [](py::handle x) { UserSite site; return autocastOperand(toArray(x)); });
  m.def("autocast_widen", [](py::handle x) { UserSite site; return autocastWiden(toArray(x)); });
  // The dtype of the innermost region on this thread ("bf16"), or None: jit keys its cache on it.
  m.def("autocast_dtype", []() -> std::optional<std::string> {
    const std::optional<DType> d = autocastDType();
    if (!d) return std::nullopt;
    return std::string(dtypeName(*d));
  });
  // tessera.autocast's region (engine/transform/autocast.h): entered and left by the with statement, on the
  // thread that traces. None switches autocast off inside an outer region.
  struct PyAutocast {
    PyAutocast() = default;
    PyAutocast(const PyAutocast&) = delete;  // (vector's copy trait would let pybind11 try)
    PyAutocast(PyAutocast&&) = default;
    std::optional<DType> dtype;
    std::vector<std::unique_ptr<AutocastScope>> entered;
  };
  py::class_<PyAutocast>(m, "Autocast")
      .def(py::init([](std::optional<std::string> name) {
             PyAutocast a;
             if (name) {
               a.dtype = dtypeFromName(*name);
               if (*a.dtype != DType::BF16)
                 throw py::type_error(fmt::format("autocast computes in bf16, not {}", *name));
             }
             return std::make_unique<PyAutocast>(std::move(a));
           }),
           py::arg("dtype"))
      .def("__enter__", [](PyAutocast& a) -> PyAutocast& {
             a.entered.push_back(std::make_unique<AutocastScope>(a.dtype));
             return a;
           }, py::return_value_policy::reference)
      .def("__exit__", [](PyAutocast& a, const py::args&) {
        if (!a.entered.empty()) a.entered.pop_back();
        return false;
      });

  m.def("astype", [](py::handle x, const std::string& dtype) { UserSite site; return astype(toArray(x), dtypeFromName(dtype)); });
  m.def("bitcast", [](py::handle x, const std::string& dtype) { UserSite site; return bitcast(toArray(x), dtypeFromName(dtype)); });
  m.def("reshape", [](py::handle x, const std::vector<int64_t>& shape) { UserSite site; return reshape(toArray(x), shape); });
  m.def("transpose", [](py::handle x, const Axes& perm) { UserSite site; return transpose(toArray(x), perm); });
  m.def("broadcast_to", [](py::handle x, const std::vector<int64_t>& shape) {
    UserSite site;
    return broadcastTo(toArray(x), toShape(shape));
  });
  m.def("expand_dims", [](py::handle x, int64_t axis) { UserSite site; return expandDims(toArray(x), axis); });
  m.def("squeeze", [](py::handle x, const Axes& axes) { UserSite site; return squeeze(toArray(x), axes); });
  m.def("slice", [](py::handle x, const Axes& starts, const Axes& limits, const Axes& strides) {
    UserSite site;
    return slice(toArray(x), starts, limits, strides);
  });
  m.def("flip", [](py::handle x, const Axes& axes) { UserSite site; return flip(toArray(x), axes); });
  m.def("concatenate", [](const py::sequence& xs, int64_t axis) { UserSite site; return concatenate(toArrays(xs), axis); });
  m.def("stack", [](const py::sequence& xs, int64_t axis) { UserSite site; return stack(toArrays(xs), axis); });
  m.def("pad", [](py::handle x, const Axes& low, const Axes& high, double value, const Axes& interior) {
    UserSite site;
    return pad(toArray(x), low, high, value, interior);
  });
  m.def("scatter_add", [](py::handle x, py::handle indices, py::handle updates, int64_t axis, int64_t batchDims) {
    UserSite site;
    Array a = toArray(x);
    return scatterAdd(a, toArray(indices), toArray(updates, &a), axis, batchDims);
  }, py::arg("x"), py::arg("indices"), py::arg("updates"), py::arg("axis"), py::arg("batch_dims") = 0);
  // lax.scatter and its combining variants: updates take x's dtype, as scatter_add's do.
  using ScatterFn = Array (*)(const Array&, const Array&, const Array&, int64_t, int64_t, std::source_location);
  for (auto [name, fn] : {std::pair<const char*, ScatterFn>{"scatter", &scatter}, {"scatter_mul", &scatterMul},
                          {"scatter_min", &scatterMin}, {"scatter_max", &scatterMax}}) {
    m.def(name, [fn](py::handle x, py::handle indices, py::handle updates, int64_t axis, int64_t batchDims) {
      UserSite site;
      Array a = toArray(x);
      return fn(a, toArray(indices), toArray(updates, &a), axis, batchDims, std::source_location::current());
    }, py::arg("x"), py::arg("indices"), py::arg("updates"), py::arg("axis"), py::arg("batch_dims") = 0);
  }
  m.def("iota", [](const std::vector<int64_t>& shape, int64_t dim, const std::string& dtype) {
    UserSite site;
    return iota(toShape(shape), dim, dtypeFromName(dtype));
  });
  m.def("take", [](py::handle x, py::handle indices, int64_t axis) { UserSite site; return take(toArray(x), toArray(indices), axis); });
  m.def("take_along_axis", [](py::handle x, py::handle indices, int64_t axis) {
    UserSite site;
    return takeAlongAxis(toArray(x), toArray(indices), axis);
  });
  m.def("one_hot", [](py::handle x, int64_t depth, const std::string& dtype) {
    UserSite site;
    return oneHot(toArray(x), depth, dtypeFromName(dtype));
  });
  m.def("einsum", [](const std::string& spec, py::handle a, py::handle b) {
    UserSite site;
    return einsum(spec, toArray(a), toArray(b));
  });
  // padding: "SAME", "VALID" or a list of (low, high) pairs; dimension numbers as three strings ("" for the
  // default NC.../OI.../NC...).
  m.def("conv_general_dilated", [](py::handle lhs, py::handle rhs, const Axes& strides, py::object padding,
                                   const Axes& lhsDilation, const Axes& rhsDilation, const std::string& lhsSpec,
                                   const std::string& rhsSpec, const std::string& outSpec, int64_t featureGroups,
                                   int64_t batchGroups) {
    UserSite site;
    Array l = toArray(lhs);
    return convGeneralDilated(l, toArray(rhs, &l), strides, toPadding(padding), lhsDilation, rhsDilation,
                              {lhsSpec, rhsSpec, outSpec}, featureGroups, batchGroups);
  });
  // computation: "add", "max" or "min" (tessera.lax maps lax.add & co. and checks the init value).
  m.def("reduce_window", [](py::handle x, const std::string& computation, const Axes& window, const Axes& strides,
                            py::object padding, const Axes& dilation) {
    UserSite site;
    static const std::map<std::string, WindowReduction> kinds{
        {"add", WindowReduction::Sum}, {"max", WindowReduction::Max}, {"min", WindowReduction::Min}};
    auto it = kinds.find(computation);
    if (it == kinds.end()) throw py::value_error("reduce_window: computation must be add, max or min, not " + computation);
    return reduceWindow(toArray(x), it->second, window, strides, toPadding(padding), dilation);
  });
  m.def("select_and_scatter_add", [](py::handle source, py::handle operand, const Axes& window, const Axes& strides,
                                     py::object padding) {
    UserSite site;
    Array x = toArray(operand);
    return selectAndScatterAdd(toArray(source, &x), x, window, strides, toPadding(padding));
  });
  m.def("max_pool", [](py::handle x, const Axes& window, const Axes& strides, py::object padding) {
    UserSite site;
    return maxPool(toArray(x), window, strides, toPadding(padding));
  });
  m.def("avg_pool", [](py::handle x, const Axes& window, const Axes& strides, py::object padding, bool countIncludePad) {
    UserSite site;
    return avgPool(toArray(x), window, strides, toPadding(padding), countIncludePad);
  });
}

}  // namespace

// What UserSite needs of a code object, worked out once per code object: its strings and whether it is ours
// or a library's. Code objects are held (a strong reference each), so an address is never reused for another;
// there are as many as the program has functions. Every op called from Python asks, so the walk up the stack
// must not convert strings or search paths each time (an eager tnp.add spent a third of its time there).
struct CodeInfo {
  std::string file, name;
  bool ours = false, library = false;
};

const CodeInfo& codeInfo(PyCodeObject* code) {
  static std::unordered_map<PyCodeObject*, CodeInfo> cache;  // under the GIL
  auto it = cache.find(code);
  if (it != cache.end()) return it->second;
  CodeInfo info;
  info.file = py::reinterpret_borrow<py::str>(code->co_filename);
  info.name = py::reinterpret_borrow<py::str>(code->co_name);
  info.ours = !gPackageDir.empty() && info.file.compare(0, gPackageDir.size(), gPackageDir) == 0;
  // Past the user's innermost run of functions: our package again, or a library's (pytest, the stdlib).
  info.library = info.file.find("/site-packages/") != std::string::npos ||
                 info.file.find("/dist-packages/") != std::string::npos || info.file.rfind("/usr/lib/python", 0) == 0;
  Py_INCREF(code);
  return cache.emplace(code, std::move(info)).first->second;
}

// The line a frame is at, by (code object, bytecode offset): the line table is decoded once per call site.
int lineOf(PyFrameObject* frame, PyCodeObject* code) {
  static std::unordered_map<PyCodeObject*, std::unordered_map<int, int>> lines;  // under the GIL
  const int lasti = PyFrame_GetLasti(frame);
  auto& byOffset = lines[code];
  auto it = byOffset.find(lasti);
  if (it != byOffset.end()) return it->second;
  const int line = PyFrame_GetLineNumber(frame);
  byOffset.emplace(lasti, line);
  return line;
}

// The user's site: the innermost frame outside the package gives file:line; outside a module's scope
// (tessera.nn), the user's functions on the stack, outermost first, give the module path
// ("loss.forward.block.attention"), as a module path groups the ops of a C++ model.
UserSite::UserSite() : m_modulePath(ModuleScope::currentPath()), m_scope(*this) {
  const bool namePath = m_modulePath.empty();
  PyFrameObject* frame = PyEval_GetFrame();  // borrowed
  if (frame) Py_INCREF(frame);
  while (frame) {
    PyCodeObject* code = PyFrame_GetCode(frame);
    const CodeInfo& info = codeInfo(code);
    if (m_code && (info.ours || info.library)) {
      Py_DECREF(code);
      Py_DECREF(frame);
      break;
    }
    if (!info.ours) {
      if (!m_code) {
        m_code = &info;
        m_line = lineOf(frame, code);
      }
      if (!namePath) {
        Py_DECREF(code);
        Py_DECREF(frame);
        break;
      }
      // <module>, <lambda>, <listcomp>: no name a user would look for.
      if (!info.name.empty() && info.name[0] != '<') addFunction(&info.name);
    }
    Py_DECREF(code);
    PyFrameObject* back = PyFrame_GetBack(frame);
    Py_DECREF(frame);
    frame = back;
  }
}

void UserSite::addFunction(const std::string* name) {
  if (m_numFunctions < kInlineFunctions) m_functions[m_numFunctions++] = name;
  else m_moreFunctions.push_back(name);
}

ir::Provenance UserSite::provenance() const {
  ir::Provenance p;
  p.modulePath = m_modulePath;
  if (m_code) {
    p.file = m_code->file;
    p.line = m_line;
  }
  for (auto it = m_moreFunctions.rbegin(); it != m_moreFunctions.rend(); ++it) p.modulePath = joinPath(p.modulePath, **it);
  for (size_t i = m_numFunctions; i-- > 0;) p.modulePath = joinPath(p.modulePath, *m_functions[i]);
  return p;
}

Array toArray(py::handle value, const Array* like) {
  if (const Array* a = heldArray(value)) return *a;
  if (py::isinstance<py::bool_>(value) || py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value))
    return scalarFor(value, like);
  if (!gAsarray) throw py::type_error("tessera.numpy is not imported");
  return gAsarray(value).cast<Array>();
}

std::vector<Array> toArrays(const py::sequence& values) {
  std::vector<Array> out;
  out.reserve(values.size());
  for (py::handle v : values) out.push_back(toArray(v));
  return out;
}

void CallbackErrors::rethrow() {
  if (!m_pending) return;
  std::unique_ptr<py::error_already_set> e = std::move(m_pending);
  e->restore();
  throw py::error_already_set();
}

void setPythonError(const Error& e) {
  if (!restoreCallbackError(e.message)) PyErr_SetString(exceptionTypeFor(e.message), e.message.c_str());
}

void raisePython(const Error& e) {
  setPythonError(e);
  throw py::error_already_set();
}

}  // namespace tsr::python

PYBIND11_MODULE(_tessera, m) {
  using namespace tsr::python;
  m.doc() = "The Tessera engine's Array API, transforms and random numbers (use the tessera package)";
  // The backends jit compiles with (cpu, and cuda where this build has it), as the CLI's main does.
  tsr::registerBackends();

  gTesseraError = newException("tessera.TesseraError", PyExc_Exception, nullptr);
  gShapeError = newException("tessera.ShapeError", gTesseraError, PyExc_ValueError);
  gDTypeError = newException("tessera.DTypeError", gTesseraError, PyExc_TypeError);
  gConcretizationError = newException("tessera.ConcretizationError", gTesseraError, PyExc_TypeError);
  gDeletedArrayError = newException("tessera.DeletedArrayError", gTesseraError, PyExc_RuntimeError);
  m.attr("TesseraError") = py::handle(gTesseraError);
  m.attr("ShapeError") = py::handle(gShapeError);
  m.attr("DTypeError") = py::handle(gDTypeError);
  m.attr("ConcretizationError") = py::handle(gConcretizationError);
  m.attr("DeletedArrayError") = py::handle(gDeletedArrayError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const tsr::Exception& e) {
      setPythonError(e.error());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError, "out of memory: an allocation failed");
    }
  });

  m.def("_set_package", [](const std::string& dir, py::object asarray) {
    gPackageDir = dir;
    gAsarray = std::move(asarray);
  });
  // Drop the Python reference before the interpreter tears down.
  auto atexit = py::module_::import("atexit");
  atexit.attr("register")(py::cpp_function([] { gAsarray = py::object(); }));

  defineArray(m);
  defineOps(m);
  registerTransforms(m);
  registerCallbacks(m);
  registerShardMap(m);
  registerProfiler(m);
  registerExport(m);
}
