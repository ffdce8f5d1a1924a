#pragma once
// The standard compile pipeline, by name, so the CLI, jit and the IDE run the same passes:
//   cleanup = fixpoint(simplify, constant_folding, cse, dce)   at most 8 rounds
// Fusion, buffer assignment and scheduling will follow the cleanup group.
#include "engine/passes/pass.h"

namespace tsr::passes {

PassManager standardPipeline(PipelineOptions options = {});

}  // namespace tsr::passes
