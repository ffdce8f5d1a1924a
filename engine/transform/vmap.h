#pragma once
// vmap: f written for one example is traced once on per-example avals; its graph is replayed with each op's
// batching rule. Nested vmap, vmap of jit and jit of vmap all follow from replaying in the current context.
#include <vector>

#include "engine/transform/autodiff.h"

namespace tsr {

// inAxes[i]: the batched axis of argument i, or -1 for an argument shared by all examples (empty: all 0).
// outAxes[j]: where the batch axis goes in output j (empty: all 0). Errors raise tsr::Exception.
ArrayFn vmap(ArrayFn f, std::vector<int> inAxes = {}, std::vector<int> outAxes = {});

}  // namespace tsr
