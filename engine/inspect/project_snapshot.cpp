#include "engine/inspect/project_snapshot.h"

#include <chrono>

#include <fmt/format.h>

#include "engine/train/run.h"

namespace tsr::inspect {

namespace {

void collectPaths(const TreeDef& def, const std::string& prefix, std::vector<std::string>& out) {
  switch (def.kind) {
    case TreeKind::Leaf:
      out.push_back(prefix);
      break;
    case TreeKind::List:
      for (size_t i = 0; i < def.children.size(); ++i) collectPaths(def.children[i], joinPath(prefix, std::to_string(i)), out);
      break;
    case TreeKind::Dict:
      for (size_t i = 0; i < def.children.size(); ++i) collectPaths(def.children[i], joinPath(prefix, def.keys[i]), out);
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<std::string> treePaths(const TreeDef& def) {
  std::vector<std::string> out;
  collectPaths(def, "", out);
  return out;
}

Result<ProjectSnapshot> openProject(const std::string& path) {
  ProjectSnapshot s;
  TSR_ASSIGN(s.project, project::loadProject(path));
  auto start = std::chrono::steady_clock::now();
  TSR_ASSIGN(ClosedGraph step, train::traceTrainingStep(s.project));
  s.traceSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.inputPaths = treePaths(step.inputTree);
  s.outputPaths = treePaths(step.outputTree);
  const auto& inputs = step.graph.inputs();
  const std::string prefix = "params.";
  for (size_t i = 0; i < s.inputPaths.size() && i < inputs.size(); ++i) {
    const std::string& p = s.inputPaths[i];
    if (p.rfind(prefix, 0) != 0) continue;
    const Aval& a = step.graph.aval(inputs[i]);
    s.params.push_back({p.substr(prefix.size()), a.shape, a.dtype, a.numel(), a.bytes()});
    s.numParams += a.numel();
    s.paramBytes += a.bytes();
  }
  s.traced = std::make_shared<const ir::Graph>(std::move(step.graph));
  return s;
}

}  // namespace tsr::inspect
