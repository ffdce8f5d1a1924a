#pragma once
// The reference CPU executor: runs a graph node by node with each op's CPU kernel, freeing every
// intermediate buffer after its last use. The compiler's fused executables are checked against it.
#include <span>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/runtime/buffer.h"

namespace tsr::runtime {

Result<std::vector<runtime::BufferPtr>> interpret(const ir::Graph& g, const ir::OpRegistry& reg,
                                                  std::span<const runtime::BufferPtr> inputs);

}  // namespace tsr::runtime
