#pragma once
// A project's training step planned on its mesh from avals alone: no data is read, no weights are materialised
// and no devices are needed (propagation and partitioning work on the mesh). The arguments are placed as
// Trainer places them (the one PlacementPolicy, engine/train/placement.h: parameter-path rules, optimizer state
// following its parameter, the batch split over the mesh's first axis); the plan gives every value its
// sharding and why, the per-device program with its collectives, and the bytes each device holds. `tessera shard plan` prints it; the IDE's sharding panel shows
// it and re-plans it with the user's own specs.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"
#include "engine/project/project.h"
#include "engine/sharding/partitioner.h"
#include "engine/train/placement.h"

namespace tsr::train {

struct ShardPlanOptions {
  // Instead of the project's [mesh] (its shape, axis names and device order).
  std::optional<sharding::Mesh> mesh;
  // Instead of the project's [sharding] rules: (parameter-path regex, PartitionSpec), the first match wins.
  std::optional<std::vector<std::pair<std::string, std::string>>> rules;
  // Specs that win over every rule, by an argument's relative path (ArgumentPath::relative): a parameter path
  // ("layers.0.weight", its optimizer state follows), an optimizer-state path ("1.mu.layers.0.weight"), or
  // "inputs" / "targets" for the batch.
  std::map<std::string, std::string> overrides;
  // Sharding constraints on values of the step's graph (by value id), as withShardingConstraint in the model
  // would put them: the planned graph gets a sharding_constraint after each.
  std::map<ir::ValueId, std::string> constraints;
  double bandwidthGBs = 10.0;  // interconnect bandwidth per device, for the time estimates
  bool compile = true;         // compile the per-device program for its arena (activations' bytes)
};

// One argument of the step on the mesh.
struct PlannedArgument {
  ArgumentPath path;  // printed "params.layers.0.weight", "opt.0.mu.layers.0.weight", "inputs", "step"
  ir::ValueId value = ir::kNone;
  sharding::TensorSharding sharding;
  Shape local;         // the block each device holds
  int64_t bytes = 0;   // per device
  std::string source;  // why: "rule 'layers\.0\.weight'", "override", "the batch, over 'data'", "no rule"
};

struct PlannedCollective {
  sharding::CollectiveInfo info;
  double seconds = 0;  // at the options' bandwidth
  std::string where;   // the global op's source location, "" when unknown
};

struct StepShardingPlan {
  std::string name;  // the project's
  sharding::Mesh mesh;
  size_t numRules = 0;
  std::shared_ptr<const ir::Graph> global;  // the step after the cleanup passes: the plan's value ids
  // With constraints, `global` is the step with a sharding_constraint after each constrained value: the step's
  // graph, and for each of its values the value of `global` it became.
  std::shared_ptr<const ir::Graph> step;
  std::vector<ir::ValueId> fromStep;
  sharding::ShardingPlan plan;
  std::vector<PlannedArgument> arguments;   // one per input of `global`
  std::vector<PlannedCollective> collectives;
  double commSeconds = 0;
  double bandwidthGBs = 0;  // per device, that the collectives' seconds assume (PlanOptions::bandwidthGBs)
  // Per device.
  int64_t paramBytes = 0, optBytes = 0, batchBytes = 0;
  int64_t arenaBytes = 0;  // activations and other intermediates: the planned arena (0 without compile)
  std::shared_ptr<const ir::Graph> program;  // the per-device program after the compiler's pipeline
};

// The step's graph as the planner reads it: traced from avals, the cleanup passes run, with the argument paths.
struct PlannableStep {
  std::shared_ptr<const ir::Graph> graph;
  std::vector<ArgumentPath> paths;  // per graph input (Other{""} for captured constants)
  std::vector<std::string> outputPaths;  // per graph output: "params.layers.0.weight", "opt.0.mu...", "loss"
};
Result<PlannableStep> traceStepForPlan(const project::Project& project);

// The arguments' shardings alone (what the plan annotates), on the options' mesh or the project's.
struct PlacedArguments {
  sharding::Mesh mesh;
  size_t numRules = 0;
  std::vector<PlannedArgument> arguments;
};
Result<PlacedArguments> placeArguments(const project::Project& project, const PlannableStep& step,
                                       const ShardPlanOptions& options = {});

// The plan of an already traced step (the panel re-plans one trace many times), or of the project's.
Result<StepShardingPlan> planStepSharding(const project::Project& project, const PlannableStep& step,
                                          const ShardPlanOptions& options = {});
Result<StepShardingPlan> planStepSharding(const project::Project& project, const ShardPlanOptions& options = {});

// The project's mesh: [mesh] shape and axes over devices 0..n-1. Errors name the file.
Result<sharding::Mesh> projectMesh(const project::Project& project);

// Seconds a collective of `bytes` per device takes over its group at `bytesPerSecond`, by the ring algorithms'
// traffic: all_reduce sends 2(n-1)/n of its buffer, all_gather (n-1)/n of the whole, reduce_scatter and
// all_to_all (n-1)/n of their operand, a permute the buffer once.
double collectiveSeconds(const sharding::CollectiveInfo& c, const sharding::Mesh& mesh, double bytesPerSecond);

}  // namespace tsr::train
