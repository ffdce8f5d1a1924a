#pragma once
// Fusion: groups the nodes of a graph into kernels (after XLA's instruction fusion and Inductor's scheduler).
//   loop       elementwise ops over one iteration space, read through broadcasts/transposes/reshapes of their
//              inputs (views cost no memory traffic), several outputs where several values are needed outside;
//   reduction  reduce_sum/max/min over a contiguous range of axes, with the elementwise ops that compute its
//              operand (its prologue) and sibling reductions of the same space (mean and variance in one pass);
//   gemm       a dot_general with the elementwise ops that consume its result (bias, gelu: the epilogue);
//   conv       an f32 conv_general_dilated that oneDNN runs as its forward primitive, with the consumers that
//              its post-ops express, as a chain (bias, residual, per-channel scale, relu, gelu: conv_epilogue.h),
//              listed as the group's postOps;
//   opaque     one node run by its reference kernel (gather, scatter, scan, integer ops);
//   alias      a materialised reshape: the same bytes under another shape, no kernel;
//   constant   a constant, materialised once when the graph is compiled.
// The graph is not rewritten: the plan lists each kernel's nodes, so the IR stays the one the user traced and
// the IDE draws groups as clusters. Every decision is recorded with its reason.
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "engine/passes/conv_epilogue.h"
#include "engine/passes/pass.h"

namespace tsr::passes {

enum class GroupKind : uint8_t { Loop, Reduction, Gemm, Opaque, Alias, Constant, Conv };
const char* groupKindName(GroupKind k);

// How a fused kernel reads a value through a chain of views: element (i_0, ..., i_{r-1}) of the iteration
// space reads source[offset + sum_d i_d * strides[d]].
struct ViewMap {
  ir::ValueId source = ir::kNone;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

// Resolves value v, seen with shape `shape`, to a strided read of the first value up its chain of views
// (broadcast_in_dim, transpose, reshape) that is not itself a view; nullopt where a reshape meets a
// non-contiguous map. With views = false, v itself is the source. The chain also stops at `stopAt`, a view the
// plan materialises (its kernel reads that value rather than the views above it).
std::optional<ViewMap> resolveView(const ir::Graph& g, ir::ValueId v, bool views = true, ir::ValueId stopAt = ir::kNone);
// Whether a node is a view that kernels can read through.
bool isViewNode(const ir::Graph& g, const ir::Node& n);

struct FusionGroup {
  int id = 0;
  GroupKind kind = GroupKind::Opaque;
  std::vector<ir::NodeId> nodes;     // members in graph order (views read through are not members)
  std::vector<ir::ValueId> inputs;   // values the kernel reads (sources of views), in first-use order
  std::vector<ir::ValueId> outputs;  // member results read after the kernel, or graph outputs
  Shape shape;                       // iteration space: the loop's shape, the reduced operand's, the dot result's
  std::vector<int64_t> reduceAxes;   // reduction groups
  std::string name;                  // "fusion.12"; opaque kernels are named after their op
  std::string reason;                // why the group has the members it has
  // conv groups: the epilogue as oneDNN post-ops, in order; together they stand for every member but the
  // convolution (empty where it has no epilogue).
  std::vector<PostOp> postOps;
};

struct FusionPlan {
  std::vector<FusionGroup> groups;  // in execution order
  std::vector<int> groupOfNode;     // node -> index into groups; -1: a view every consumer reads through
  // For each node, the values its kernel reads for each operand: the view's source where it reads through.
  std::vector<std::vector<ir::ValueId>> effectiveOperands;

  int numKernels() const;  // groups that launch a kernel (not alias or constant)
  // One line per group: "fusion.3 loop f32[4,64,3072] 7 ops (mul, add, tanh, ...) in 2 out 1".
  std::string describe(const ir::Graph& g, const ir::OpRegistry& reg) const;
};

struct FusionOptions {
  bool fuse = true;          // false: one kernel per node (views still read through)
  bool gemmEpilogues = true;
  // An f32 convolution anchors a conv group that takes its oneDNN post-ops (the CPU backend); off: it runs a
  // kernel of its own and its consumers fuse as loops (the CUDA backend).
  bool convEpilogues = true;
  bool reductionPrologues = true;
};

// Plans the kernels of g. Decisions go to ctx's log when ctx is given.
Result<FusionPlan> planFusion(const ir::Graph& g, const ir::OpRegistry& reg, PassContext* ctx = nullptr,
                              const FusionOptions& options = {});

// Whether two nodes share a kernel and, if not, why: from the plan and the fusion decisions recorded while it was
// made (ctx's log), for the graph the fusion pass received. What "why not fused?" answers.
struct FusionVerdict {
  bool fused = false;
  FusionReason reason = FusionReason::None;
  std::string detail;  // the decision's message
  std::string hint;    // what would make them fusible, where the pass knows
};
FusionVerdict whyNotFused(const ir::Graph& g, const FusionPlan& plan, std::span<const Decision> decisions,
                          ir::NodeId a, ir::NodeId b);

// A value that one kernel writes to memory and another reads back: a boundary fusion did not remove. bytes: its
// traffic, written once and read once (twice its size). The costliest first; what whyNotFused says of the pair.
struct UnfusedBoundary {
  ir::NodeId producer = ir::kNone, consumer = ir::kNone;  // the nodes on either side
  ir::ValueId value = ir::kNone;
  int producerGroup = -1, consumerGroup = -1;             // indices into the plan's groups
  int64_t bytes = 0;
  FusionVerdict verdict;
};
// The `count` costliest boundaries between kernels (values from graph inputs and constants are not boundaries).
std::vector<UnfusedBoundary> costliestUnfusedBoundaries(const ir::Graph& g, const FusionPlan& plan,
                                                        std::span<const Decision> decisions, size_t count = 10);

// The pass: plans fusion and leaves the plan in the context (PassContext::fusionPlan) without changing the graph.
class Fusion : public Pass {
 public:
  explicit Fusion(FusionOptions options = {}) : m_options(options) {}
  std::string_view name() const override { return "fusion"; }
  Result<bool> run(ir::Graph& g, PassContext& ctx) override;

 private:
  FusionOptions m_options;
};

}  // namespace tsr::passes
