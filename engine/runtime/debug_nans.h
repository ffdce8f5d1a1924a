#pragma once
// Debug NaNs (like jax_debug_nans): with TESSERA_DEBUG_NANS=1, eager ops check their results, and a jitted
// function whose outputs hold a NaN or Inf is re-run op by op to name the first op that produced one.
#include <optional>
#include <string>

#include "engine/core/shape.h"
#include "engine/runtime/buffer.h"

namespace tsr::runtime {

bool debugNansEnabled();
// Overrides the environment variable (tests, the IDE's settings).
void setDebugNans(bool on);

// "nan at element 3" / "inf at element 0" for the first non-finite element of a floating buffer; nullopt when
// every element is finite or the dtype is not floating.
std::optional<std::string> findNonFinite(const Buffer& buffer, const Aval& aval);

}  // namespace tsr::runtime
