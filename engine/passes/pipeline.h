#pragma once
// The compile pipelines, by name, so the CLI, jit and the IDE run the same passes:
//   standard = cleanup: fixpoint(simplify, constant_folding, cse, dce), at most 8 rounds, then recompute
//              (cheap elementwise values copied into the kernels that read them: recompute.h)
//   compiler = standard, then fusion (the kernel plan, left in the PassContext)
// Passes that plugins register (pass_registry.h) join both at their named points.
// Buffer assignment and scheduling follow in the backend (engine/backends/cpu/executable.h), which compiles
// the fused plan into kernel launches over planned memory.
#include "engine/passes/pass.h"

namespace tsr::passes {

PassManager standardPipeline(PipelineOptions options = {});
// The standard pipeline without its last pass, recompute: what the graph is before fusion's own rewriting.
PassManager cleanupPipeline(PipelineOptions options = {});
PassManager compilerPipeline(PipelineOptions options = {});

}  // namespace tsr::passes
