#pragma once
// Running a traced graph on concrete arrays.
#include <vector>

#include "engine/runtime/interpreter.h"
#include "engine/transform/trace.h"

namespace tsr {

// Evaluates a closed graph on concrete arguments with the CPU interpreter.
Result<std::vector<Array>> evalGraph(const ClosedGraph& cg, const std::vector<Array>& args,
                                     const runtime::InterpretOptions& options = {});

}  // namespace tsr
