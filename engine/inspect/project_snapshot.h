#pragma once
// What the IDE shows of a project, read once and then immutable: the project settings, the parameters of the
// model (path, shape, dtype, bytes) and the training step traced from avals alone. Built off the UI thread.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/bytes.h"
#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/project/project.h"

namespace tsr::inspect {

struct ParamInfo {
  std::string path;  // "h.3.attn.c_attn.weight"
  Shape shape;
  DType dtype = DType::F32;
  int64_t numel = 0;
  int64_t bytes = 0;
};

struct ProjectSnapshot {
  project::Project project;
  std::vector<ParamInfo> params;  // in parameter order
  int64_t numParams = 0;
  int64_t paramBytes = 0;
  // The whole training step (forward, backward, optimizer update) as traced; inputs follow inputPaths.
  std::shared_ptr<const ir::Graph> traced;
  std::vector<std::string> inputPaths;  // "params.h.0.ln_1.weight", "opt.mu...", "inputs", "targets", "step"
  std::vector<std::string> outputPaths;  // "params.h.0.ln_1.weight", ..., "loss"
  double traceSeconds = 0;
};

// Loads the project (a folder holding project.toml, or the file) and traces its training step.
// Errors carry the file, the line and the key, as the engine's project parser gives them.
Result<ProjectSnapshot> openProject(const std::string& path);

// The leaf paths of a tree definition, in flatten order ("params.wte.weight").
std::vector<std::string> treePaths(const TreeDef& def);

// Byte counts for the views: the engine's one formatter ("12.0 MiB", "512 B").
using tsr::formatBytes;

}  // namespace tsr::inspect
