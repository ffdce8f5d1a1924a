#include "engine/inspect/module_tree.h"

#include <algorithm>
#include <unordered_map>

namespace tsr::inspect {

namespace {

bool isNumber(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

namespace {

constexpr int kUnset = -1;
constexpr int kShared = -2;

// The parameter an output belongs to: "params.h.0.mlp.c_fc.weight" and the optimizer's
// "opt.0.mu.h.0.mlp.c_fc.weight" both name "h.0.mlp.c_fc.weight"; other outputs ("loss") name themselves.
std::vector<std::string> outputKeys(const std::vector<std::string>& names) {
  const std::string prefix = "params.";
  std::vector<std::string> params;
  for (const auto& n : names)
    if (n.rfind(prefix, 0) == 0) params.push_back(n.substr(prefix.size()));
  std::vector<std::string> keys;
  for (const auto& n : names) {
    std::string best = n;
    size_t bestLen = 0;
    for (const auto& p : params) {
      bool match = n.size() > p.size() && n.compare(n.size() - p.size(), p.size(), p) == 0 && n[n.size() - p.size() - 1] == '.';
      if (match && p.size() > bestLen) {
        best = p;
        bestLen = p.size();
      }
    }
    keys.push_back(best);
  }
  return keys;
}

// For each node, the one output key (index into keys) that depends on it, kShared when several do, kUnset
// when none does.
std::vector<int> outputOwners(const ir::Graph& g, const std::vector<std::string>& keys) {
  std::map<std::string, int> keyIndex;
  for (const auto& k : keys) keyIndex.emplace(k, static_cast<int>(keyIndex.size()));
  std::vector<int> ofValue(static_cast<size_t>(g.numValues()), kUnset);
  auto merge = [](int a, int b) { return a == kUnset ? b : b == kUnset || a == b ? a : kShared; };
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    int& o = ofValue[static_cast<size_t>(g.outputs()[i])];
    o = merge(o, keyIndex[keys[i]]);
  }
  std::vector<int> ofNode(g.nodes().size(), kUnset);
  for (size_t i = g.nodes().size(); i-- > 0;) {
    const ir::Node& n = g.nodes()[i];
    int owner = kUnset;
    for (ir::ValueId v : n.results) owner = merge(owner, ofValue[static_cast<size_t>(v)]);
    ofNode[i] = owner;
    for (ir::ValueId v : n.operands) ofValue[static_cast<size_t>(v)] = merge(ofValue[static_cast<size_t>(v)], owner);
  }
  return ofNode;
}

// The node a kernel is placed by: the dot of a GEMM, the convolution of a conv group, else the last member (a
// loop's or a reduction's result).
ir::NodeId anchorOf(const ir::Graph& g, const passes::FusionGroup& k) {
  if (k.kind == passes::GroupKind::Gemm || k.kind == passes::GroupKind::Conv) {
    const ir::OpCode anchor = k.kind == passes::GroupKind::Gemm ? ir::OpCode::DotGeneral : ir::OpCode::ConvGeneralDilated;
    for (ir::NodeId m : k.nodes)
      if (g.nodes()[static_cast<size_t>(m)].op == anchor) return m;
  }
  return k.nodes.back();
}

}  // namespace

ModuleTree::ModuleTree(const ir::Graph& g, const std::vector<std::string>& outputNames,
                       std::shared_ptr<const passes::FusionPlan> plan)
    : m_nodeGroup(g.nodes().size(), 0), m_plan(std::move(plan)) {
  m_groups.push_back(ModuleGroup{});
  m_index[""] = 0;
  m_inputs = g.inputs();
  if (!m_inputs.empty()) {
    m_inputsGroup = static_cast<int>(m_groups.size());
    ModuleGroup in;
    in.path = std::string("(") + kInputsGroup + ")";
    in.name = kInputsGroup;
    in.parent = 0;
    in.depth = 1;
    in.totalNodes = static_cast<int>(m_inputs.size());
    m_groups.push_back(in);
    m_groups[0].children.push_back(m_inputsGroup);
    m_index[in.path] = m_inputsGroup;
  }
  std::vector<int> owners;
  std::vector<std::string> keyNames;
  if (!outputNames.empty() && outputNames.size() == g.outputs().size()) {
    std::vector<std::string> keys = outputKeys(outputNames);
    owners = outputOwners(g, keys);
    std::map<std::string, int> seen;
    for (const auto& k : keys)
      if (seen.emplace(k, static_cast<int>(seen.size())).second) keyNames.push_back(k);
  }
  std::vector<std::string> paths(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    std::string path = g.nodes()[i].prov.modulePath;
    if (path.empty() && !owners.empty()) {
      int o = owners[i];
      path = o >= 0 ? "update." + keyNames[static_cast<size_t>(o)] : o == kShared ? "(shared)" : "(unused)";
    }
    paths[i] = std::move(path);
  }
  // A constant the trace captured (a layer norm's width, an epsilon) has no provenance of its own: it sits with
  // the first op that reads it and has a module path, rather than in the groups of the update.
  std::vector<ir::NodeId> reader(g.nodes().size(), ir::kNone);
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    if (g.nodes()[i].prov.modulePath.empty()) continue;
    for (ir::ValueId v : g.nodes()[i].operands) {
      ir::NodeId p = g.value(v).producer;
      if (p != ir::kNone && reader[static_cast<size_t>(p)] == ir::kNone) reader[static_cast<size_t>(p)] = static_cast<ir::NodeId>(i);
    }
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    if (n.op == ir::OpCode::Constant && n.prov.modulePath.empty() && reader[i] != ir::kNone)
      paths[i] = paths[static_cast<size_t>(reader[i])];
  }
  if (m_plan && m_plan->groupOfNode.size() == g.nodes().size()) {
    m_cluster.assign(g.nodes().size(), -1);
    for (size_t k = 0; k < m_plan->groups.size(); ++k) {
      const passes::FusionGroup& kernel = m_plan->groups[k];
      if (kernel.nodes.size() < 2) continue;
      ir::NodeId anchor = anchorOf(g, kernel);
      std::string path = paths[static_cast<size_t>(anchor)];
      if (g.nodes()[static_cast<size_t>(anchor)].prov.modulePath.empty())
        for (ir::NodeId m : kernel.nodes)
          if (!g.nodes()[static_cast<size_t>(m)].prov.modulePath.empty()) {
            path = paths[static_cast<size_t>(m)];
            break;
          }
      for (ir::NodeId m : kernel.nodes) {
        paths[static_cast<size_t>(m)] = path;
        m_cluster[static_cast<size_t>(m)] = static_cast<int>(k);
      }
    }
  } else {
    m_plan.reset();
  }
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    int gi = ensure(paths[i]);
    m_nodeGroup[i] = gi;
    m_groups[static_cast<size_t>(gi)].nodes.push_back(static_cast<ir::NodeId>(i));
    for (int a = gi; a >= 0; a = m_groups[static_cast<size_t>(a)].parent) ++m_groups[static_cast<size_t>(a)].totalNodes;
  }
  splitLargeGroups();
}

std::string ModuleTree::clusterLabel(int cluster) const {
  if (!m_plan || cluster < 0 || cluster >= static_cast<int>(m_plan->groups.size())) return "";
  const passes::FusionGroup& k = m_plan->groups[static_cast<size_t>(cluster)];
  return k.name + " (" + passes::groupKindName(k.kind) + ")";
}

void ModuleTree::splitLargeGroups() {
  size_t n = m_groups.size();
  for (size_t gi = 0; gi < n; ++gi) {
    if (static_cast<int>(m_groups[gi].nodes.size()) <= kMaxDirectNodes || static_cast<int>(gi) == m_inputsGroup) continue;
    std::vector<ir::NodeId> nodes = std::move(m_groups[gi].nodes);
    m_groups[gi].nodes.clear();
    // Parts of kMaxDirectNodes in program order; a kernel's members all go to the part of its first member.
    std::vector<std::vector<ir::NodeId>> parts;
    std::unordered_map<int, size_t> partOfCluster;
    size_t filled = 0;  // nodes placed in the last part by program order
    for (ir::NodeId node : nodes) {
      int c = clusterOfNode(node);
      auto it = c >= 0 ? partOfCluster.find(c) : partOfCluster.end();
      if (it != partOfCluster.end()) {
        parts[it->second].push_back(node);
        continue;
      }
      if (parts.empty() || filled >= static_cast<size_t>(kMaxDirectNodes)) {
        parts.emplace_back();
        filled = 0;
      }
      parts.back().push_back(node);
      ++filled;
      if (c >= 0) partOfCluster[c] = parts.size() - 1;
    }
    size_t start = 0;
    for (std::vector<ir::NodeId>& members : parts) {
      std::sort(members.begin(), members.end());
      size_t end = start + members.size();
      ModuleGroup part;
      part.name = "ops " + std::to_string(start + 1) + "-" + std::to_string(end);
      part.path = m_groups[gi].path.empty() ? part.name : m_groups[gi].path + "." + part.name;
      part.parent = static_cast<int>(gi);
      part.depth = m_groups[gi].depth + 1;
      part.nodes = std::move(members);
      part.totalNodes = static_cast<int>(part.nodes.size());
      int id = static_cast<int>(m_groups.size());
      for (ir::NodeId node : part.nodes) m_nodeGroup[static_cast<size_t>(node)] = id;
      m_index[part.path] = id;
      m_groups.push_back(std::move(part));
      m_groups[gi].children.push_back(id);
      start = end;
    }
  }
}

int ModuleTree::ensure(const std::string& path) {
  auto it = m_index.find(path);
  if (it != m_index.end()) return it->second;
  size_t dot = path.rfind('.');
  int parent = dot == std::string::npos ? 0 : ensure(path.substr(0, dot));
  ModuleGroup grp;
  grp.path = path;
  grp.name = dot == std::string::npos ? path : path.substr(dot + 1);
  grp.parent = parent;
  grp.depth = m_groups[static_cast<size_t>(parent)].depth + 1;
  int id = static_cast<int>(m_groups.size());
  m_groups.push_back(std::move(grp));
  m_groups[static_cast<size_t>(parent)].children.push_back(id);
  m_index[path] = id;
  return id;
}

int ModuleTree::find(const std::string& path) const {
  auto it = m_index.find(path);
  return it == m_index.end() ? -1 : it->second;
}

std::vector<ir::NodeId> ModuleTree::subtreeNodes(int g) const {
  std::vector<ir::NodeId> out;
  std::vector<int> work = {g};
  while (!work.empty()) {
    const ModuleGroup& grp = m_groups[static_cast<size_t>(work.back())];
    work.pop_back();
    out.insert(out.end(), grp.nodes.begin(), grp.nodes.end());
    work.insert(work.end(), grp.children.begin(), grp.children.end());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool ModuleTree::contains(int a, int g) const {
  for (int x = g; x >= 0; x = m_groups[static_cast<size_t>(x)].parent)
    if (x == a) return true;
  return false;
}

std::set<std::string> ModuleTree::defaultExpanded() const {
  std::set<std::string> out{""};
  auto numbered = [&](const ModuleGroup& grp) {
    return !grp.children.empty() && std::all_of(grp.children.begin(), grp.children.end(),
                                                [&](int c) { return isNumber(m_groups[static_cast<size_t>(c)].name); });
  };
  for (int top : m_groups[0].children) {
    const ModuleGroup& first = m_groups[static_cast<size_t>(top)];
    if (first.name.empty() || first.name[0] == '(' || first.name == "update") continue;
    // Down the chain of groups that hold most of their parent ("vit" > "encoder" > "layer"), to the group
    // whose children are the numbered blocks; the chain opens only when it ends there.
    std::vector<std::string> chain;
    for (int g = top; g >= 0;) {
      const ModuleGroup& grp = m_groups[static_cast<size_t>(g)];
      chain.push_back(grp.path);
      if (numbered(grp)) {
        out.insert(chain.begin(), chain.end());
        break;
      }
      int next = -1;
      for (int c : grp.children)
        if (2 * m_groups[static_cast<size_t>(c)].totalNodes >= grp.totalNodes) next = c;
      g = next;
    }
  }
  return out;
}

Level buildLevel(const ModuleTree& tree, const ir::Graph& g, int group, const std::set<std::string>& expanded) {
  Level level;
  level.group = group;
  const ModuleGroup& grp = tree.group(group);
  // The item of this level that holds each child group, found by walking up from a node's group.
  std::unordered_map<int, int> itemOfGroup;
  for (int c : grp.children) {
    const ModuleGroup& cg = tree.group(c);
    itemOfGroup[c] = static_cast<int>(level.items.size());
    level.items.push_back({LevelItem::Kind::Group, c, ir::kNone, ir::kNone, expanded.count(cg.path) > 0, "g:" + cg.path});
  }
  std::unordered_map<ir::NodeId, int> itemOfNode;
  for (ir::NodeId n : grp.nodes) {
    itemOfNode[n] = static_cast<int>(level.items.size());
    level.items.push_back({LevelItem::Kind::Node, -1, n, ir::kNone, false, "n:" + std::to_string(n), tree.clusterOfNode(n)});
  }
  std::unordered_map<ir::ValueId, int> itemOfInput;
  if (group == tree.inputsGroup()) {
    for (ir::ValueId v : tree.inputs()) {
      itemOfInput[v] = static_cast<int>(level.items.size());
      level.items.push_back({LevelItem::Kind::Input, -1, ir::kNone, v, false, "i:" + std::to_string(v)});
    }
  }
  // item holding node n at this level, or -1 when n lies outside this group.
  auto itemOf = [&](ir::NodeId n) -> int {
    auto direct = itemOfNode.find(n);
    if (direct != itemOfNode.end()) return direct->second;
    int x = tree.groupOfNode(n);
    while (x >= 0 && tree.group(x).parent != group) x = tree.group(x).parent;
    if (x < 0) return -1;
    auto it = itemOfGroup.find(x);
    return it == itemOfGroup.end() ? -1 : it->second;
  };
  // Edges between the items, from the values the group's nodes read; values made outside the group (and graph
  // inputs, unless the inputs group lies in it) draw none. Nodes in program order: producers come first.
  std::map<std::pair<int, int>, int> edges;
  std::unordered_map<ir::ValueId, int> itemOfValue;
  if (tree.contains(group, tree.inputsGroup()))
    for (ir::ValueId v : tree.inputs())
      itemOfValue[v] = group == tree.inputsGroup() ? itemOfInput[v] : itemOfGroup[tree.inputsGroup()];
  for (ir::NodeId id : tree.subtreeNodes(group)) {
    const ir::Node& n = g.nodes()[static_cast<size_t>(id)];
    int to = itemOf(id);
    if (to < 0) continue;
    for (ir::ValueId v : n.results) itemOfValue[v] = to;
    for (ir::ValueId v : n.operands) {
      auto from = itemOfValue.find(v);
      if (from == itemOfValue.end() || from->second == to) continue;
      ++edges[{from->second, to}];
    }
  }
  for (const auto& [k, count] : edges) level.edges.push_back({k.first, k.second, count});
  return level;
}

}  // namespace tsr::inspect
