#include "engine/transform/autocast.h"

#include "engine/transform/api.h"

namespace tsr {

namespace {
thread_local std::optional<DType> t_compute;
}

AutocastScope::AutocastScope(std::optional<DType> compute) : m_outer(t_compute) { t_compute = compute; }
AutocastScope::~AutocastScope() { t_compute = m_outer; }

std::optional<DType> autocastDType() { return t_compute; }

Array autocastOperand(const Array& x, std::source_location loc) {
  if (!t_compute || !x.valid() || x.dtype() != DType::F32) return x;
  return astype(x, *t_compute, loc);
}

Array autocastWiden(const Array& x, std::source_location loc) {
  if (!t_compute || !x.valid() || (x.dtype() != DType::BF16 && x.dtype() != DType::F16)) return x;
  return astype(x, DType::F32, loc);
}

}  // namespace tsr
