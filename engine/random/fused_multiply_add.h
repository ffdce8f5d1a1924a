#pragma once
// a * b + c rounded once. jax.random's uniform scales its [0, 1) floats with floats * (max - min) + min, and
// XLA's CPU and GPU compilers contract that multiply and add into one FMA instruction, so JAX's numbers are
// the FMA's. There is no FMA op here, so this builds one from error-free transformations on the Array API
// (each op rounds once, as IEEE says), which gives the same bits eagerly, under jit and on every device.
#include "engine/transform/api.h"

namespace tsr::random {

// a, b, c: one float dtype (f32 or f64), broadcasting as mul and add do.
Array fusedMultiplyAdd(const Array& a, const Array& b, const Array& c, TSR_LOC);

}  // namespace tsr::random
