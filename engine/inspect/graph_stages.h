#pragma once
// The training step's graph at every stage of the compile pipeline: as traced, then after each pass that
// changed it. Each stage is immutable and carries its text form, the line of each node in that text, and
// the decisions the next pass recorded about its nodes (decision ids refer to the graph a pass received).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/passes/pass.h"

namespace tsr::inspect {

struct Stage {
  std::string name;  // "traced", "3 cse (cleanup, round 1)"
  std::shared_ptr<const ir::Graph> graph;
  std::string text;                 // ir::print of graph
  std::vector<int> nodeLines;       // node id -> 0-based line in text
  std::vector<passes::Decision> decisions;  // decisions about this stage's (top-level) nodes
  double seconds = 0;               // time of the pass that produced it
};

struct StagesOptions {
  const std::atomic<bool>* cancel = nullptr;  // checked between passes; a cancelled compile returns an error
  std::function<void(int done, int total)> progress;
};

// Runs the standard pipeline on a copy of `traced` with snapshots; stage 0 is the traced graph.
Result<std::vector<Stage>> compileStages(std::shared_ptr<const ir::Graph> traced, const StagesOptions& options = {});

// A stage of a graph given directly (tests, IR files).
Stage makeStage(std::string name, std::shared_ptr<const ir::Graph> graph);

// The 0-based line of each top-level node in a printed graph: the lines indented by exactly two spaces that
// are neither `return` nor the closing of a nested body.
std::vector<int> nodeLinesOf(const std::string& text, size_t numNodes);

}  // namespace tsr::inspect
