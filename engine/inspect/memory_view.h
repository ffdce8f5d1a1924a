#pragma once
// The Memory panel's data: the training step's live bytes over its kernels by kind, the peak and the buffers
// live there (engine/train/step_memory.h), for the compile's fusion stage, so that each buffer's node is a
// node of the graph the IDE shows.
#include "engine/core/result.h"
#include "engine/inspect/graph_stages.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/train/step_memory.h"

namespace tsr::inspect {

using train::MemoryBuffer;
using train::MemoryKind;
using train::StepMemory;
using train::kNumMemoryKinds;
using train::memoryKindName;

// The step at `fusionStage` (the last of compileStages: its graph and fusion plan) on one device, its inputs and
// outputs named by the project's step paths.
Result<StepMemory> stageMemory(const Stage& fusionStage, const ProjectSnapshot& project);

// The measured side beside it: the latest profile in the store at dbPath against `planned` (one sentence), or
// why there is none ("no profile yet ...").
std::string measuredMemoryText(const std::string& dbPath, const StepMemory& planned);

}  // namespace tsr::inspect
