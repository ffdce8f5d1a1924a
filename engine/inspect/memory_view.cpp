#include "engine/inspect/memory_view.h"

namespace tsr::inspect {

Result<StepMemory> stageMemory(const Stage& fusionStage, const ProjectSnapshot& project) {
  if (!fusionStage.graph || !fusionStage.fusion) return makeError("the compile has no fusion stage");
  return train::stepMemory(*fusionStage.graph, fusionStage.fusion.get(), project.inputPaths, project.outputPaths);
}

}  // namespace tsr::inspect
