#pragma once
// The reference CPU executor: runs a graph node by node with each op's CPU kernel, freeing every
// intermediate buffer after its last use. The compiler's fused executables are checked against it.
#include <span>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/runtime/buffer.h"

namespace tsr::runtime {

struct InterpretOptions {
  // Fail at the first node whose results hold a NaN or Inf, naming the node (debug NaNs).
  bool checkNonFinite = false;
};

Result<std::vector<runtime::BufferPtr>> interpret(const ir::Graph& g, const ir::OpRegistry& reg,
                                                  std::span<const runtime::BufferPtr> inputs,
                                                  const InterpretOptions& options = {});

}  // namespace tsr::runtime
