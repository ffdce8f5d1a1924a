#pragma once
// The compiler pass contract (after XLA's HloPassInterface): a pass has a name and rewrites a graph in place,
// saying whether it changed anything. A PassManager runs a named, recorded pipeline of passes (after tinygrad):
// it times each pass, can keep a snapshot of the graph after each (the IDE's pass-by-pass view), verifies the
// graph between passes, and iterates groups of passes (simplify + cse + dce) to a fixed point.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"
#include "engine/ir/graph.h"

namespace tsr::passes {

struct FusionPlan;

// Tunables the passes read. Pipeline-level settings (verify, snapshots) live in PipelineOptions.
struct PassOptions {
  // Constant folding evaluates a node only when its result (and each constant operand it materialises) is at
  // most this many bytes; bigger results stay as computations.
  int64_t maxFoldBytes = 64 * 1024;
  // Passes also rewrite the nested graphs of control-flow ops (a scan's body, a cond's branches).
  bool rewriteRegions = true;
};

// Why a fusion decision went as it did (Decision::reason), as XLA's FusionDecision carries it: a code tools match
// on ("why not fused?", the inspector), beside the message for people.
enum class FusionReason : uint8_t {
  None,              // not a fusion decision
  Fused,             // joined a producer's kernel (a loop, a gemm or conv epilogue, a reduction's prologue or sibling)
  Merged,            // two kernels became one
  DifferentSpaces,   // the producer's kernel iterates over another shape
  AfterReduction,    // the producer is a reduction, complete only after its kernel
  OpaqueProducer,    // the producer runs a kernel of its own (gather, scan, a collective, ...)
  ReadsThroughView,  // the consumer reads the kernel's value through a view (a transpose, say)
  WouldCycle,        // an input of the fused kernel would depend on its output
  NoLoopLowering,    // an elementwise op without a loop lowering (OpDef::loop)
  UnsupportedDType,  // fused loops take f32 (and bool masks) only
  OwnKernel,         // not an elementwise op: it runs its own kernel
  Materialised,      // a view that a consumer cannot read through becomes a copy kernel
  FusionOff,         // fusion is switched off
  Unrelated,         // neither node reads the other's result (whyNotFused only)
  NoPostOp,          // a convolution's epilogue takes only what oneDNN post-ops express (conv_epilogue.h)
  Recomputed,        // a copy the recompute pass made, computed in the kernel that reads it (recompute.h)
};
const char* fusionReasonName(FusionReason r);  // "different_iteration_spaces"

// One decision a pass made, with its reason: "add(x, 0) -> x", "not fused: consumer is a dot". Node and value
// ids refer to the graph as the pass received it: the snapshot before `step` in the pipeline report.
// A fusion decision about a pair names the consumer first, then the producers it concerns.
struct Decision {
  enum class Kind : uint8_t { Applied, Rejected, Note };
  Kind kind = Kind::Applied;
  std::string pass;
  int step = -1;  // index of the pipeline step (PipelineReport::steps) that recorded it; -1 outside a pipeline
  std::vector<ir::NodeId> nodes;
  std::vector<ir::ValueId> values;  // raw ids (not the printer's %N numbers), for tools that hold the snapshot
  // Where the nodes live: empty for the graph itself; else the path of nodes (outermost first) whose nested
  // graph (a scan's body) holds them, e.g. {4} for the body of node 4.
  std::vector<ir::NodeId> region;
  ir::Provenance prov;
  std::string message;
  FusionReason reason = FusionReason::None;

  // "[3 simplify] node 12 @ layers.0 @ mlp.cpp:20: add(x, 0) -> x"; a nested node reads "node 4/12"
  std::string toString() const;
};
const char* decisionKindName(Decision::Kind k);

class DecisionLog {
 public:
  void add(Decision d) { m_decisions.push_back(std::move(d)); }
  const std::vector<Decision>& all() const { return m_decisions; }
  std::vector<Decision> forPass(std::string_view pass) const;
  void clear() { m_decisions.clear(); }
  size_t size() const { return m_decisions.size(); }
  // One decision per line, for decisions.txt and the CLI.
  std::string toText() const;

 private:
  std::vector<Decision> m_decisions;
};

// What a pass sees besides the graph: the op registry, the options and the decision log.
class PassContext {
 public:
  explicit PassContext(const ir::OpRegistry& reg, PassOptions options = {}) : m_reg(reg), m_options(options) {}

  const ir::OpRegistry& registry() const { return m_reg; }
  const PassOptions& options() const { return m_options; }
  PassOptions& mutableOptions() { return m_options; }
  DecisionLog& log() { return m_log; }
  const DecisionLog& log() const { return m_log; }

  // Records a decision about one node of graph g, stamped with the current pass and step.
  void record(const ir::Graph& g, ir::NodeId node, std::string message,
              Decision::Kind kind = Decision::Kind::Applied);
  // The same about nodes[0] and the nodes it concerns (a fusion decision: the consumer, then its producers).
  void record(const ir::Graph& g, std::vector<ir::NodeId> nodes, std::string message, Decision::Kind kind,
              FusionReason reason);
  void record(Decision d);

  // Set by the PassManager around each pass so that records carry the pass name and step.
  void enterPass(std::string_view name, int step) {
    m_pass = std::string(name);
    m_step = step;
  }
  const std::string& currentPass() const { return m_pass; }
  // Set while a pass rewrites the nested graphs of node n, so that records say where they are.
  void enterRegion(ir::NodeId n) { m_region.push_back(n); }
  void exitRegion() { m_region.pop_back(); }

  // The fusion pass leaves its kernel plan here for the code generator and the tools.
  void setFusionPlan(std::shared_ptr<const FusionPlan> plan) { m_fusionPlan = std::move(plan); }
  const std::shared_ptr<const FusionPlan>& fusionPlan() const { return m_fusionPlan; }

  // Reports a pass writes for people (a plugin's op statistics, say): a file name and its text. `tessera
  // compile --dump DIR` writes each as DIR/<name>; the IDE shows them. A second report of one name replaces it.
  struct Report {
    std::string name;  // "op_stats.txt"
    std::string pass;
    std::string text;
  };
  void addReport(std::string name, std::string text);
  const std::vector<Report>& reports() const { return m_reports; }

 private:
  const ir::OpRegistry& m_reg;
  PassOptions m_options;
  DecisionLog m_log;
  std::string m_pass;
  int m_step = -1;
  std::vector<ir::NodeId> m_region;
  std::shared_ptr<const FusionPlan> m_fusionPlan;
  std::vector<Report> m_reports;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  // Rewrites g in place; returns whether it changed. An error means the pass could not do its job on this
  // graph (a kernel failed while folding, say); the graph may then be partly rewritten but still valid.
  virtual Result<bool> run(ir::Graph& g, PassContext& ctx) = 0;
};

// A graph as it was after one step of a pipeline.
struct Snapshot {
  std::shared_ptr<const ir::Graph> graph;
  std::string text;            // ir::print of graph
  std::vector<int> nodeLines;  // node id -> its 0-based line in text
};

struct PassStep {
  std::string pass;
  std::string group;   // the fixed-point group it ran in; empty for a single pass
  int iteration = 0;   // the group's iteration (0-based); 0 for a single pass
  double seconds = 0;  // wall time of run() alone (verify and snapshots are not counted)
  bool changed = false;
  int nodesBefore = 0;
  int nodesAfter = 0;
  Snapshot after;      // empty unless PipelineOptions::snapshots
};

struct GroupSummary {
  std::string name;
  int iterations = 0;
  bool converged = true;  // false: still changing when maxIterations was reached
};

struct PipelineReport {
  std::string pipeline;
  Snapshot input;  // the graph before the first pass (when snapshots are on)
  std::vector<PassStep> steps;
  std::vector<GroupSummary> groups;
  double totalSeconds = 0;
  int nodesBefore = 0;
  int nodesAfter = 0;

  bool changed() const;
  // A table: step, pass, time, changed, nodes before -> after.
  std::string toText() const;
  // {"pipeline": ..., "total_seconds": ..., "steps": [{"step", "pass", "group", "iteration", "seconds",
  //  "changed", "nodes_before", "nodes_after"}], "groups": [...]}
  std::string toJson() const;
};

#ifdef NDEBUG
inline constexpr bool kVerifyByDefault = false;
#else
inline constexpr bool kVerifyByDefault = true;
#endif

struct PipelineOptions {
  bool verify = kVerifyByDefault;  // ir::verify after every pass; a failure names the pass that broke the graph
  bool snapshots = false;          // keep a copy and the printed text of the graph after every pass
  bool verifyInput = true;         // when verify is on, check the input graph before the first pass too
  // Called after every step (with its snapshot when snapshots are on): the CLI's dump writes files from it.
  std::function<void(int step, const PassStep&)> onStep;
};

// Runs passes in order. A fixed-point group repeats its passes until a whole round changes nothing, at most
// maxIterations rounds (a round that still changes at the limit is reported, not an error: the graph is valid).
class PassManager {
 public:
  explicit PassManager(std::string name = "pipeline", PipelineOptions options = {})
      : m_name(std::move(name)), m_options(std::move(options)) {}
  PassManager(PassManager&&) = default;
  PassManager& operator=(PassManager&&) = default;

  PassManager& add(std::unique_ptr<Pass> pass);
  template <class P, class... Args>
  PassManager& add(Args&&... args) {
    return add(std::make_unique<P>(std::forward<Args>(args)...));
  }
  PassManager& addFixedPoint(std::string groupName, std::vector<std::unique_ptr<Pass>> passes,
                             int maxIterations = 8);

  const std::string& name() const { return m_name; }
  PipelineOptions& options() { return m_options; }
  // The pass names in pipeline order, a group written "fixpoint(simplify, cse, dce)".
  std::vector<std::string> describe() const;

  Result<PipelineReport> run(ir::Graph& g, PassContext& ctx);

 private:
  struct Entry {
    std::string group;  // empty: a single pass
    std::vector<std::unique_ptr<Pass>> passes;
    int maxIterations = 1;
  };
  Result<bool> runOne(Pass& pass, const std::string& group, int iteration, ir::Graph& g, PassContext& ctx,
                      PipelineReport& report);

  std::string m_name;
  PipelineOptions m_options;
  std::vector<Entry> m_entries;
};

}  // namespace tsr::passes
