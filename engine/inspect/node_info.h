#pragma once
// Everything the inspector shows about one node of a stage: op, attributes, result avals, provenance,
// producers and consumers, cost from the op's rule, the decisions passes recorded about it, and at the fusion
// stage the kernel it runs in.
#include <optional>
#include <string>
#include <vector>

#include "engine/inspect/graph_stages.h"
#include "engine/sharding/propagation.h"

namespace tsr::train {
struct StepShardingPlan;
}

namespace tsr::inspect {

struct ValueRef {
  ir::ValueId value = ir::kNone;
  std::string name;       // printed name "%12"
  std::string aval;       // "f32[8,64]"
  ir::NodeId node = ir::kNone;  // producer (operands) or consumer (results); kNone for a graph input/output
  std::string nodeOp;     // its op, "input" or "output"
  // With a sharding plan: the value's sharding on the mesh ("P('data', None)") and why it has it.
  std::string sharding;
  std::string shardingOrigin;
};

// A value a kernel reads or writes, and where the CPU backend keeps it.
struct KernelArg {
  std::string name;   // "%12"
  std::string aval;
  std::string where;  // "graph input 3", "arena +1.5 MB", "own buffer (graph output)", "constant"
};

// The kernel a node runs in (its fusion group) at the fusion stage.
struct NodeKernel {
  std::string name;    // "fusion.12", or "gather.40" for a node run by its own kernel
  std::string kind;    // "loop", "reduction", "gemm", "opaque", "alias", "constant"
  std::string shape;   // iteration space "f32[8,64,512]"
  std::string reason;
  int members = 0;
  std::vector<ir::NodeId> nodes;
  int launch = -1;     // position in the CPU executable's launch order; -1: no launch (alias, constant, row view)
  std::string noLaunch;  // why an opaque op launches nothing: its copy is left to row views ("" otherwise)
  int launches = 0;    // kernels the executable launches
  double flops = 0, bytes = 0;
  int64_t arenaBytes = 0;  // the executable's whole arena
  std::vector<KernelArg> inputs, outputs;
  std::string native;  // the C++ the CPU backend compiles for it once it is hot ("" where it has none)
};

struct NodeInfo {
  ir::NodeId node = ir::kNone;
  std::string op;
  std::string family;
  std::string fusionKind;
  std::string attrs;      // "{lhs_contracting=[1], ...}" as printed; nested bodies shown as "{...}"
  std::vector<ValueRef> operands;   // with their producers
  std::vector<ValueRef> results;
  std::vector<ValueRef> consumers;  // nodes reading any result
  std::string modulePath;
  std::string file;
  int line = 0;
  double flops = 0;
  int64_t bytesRead = 0, bytesWritten = 0;
  std::vector<std::string> decisions;  // "cse: ... " with the reason
  std::optional<NodeKernel> kernel;    // at the fusion stage, for a node with a kernel
  bool readThrough = false;            // at the fusion stage: a view its consumers read through
  int textLine = 0;       // line of the node in the stage's text
};

// `sharding`, when given, is a plan of this stage's graph (stageSharding): operands and results then carry their
// sharding and its origin.
NodeInfo describeNode(const Stage& stage, ir::NodeId node, const sharding::ShardingPlan* sharding = nullptr);

// The step's sharding plan carried over to a stage: every pipeline stage keeps the step's arguments, so the
// plan's argument shardings annotate the stage's inputs and propagate through the stage's own ops (the planned
// graph itself is reused as is). An error when the stage's inputs are not the planned step's.
Result<sharding::ShardingPlan> stageSharding(const Stage& stage, const train::StepShardingPlan& plan);

// The attribute text of a printed node line: from " {" after the operand list to the matching "}"; a nested
// body is elided ("body={...}").
std::string attrsOfLine(std::string_view line);

// The cost of every node from its op's rule (zero for ops without one), by node id.
std::vector<ir::Cost> nodeCosts(const ir::Graph& g);

// Printed names of all values ("%N"), by value id, as the IR text numbers them.
std::vector<std::string> valueNames(const ir::Graph& g);

// The op name of a node.
std::string opName(const ir::Graph& g, ir::NodeId node);

// The node whose line in the text is `line` (or the last node above it); kNone when none.
ir::NodeId nodeAtLine(const Stage& stage, int line);

// Nodes whose op, result names ("%12"), result avals ("f32[8,64]") or module path match the ECMAScript regex;
// an invalid pattern is an error.
Result<std::vector<ir::NodeId>> searchNodes(const Stage& stage, const std::string& pattern);

// A node in one line, as a list of search matches shows it.
struct NodeSummary {
  ir::NodeId node = ir::kNone;
  std::string name;        // its first result, "%12"; its op for a node without results
  std::string op;          // "dot_general"
  std::string aval;        // its first result's, "f32[8,64,384]"; "" without results
  std::string modulePath;  // from its provenance, "h.0.attn"
};
std::vector<NodeSummary> summarizeNodes(const ir::Graph& g, const std::vector<ir::NodeId>& nodes);

// Fusion questions at any stage whose node ids are the fusion stage's (that stage, or one with its graph):
// the stage that holds the plan and the fusion pass's decisions, or null when `stage` is not one of them.
const Stage* fusionStageFor(const std::vector<Stage>& stages, const Stage& stage);
// Whether two nodes share a kernel and, if not, the fusion pass's reason and what would fuse them.
passes::FusionVerdict fusionVerdict(const Stage& fusionStage, ir::NodeId a, ir::NodeId b);
// The costliest boundaries between the fusion stage's kernels (passes::costliestUnfusedBoundaries).
std::vector<passes::UnfusedBoundary> unfusedBoundaries(const Stage& fusionStage, size_t count = 10);

}  // namespace tsr::inspect
