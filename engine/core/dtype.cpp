#include "engine/core/dtype.h"


namespace tsr {

std::string_view dtypeName(DType t) {
  switch (t) {
#define X(e, n, ty) \
  case DType::e: return n;
    TSR_DTYPE_LIST(X)
#undef X
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
#define X(e, n, ty) \
  if (name == n) return DType::e;
  TSR_DTYPE_LIST(X)
#undef X
  return std::nullopt;
}

int64_t dtypeSize(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::U32: return 4;
    case DType::Bool: return 1;
  }
  return 0;
}

bool isFloating(DType t) {
  return t == DType::F32 || t == DType::F64 || t == DType::BF16 || t == DType::F16;
}
bool isInteger(DType t) {
  return t == DType::I32 || t == DType::I64 || t == DType::U8 || t == DType::U32;
}
bool isNumeric(DType t) { return t != DType::Bool; }
bool isUnsigned(DType t) { return t == DType::U8 || t == DType::U32; }
bool isSigned(DType t) { return isFloating(t) || t == DType::I32 || t == DType::I64; }

}  // namespace tsr
