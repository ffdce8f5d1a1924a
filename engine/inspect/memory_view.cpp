#include "engine/inspect/memory_view.h"

#include <filesystem>

namespace tsr::inspect {

Result<StepMemory> stageMemory(const Stage& fusionStage, const ProjectSnapshot& project) {
  if (!fusionStage.graph || !fusionStage.fusion) return makeError("the compile has no fusion stage");
  return train::stepMemory(*fusionStage.graph, fusionStage.fusion.get(), project.inputPaths, project.outputPaths);
}

std::string measuredMemoryText(const std::string& dbPath, const StepMemory& planned) {
  std::error_code ec;
  if (dbPath.empty() || !std::filesystem::exists(dbPath, ec))
    return "measured: no profile yet (Run › Profile records the step's allocations)";
  auto measured = train::latestMeasuredMemory(dbPath);
  if (!measured.ok()) return "measured: " + measured.error().message;
  return train::explainMeasured(planned, *measured);
}

}  // namespace tsr::inspect
