#include "engine/passes/pipeline.h"

#include "engine/passes/constant_folding.h"
#include "engine/passes/cse.h"
#include "engine/passes/dce.h"
#include "engine/passes/fusion.h"
#include "engine/passes/inline_calls.h"
#include "engine/passes/pass_registry.h"
#include "engine/passes/recompute.h"
#include "engine/passes/simplify.h"

namespace tsr::passes {

namespace {

std::vector<std::unique_ptr<Pass>> cleanupGroup() {
  std::vector<std::unique_ptr<Pass>> cleanup;
  cleanup.push_back(std::make_unique<Simplify>());
  cleanup.push_back(std::make_unique<ConstantFolding>());
  cleanup.push_back(std::make_unique<CommonSubexpressionElimination>());
  cleanup.push_back(std::make_unique<DeadCodeElimination>());
  return cleanup;
}

// Inlining (first, so that every later pass, a plugin's too, sees a custom_vjp's primal ops and a remat's body,
// not an opaque call), the cleanup group to a fixed point, and the plugins' passes at their points.
void addCleanup(PassManager& pm) {
  pm.add<InlineCalls>();
  addRegisteredPasses(pm, PipelinePoint::Start);
  pm.addFixedPoint("cleanup", cleanupGroup(), 8);
  addRegisteredPasses(pm, PipelinePoint::AfterCleanup);
}

}  // namespace

PassManager cleanupPipeline(PipelineOptions options) {
  PassManager pm("cleanup", std::move(options));
  addCleanup(pm);
  return pm;
}

PassManager standardPipeline(PipelineOptions options) {
  PassManager pm("standard", std::move(options));
  addCleanup(pm);
  pm.add<Recompute>();  // after cse, which would merge its copies back
  return pm;
}

PassManager compilerPipeline(PipelineOptions options) {
  PassManager pm("compiler", std::move(options));
  addCleanup(pm);
  pm.add<Recompute>();
  pm.add<Fusion>();
  addRegisteredPasses(pm, PipelinePoint::End);
  return pm;
}

}  // namespace tsr::passes
