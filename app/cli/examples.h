#pragma once
// Built-in example functions for `tessera ir --example NAME`.
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/transform/trace.h"

namespace tsr::cli {

std::vector<std::string> exampleNames();
// Traces the example's forward pass for the given batch size.
Result<ClosedGraph> traceExample(const std::string& name, int64_t batch);

}  // namespace tsr::cli
