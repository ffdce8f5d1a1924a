#pragma once
// What the sharding panel shows of a step's plan (engine/train/sharding_plan.h), as plain data: one tensor's
// blocks on the device grid (jax.debug.visualize_array_sharding for any rank), what changed between two plans
// (collectives added and removed, bytes per device), where a conflict between two explicit shardings lies, and
// the project.toml edits that keep a layout (rules for [sharding], the [mesh] table).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/train/sharding_plan.h"

namespace tsr::inspect {

using train::ArgumentPath;
using train::placeArguments;
using train::PlannableStep;
using train::projectMesh;
using train::PlannedArgument;
using train::ShardPlanOptions;
using train::StepShardingPlan;

// The step of an open project as the planner reads it: a graph after the cleanup passes (the compile's last
// stage, whose node ids the graph panel shows there) with the snapshot's argument paths.
PlannableStep plannableStep(const ProjectSnapshot& project, std::shared_ptr<const ir::Graph> cleaned);
Result<StepShardingPlan> planSharding(const project::Project& project, const PlannableStep& step,
                                      const ShardPlanOptions& options);

// A mesh typed by the user: sizes "4, 2" (or "4x2"), axis names "data, model", and an optional device order
// "0 1 2 3 4 5 6 7" (default row-major 0..n-1). Errors say which field is wrong.
Result<sharding::Mesh> parseMesh(const std::string& shape, const std::string& axes, const std::string& devices);

// The palette: PartitionSpecs of rank 1 and 2 built from the mesh's axes (each axis alone on either dim, two
// axes on the two dims, all axes on one dim), "" (replicated) first.
std::vector<std::string> paletteSpecs(const sharding::Mesh& mesh);

// One tensor laid out on the mesh, drawn as a grid over two of its dims (the first two it splits, else its
// last two); blocks along other split dims are listed per cell.
struct TensorLayout {
  std::string name;  // "params.layers.0.weight" or "%12"
  Aval aval;
  std::string spec;  // "P(None, 'model')"
  int rowDim = -1, colDim = -1;  // the dims of the grid (-1: none, for a scalar or a vector's rows)
  int64_t rows = 1, cols = 1;    // blocks along them
  Shape blockShape;              // every block's shape
  int64_t blockBytes = 0;
  struct Cell {
    int64_t row = 0, col = 0;
    std::vector<int> devices;   // every device holding a block of this cell (ascending)
    std::vector<std::string> ranges;  // per block in the cell: "[0:196, 0:512] on 0,1"
  };
  std::vector<Cell> cells;  // row-major
  std::vector<int> otherSplitDims;  // split dims not on the grid
  int64_t replicas = 1;     // devices holding each block
};

// rowDim / colDim: the dims to lay out (-1: chosen as above); they must differ and lie within the rank.
Result<TensorLayout> tensorLayout(const sharding::Mesh& mesh, const sharding::TensorSharding& t, const Aval& aval,
                                  const std::string& name, int rowDim = -1, int colDim = -1);

// A device's colour on the grid, the same in every panel: hue spread over the mesh (0..359), by device id.
int deviceHue(int device, int numDevices);

// Two plans of the same step compared: collectives matched by op, axes, bytes, reason and place.
struct PlanDiff {
  std::vector<train::PlannedCollective> added, removed;
  int64_t paramBefore = 0, paramAfter = 0, optBefore = 0, optAfter = 0, batchBefore = 0, batchAfter = 0,
          arenaBefore = 0, arenaAfter = 0;
  double commBefore = 0, commAfter = 0;
  std::vector<size_t> changedArguments;  // indices of arguments whose sharding changed
};
PlanDiff diffPlans(const StepShardingPlan& before, const StepShardingPlan& after);

// Every value of the step (arguments first, then each op's results) with its sharding and where it came from.
struct PlannedValue {
  ir::ValueId value = ir::kNone;
  std::string op;      // "input 3", "dot_general"
  std::string aval;    // "f32[8192,1024]"
  std::string spec;    // "P('data', 'model')"
  std::string origin;  // "annotation: argument params.layers.0.weight", "propagated forward from ..."
};
std::vector<PlannedValue> planValues(const StepShardingPlan& plan);

// Why a value has its sharding, in words ("propagated forward from dot_general (node 4, layers.1 @ ...)").
std::string originText(const StepShardingPlan& plan, ir::ValueId v);

// A conflict between two explicit shardings of one op's operands: the op and both specs with their sources.
struct ShardingConflict {
  ir::NodeId node = ir::kNone;
  std::string op;
  std::string first, second;  // "operand 0 P('data', None) (argument inputs)"
  std::string message;
};
// The conflicts a plan would have with these argument shardings (what propagation refused), found by the
// ops' sharding rules over the arguments each op reads directly.
std::vector<ShardingConflict> findConflicts(const ir::Graph& g, const sharding::Mesh& mesh,
                                            const std::vector<train::PlannedArgument>& arguments);

// What the sharding panel publishes to the other panels: the plan on screen (null when there is none), its
// conflicts, and why there is no plan.
struct ShardingSnapshot {
  std::shared_ptr<const StepShardingPlan> plan;
  std::shared_ptr<const ir::Graph> stepGraph;  // the graph planned (whose node ids the conflicts name)
  std::vector<ShardingConflict> conflicts;
  std::string error;
};

// The [sharding] rule that names one parameter and its optimizer state and nothing else:
// "layers.0.weight" -> '(^|\.)layers\.0\.weight$'.
std::string ruleForParameter(const std::string& path);

// project.toml with [mesh] set to this mesh's shape and axes (the device order stays 0..n-1: project.toml has no
// key for it) and each (pattern, spec) rule set in [sharding] (rewritten in place when present, else added);
// comments and other lines are kept. The result is checked with the project parser.
Result<std::string> applySharding(const std::string& text, const std::string& file, const std::string& dir,
                                  const sharding::Mesh& mesh,
                                  const std::vector<std::pair<std::string, std::string>>& rules);

}  // namespace tsr::inspect
