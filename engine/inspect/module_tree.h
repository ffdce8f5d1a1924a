#pragma once
// Nodes grouped by the module path of their provenance ("h.3.attn" lies in "h" > "h.3" > "h.3.attn"), as
// Model Explorer groups layers. A view shows a group collapsed (one box) or expanded (its child groups and its
// own nodes); a level is what one expanded group shows, with the edges between its items, so each expanded
// group can be laid out on its own.
// With a fusion plan, the members of each multi-node kernel sit together in one module group (see
// ModuleTree's constructor), so that a level can draw the kernel as a cluster around them.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/passes/fusion.h"

namespace tsr::inspect {

struct ModuleGroup {
  std::string path;   // "" for the root
  std::string name;   // last component: "attn", "3"
  int parent = -1;
  int depth = 0;
  std::vector<int> children;        // child groups, in first-use order
  std::vector<ir::NodeId> nodes;    // nodes whose module path is exactly this group
  int totalNodes = 0;               // nodes in this group and below
};

class ModuleTree {
 public:
  // Graph inputs live in a group named "(inputs)" under the root, so that hundreds of parameters and optimizer
  // slots collapse into one box.
  static constexpr const char* kInputsGroup = "inputs";
  // A group holding more nodes of its own than this shows them in parts ("ops 1-150", in program order), so
  // that expanding any one box lays out a bounded number of boxes.
  static constexpr int kMaxDirectNodes = 150;

  // Nodes without a module path (the loss, the optimizer update) are grouped by the parameter whose outputs
  // they feed, "update.h.0.attn.c_attn.weight" (the new weight and its optimizer slots), when outputNames
  // names the outputs (a training step's output tree); "(shared)" when they feed several parameters,
  // "(unused)" when they feed none. Without names, such nodes belong to the root. A constant without a module
  // path sits with the first op with a module path that reads it.
  //
  // With a fusion plan (of this graph), a kernel of several nodes lies in one group: the module of its dot
  // (a GEMM) or of its last member, or when that one has no module path, of its first member that has one.
  // Members from other modules (backward glue without a path, an embedding add fused into a layer norm)
  // move there; groups shown in parts keep each kernel within one part.
  explicit ModuleTree(const ir::Graph& g, const std::vector<std::string>& outputNames = {},
                      std::shared_ptr<const passes::FusionPlan> plan = nullptr);

  const std::vector<ModuleGroup>& groups() const { return m_groups; }
  const ModuleGroup& group(int i) const { return m_groups[static_cast<size_t>(i)]; }
  int find(const std::string& path) const;  // -1 when absent
  int groupOfNode(ir::NodeId n) const { return m_nodeGroup[static_cast<size_t>(n)]; }
  int inputsGroup() const { return m_inputsGroup; }
  const std::vector<ir::ValueId>& inputs() const { return m_inputs; }
  // The fusion plan the tree was built with (null without one), and the kernel (index into plan->groups) that
  // node n belongs to when that kernel has several members, else -1.
  const std::shared_ptr<const passes::FusionPlan>& plan() const { return m_plan; }
  int clusterOfNode(ir::NodeId n) const {
    return m_cluster.empty() ? -1 : m_cluster[static_cast<size_t>(n)];
  }
  // Whether node n is a view every consumer reads through (no kernel of its own); false without a plan.
  bool isReadThrough(ir::NodeId n) const { return m_plan && m_plan->groupOfNode[static_cast<size_t>(n)] < 0; }
  // "fusion.12 (loop)"
  std::string clusterLabel(int cluster) const;
  // Whether group a is g or one of its ancestors.
  bool contains(int a, int g) const;
  // The nodes of group g and of the groups below it, in program order.
  std::vector<ir::NodeId> subtreeNodes(int g) const;

  // The groups a view first expands: the root, and each group whose children are numbered ("h" -> h.0..h.11),
  // so a transformer opens collapsed to its blocks.
  std::set<std::string> defaultExpanded() const;

 private:
  int ensure(const std::string& path);
  void splitLargeGroups();

  std::vector<ModuleGroup> m_groups;
  std::map<std::string, int> m_index;
  std::vector<int> m_nodeGroup;
  std::shared_ptr<const passes::FusionPlan> m_plan;
  std::vector<int> m_cluster;  // node -> multi-node kernel, -1; empty without a plan
  int m_inputsGroup = -1;
  std::vector<ir::ValueId> m_inputs;
};

// One item of a level: a child group (collapsed or expanded), a node, or a graph input. A level's kernels are
// no items of their own (the layout draws them as clusters around their nodes); Kind::Cluster names one in
// the layout's boxes.
struct LevelItem {
  enum class Kind { Group, Node, Input, Cluster } kind = Kind::Node;
  int group = -1;                 // Group
  ir::NodeId node = ir::kNone;    // Node
  ir::ValueId input = ir::kNone;  // Input
  bool expanded = false;          // Group
  std::string key;                // "g:h.3", "n:42", "i:7", "k:fusion.12": stable across stages
  int cluster = -1;               // Node: its multi-node kernel (ModuleTree::clusterOfNode); Cluster: that kernel
};

struct LevelEdge {
  int from = 0, to = 0;  // item indices
  int count = 1;         // values flowing between them
};

struct Level {
  int group = 0;
  std::vector<LevelItem> items;
  std::vector<LevelEdge> edges;
};

// What group `group` shows when expanded; child groups in `expanded` are flagged expanded. It reads the group's
// own nodes and those below it, not the whole graph, so that laying out every level of a view stays linear in
// the graph's size (times its depth).
Level buildLevel(const ModuleTree& tree, const ir::Graph& g, int group, const std::set<std::string>& expanded);

}  // namespace tsr::inspect
