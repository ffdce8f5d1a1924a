#pragma once
// The training step's graph at every stage of the compile pipeline (passes::compilerPipeline): as traced,
// then after each pass that changed it, then the fusion stage: the same graph with its kernel plan. Each stage
// is immutable and carries its text form, the line of each node in that text, and the decisions the next pass
// recorded about its nodes (decision ids refer to the graph a pass received); the fusion stage carries the
// fusion pass's own decisions, since that pass leaves the graph as it found it.
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backends/cpu/executable.h"
#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pass.h"

namespace tsr::inspect {

// The fusion stage's kernels as the CPU backend compiles them (launch order, memory plan), for the inspector.
struct KernelTable {
  std::vector<cpu::KernelInfo> kernels;  // in launch order
  std::vector<int> kernelOfGroup;        // plan group -> index into kernels; -1: alias and constant groups, and
                                         // slices and concatenates left to row views (cpu/row_views.h)
  cpu::MemoryPlan memory;
  std::vector<cpu::ValueSlot> valueSlots;  // per value: where it lives (a row view: in whose rows)
  std::vector<std::string> native;       // per kernel: the C++ of its native form ("" where it has none)
  std::string error;                     // why the backend did not compile the graph; "" when it did
};

struct Stage {
  std::string name;  // "traced", "3 cse (cleanup, round 1)"
  std::shared_ptr<const ir::Graph> graph;
  std::string text;                 // ir::print of graph
  std::vector<int> nodeLines;       // node id -> 0-based line in text
  std::vector<passes::Decision> decisions;  // decisions about this stage's (top-level) nodes
  double seconds = 0;               // time of the pass that produced it
  // At the fusion stage: the kernel plan (node ids are this stage's graph) and the compiled kernel table.
  std::shared_ptr<const passes::FusionPlan> fusion;
  std::shared_ptr<const KernelTable> kernels;
  // At the last stage: the reports the pipeline's passes wrote (PassContext::addReport), e.g. a plugin's
  // op_stats.txt.
  std::vector<passes::PassContext::Report> reports;
};

struct StagesOptions {
  const std::atomic<bool>* cancel = nullptr;  // checked between passes; a cancelled compile returns an error
  std::function<void(int done, int total)> progress;
};

// Runs the compiler pipeline on a copy of `traced` with snapshots; stage 0 is the traced graph, the last the
// fusion stage.
Result<std::vector<Stage>> compileStages(std::shared_ptr<const ir::Graph> traced, const StagesOptions& options = {});

// The CPU backend's kernels and memory for a graph and its plan (errors land in KernelTable::error).
KernelTable compileKernelTable(const ir::Graph& g, const passes::FusionPlan& plan);

// A stage of a graph given directly (tests, IR files).
Stage makeStage(std::string name, std::shared_ptr<const ir::Graph> graph);

// Whether two stages hold the same graph (one object, or the same text: the same nodes under the same ids), so
// that what names one's nodes (a profile's kernel table, a selection) names the other's. The fusion stage has
// the graph of the stage before it, which the passes after the cleanup left as it was.
bool sameGraph(const Stage& a, const Stage& b);

}  // namespace tsr::inspect
