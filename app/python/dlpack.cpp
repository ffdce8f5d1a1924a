// DLPack (the array interchange protocol of the Python array API): Array.__dlpack__ hands the array's host
// buffer to another library without a copy (numpy.from_dlpack, torch.from_dlpack), and tessera.numpy's
// from_dlpack takes one in. The struct layout is DLPack's own header (Debian's libdlpack-dev, DLPack 0.6).
#include <cstring>

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include "app/python/bindings.h"

namespace tsr::python {

namespace {

constexpr const char* kCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

std::optional<DLDataType> dlType(DType t) {
  switch (t) {
    case DType::F32: return DLDataType{kDLFloat, 32, 1};
    case DType::F64: return DLDataType{kDLFloat, 64, 1};
    case DType::F16: return DLDataType{kDLFloat, 16, 1};
    case DType::BF16: return DLDataType{kDLBfloat, 16, 1};
    case DType::I32: return DLDataType{kDLInt, 32, 1};
    case DType::I64: return DLDataType{kDLInt, 64, 1};
    case DType::U8: return DLDataType{kDLUInt, 8, 1};
    case DType::U32: return DLDataType{kDLUInt, 32, 1};
    case DType::Bool: return std::nullopt;  // DLPack 0.6 has no bool type
  }
  return std::nullopt;
}

std::optional<DType> fromDlType(DLDataType t) {
  if (t.lanes != 1) return std::nullopt;
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8, DType::U32}) {
    auto mine = dlType(d);
    if (mine && mine->code == t.code && mine->bits == t.bits) return d;
  }
  return std::nullopt;
}

// What a capsule owns: the array (which keeps its buffer alive), its shape, and the tensor that points into it.
struct Exported {
  Array array;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

py::capsule toDlpack(const Array& x, const py::object& stream) {
  if (!stream.is_none() && !(py::isinstance<py::int_>(stream) && stream.cast<int64_t>() == -1))
    throw py::value_error("__dlpack__: the array is in host memory, so stream must be None");
  if (!x.valid()) throw py::value_error("empty Array");
  UserSite site;
  Array a = x.isSharded() ? x.gathered() : x;
  if (!a.isConcrete() || !a.buffer()) {
    a.toFloats();  // raises the engine's own message for tracers and donated arrays
    throw py::value_error("the array has no host buffer");
  }
  auto type = dlType(a.dtype());
  if (!type) throw py::type_error(fmt::format("__dlpack__: DLPack 0.6 has no type for {}", dtypeName(a.dtype())));
  auto* e = new Exported{a, a.shape().dims(), {}};
  DLTensor& t = e->managed.dl_tensor;
  t.data = a.buffer()->data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(e->shape.size());
  t.dtype = *type;
  t.shape = e->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Exported*>(m->manager_ctx); };
  // A consumer renames the capsule to "used_dltensor" and calls the deleter itself when done; a capsule
  // nobody consumed frees the tensor when it goes.
  return py::capsule(&e->managed, kCapsule, [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, kCapsule)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsule));
      m->deleter(m);
    }
  });
}

// A copy of any host tensor (strided or not) as a new engine array; the producer's tensor is released at once.
Array fromDlpack(const py::object& x) {
  py::object capsule = py::hasattr(x, "__dlpack__") ? x.attr("__dlpack__")() : x;
  if (!PyCapsule_IsValid(capsule.ptr(), kCapsule))
    throw py::type_error("from_dlpack: expected an object with __dlpack__ or an unused DLPack capsule");
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsule));
  PyCapsule_SetName(capsule.ptr(), kUsedCapsule);
  std::unique_ptr<DLManagedTensor, void (*)(DLManagedTensor*)> owned(m, [](DLManagedTensor* t) {
    if (t->deleter) t->deleter(t);
  });
  const DLTensor& t = m->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw py::value_error(fmt::format("from_dlpack: the tensor is on device type {}; only host memory is read",
                                      static_cast<int>(t.device.device_type)));
  auto dtype = fromDlType(t.dtype);
  if (!dtype)
    throw py::type_error(fmt::format("from_dlpack: no engine type for DLPack type code {} of {} bits x {} lanes",
                                     t.dtype.code, t.dtype.bits, t.dtype.lanes));
  std::vector<int64_t> dims(t.shape, t.shape + t.ndim);
  const Aval aval{Shape(dims), *dtype};
  const int64_t elem = dtypeSize(*dtype), n = aval.shape.numel();
  const char* base = static_cast<const char*>(t.data) + t.byte_offset;
  bool compact = true;
  if (t.strides) {
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      compact &= dims[static_cast<size_t>(d)] == 1 || t.strides[d] == expect;
      expect *= dims[static_cast<size_t>(d)];
    }
  }
  if (compact || n == 0) return Array::fromBytes(aval, base);
  // Strided (a transposed or sliced view): gathered element by element in row-major order.
  std::vector<char> bytes(static_cast<size_t>(n * elem));
  std::vector<int64_t> index(dims.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t offset = 0;
    for (size_t d = 0; d < dims.size(); ++d) offset += index[d] * t.strides[d];
    std::memcpy(bytes.data() + i * elem, base + offset * elem, static_cast<size_t>(elem));
    for (size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d]) break;
      index[d] = 0;
    }
  }
  return Array::fromBytes(aval, bytes.data());
}

}  // namespace

void registerDlpack(py::module_& m, py::class_<Array>& array) {
  array.def("__dlpack__", &toDlpack, py::arg("stream") = py::none())
      .def("__dlpack_device__", [](const Array&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); });
  m.def("from_dlpack", &fromDlpack, py::arg("x"));
}

}  // namespace tsr::python
