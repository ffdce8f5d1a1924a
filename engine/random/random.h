#pragma once
// Random numbers: splittable counter-based keys with Threefry-2x32, as in JAX.
#include "engine/transform/api.h"
