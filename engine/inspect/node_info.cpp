#include "engine/inspect/node_info.h"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "engine/inspect/project_snapshot.h"
#include "engine/ops/registry.h"
#include "engine/train/sharding_plan.h"

namespace tsr::inspect {

std::vector<std::string> valueNames(const ir::Graph& g) {
  std::vector<std::string> names(static_cast<size_t>(g.numValues()));
  int next = 0;
  auto assign = [&](ir::ValueId v) {
    if (v >= 0 && v < g.numValues() && names[static_cast<size_t>(v)].empty())
      names[static_cast<size_t>(v)] = "%" + std::to_string(next++);
  };
  for (ir::ValueId v : g.inputs()) assign(v);
  for (const ir::Node& n : g.nodes())
    for (ir::ValueId v : n.results) assign(v);
  return names;
}

std::string opName(const ir::Graph& g, ir::NodeId node) {
  const ir::Node& n = g.nodes()[static_cast<size_t>(node)];
  if (const ir::OpDef* def = ops::registry().find(n.op)) return def->name;
  return ir::coreOpName(n.op);
}

std::string attrsOfLine(std::string_view line) {
  size_t close = line.find(')');
  if (close == std::string_view::npos) return "";
  size_t open = line.find(" {", close);
  if (open == std::string_view::npos || open > close + 1) return "";
  std::string out;
  int depth = 0;
  for (size_t i = open + 1; i < line.size(); ++i) {
    char c = line[i];
    if (c == '{') {
      if (++depth == 1) out += '{';
      if (depth == 2) out += "{...}";
    } else if (c == '}') {
      if (--depth == 0) {
        out += '}';
        break;
      }
    } else if (depth == 1) {
      out += c;
    }
  }
  if (depth > 0) out += '}';
  return out;
}

namespace {

std::string lineOf(const std::string& text, int line) {
  size_t pos = 0;
  for (int i = 0; i < line && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  if (pos == std::string::npos || pos >= text.size()) return "";
  size_t end = text.find('\n', pos);
  return text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
}

std::optional<NodeKernel> kernelOf(const Stage& stage, ir::NodeId node, const std::vector<std::string>& names) {
  const passes::FusionPlan& plan = *stage.fusion;
  const ir::Graph& g = *stage.graph;
  int gi = plan.groupOfNode[static_cast<size_t>(node)];
  if (gi < 0) return std::nullopt;
  const passes::FusionGroup& grp = plan.groups[static_cast<size_t>(gi)];
  NodeKernel k;
  k.name = grp.name;
  k.kind = passes::groupKindName(grp.kind);
  k.shape = Aval{grp.shape, DType::F32}.toString();
  k.reason = grp.reason;
  k.members = static_cast<int>(grp.nodes.size());
  k.nodes = grp.nodes;
  const KernelTable* table = stage.kernels.get();
  std::vector<int> inputIndex(static_cast<size_t>(g.numValues()), -1);
  for (size_t i = 0; i < g.inputs().size(); ++i) inputIndex[static_cast<size_t>(g.inputs()[i])] = static_cast<int>(i);
  auto where = [&](ir::ValueId v) -> std::string {
    if (inputIndex[static_cast<size_t>(v)] >= 0) return fmt::format("graph input {}", inputIndex[static_cast<size_t>(v)]);
    const size_t vi = static_cast<size_t>(v);
    if (table && vi < table->valueSlots.size() && table->valueSlots[vi].loc == cpu::Loc::View) {
      const cpu::ValueSlot& s = table->valueSlots[vi];
      return fmt::format("row view of {} (+{}, rows {} elements apart)", names[static_cast<size_t>(s.aliasOf)],
                         formatBytes(s.offset), s.rowStride);
    }
    if (table)
      for (const auto& iv : table->memory.intervals)
        if (iv.value == v) return fmt::format("arena +{} ({})", formatBytes(iv.offset), formatBytes(iv.bytes));
    if (std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end()) return "own buffer (graph output)";
    ir::NodeId p = g.value(v).producer;
    if (p != ir::kNone) {
      int pg = plan.groupOfNode[static_cast<size_t>(p)];
      if (pg >= 0 && plan.groups[static_cast<size_t>(pg)].kind == passes::GroupKind::Constant) return "constant";
      if (pg >= 0 && plan.groups[static_cast<size_t>(pg)].kind == passes::GroupKind::Alias) return "alias of its operand";
    }
    return "";
  };
  auto arg = [&](ir::ValueId v) { return KernelArg{names[static_cast<size_t>(v)], g.aval(v).toString(), where(v)}; };
  for (ir::ValueId v : grp.inputs) k.inputs.push_back(arg(v));
  for (ir::ValueId v : grp.outputs) k.outputs.push_back(arg(v));
  if (table) {
    k.launches = static_cast<int>(table->kernels.size());
    k.arenaBytes = table->memory.arenaBytes;
    k.launch = table->kernelOfGroup[static_cast<size_t>(gi)];
    if (k.launch < 0 && grp.kind == passes::GroupKind::Opaque) {
      const ir::Node& n = g.nodes()[static_cast<size_t>(grp.nodes[0])];
      k.noLaunch = n.op == ir::OpCode::Slice
                       ? "none: a row view, read in place by the ops that take it (no copy)"
                       : "none: its parts are written in place by the op that computes them (row views, no copy)";
    }
    if (k.launch >= 0) {
      k.flops = table->kernels[static_cast<size_t>(k.launch)].flops;
      k.bytes = table->kernels[static_cast<size_t>(k.launch)].bytes;
      if (static_cast<size_t>(k.launch) < table->native.size()) k.native = table->native[static_cast<size_t>(k.launch)];
    }
  }
  return k;
}

}  // namespace

Result<sharding::ShardingPlan> stageSharding(const Stage& stage, const train::StepShardingPlan& plan) {
  const ir::Graph& g = *stage.graph;
  if (plan.global && (plan.global.get() == stage.graph.get())) return plan.plan;
  if (g.inputs().size() != plan.arguments.size())
    return makeError("the stage has {} inputs, the planned step {}", g.inputs().size(), plan.arguments.size());
  sharding::ShardingAnnotations ann;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const train::PlannedArgument& a = plan.arguments[i];
    const Aval& here = g.aval(g.inputs()[i]);
    if (plan.global && a.value >= 0 && a.value < plan.global->numValues() && !(plan.global->aval(a.value) == here))
      return makeError("input {} of the stage is {}, the planned step's {} is {}", i, here.toString(),
                       a.path.toString(), plan.global->aval(a.value).toString());
    ann.inputs.push_back(a.sharding);
    const std::string name = a.path.toString();
    ann.inputNames.push_back(a.source.empty() ? name : fmt::format("{} ({})", name, a.source));
  }
  return sharding::propagateShardings(g, ops::registry(), plan.mesh, ann);
}

NodeInfo describeNode(const Stage& stage, ir::NodeId node, const sharding::ShardingPlan* sharding) {
  NodeInfo info;
  const ir::Graph& g = *stage.graph;
  if (node < 0 || static_cast<size_t>(node) >= g.nodes().size()) return info;
  const auto& reg = ops::registry();
  const ir::Node& n = g.nodes()[static_cast<size_t>(node)];
  std::vector<std::string> names = valueNames(g);
  info.node = node;
  info.op = opName(g, node);
  const ir::OpDef* def = reg.find(n.op);
  if (def) {
    info.family = def->family;
    info.fusionKind = ir::fusionKindName(def->fusion);
  }
  info.textLine = static_cast<size_t>(node) < stage.nodeLines.size() ? stage.nodeLines[static_cast<size_t>(node)] : 0;
  info.attrs = attrsOfLine(lineOf(stage.text, info.textLine));
  const bool sharded = sharding && sharding->values.size() == static_cast<size_t>(g.numValues());
  auto ref = [&](ir::ValueId v, ir::NodeId other, std::string otherOp) {
    ValueRef r{v, names[static_cast<size_t>(v)], g.aval(v).toString(), other, std::move(otherOp), "", ""};
    if (sharded) {
      r.sharding = sharding->values[static_cast<size_t>(v)].toString(sharding->mesh);
      r.shardingOrigin = sharding->origins[static_cast<size_t>(v)].toString(g, reg);
    }
    return r;
  };
  for (ir::ValueId v : n.operands) {
    ir::NodeId p = g.value(v).producer;
    info.operands.push_back(ref(v, p, p == ir::kNone ? "input" : opName(g, p)));
  }
  for (ir::ValueId v : n.results) info.results.push_back(ref(v, ir::kNone, ""));
  for (size_t i = static_cast<size_t>(node) + 1; i < g.nodes().size(); ++i) {
    const ir::Node& c = g.nodes()[i];
    for (ir::ValueId v : c.operands)
      if (std::find(n.results.begin(), n.results.end(), v) != n.results.end())
        info.consumers.push_back(ref(v, static_cast<ir::NodeId>(i), opName(g, static_cast<ir::NodeId>(i))));
  }
  for (ir::ValueId v : g.outputs())
    if (std::find(n.results.begin(), n.results.end(), v) != n.results.end())
      info.consumers.push_back(ref(v, ir::kNone, "output"));
  info.modulePath = n.prov.modulePath;
  info.file = n.prov.file;
  info.line = n.prov.line;
  if (def && def->cost) {
    ir::Cost c = ir::nodeCost(g, n, reg);
    info.flops = c.flops;
    info.bytesRead = c.bytesRead;
    info.bytesWritten = c.bytesWritten;
  }
  for (const passes::Decision& d : stage.decisions)
    if (std::find(d.nodes.begin(), d.nodes.end(), node) != d.nodes.end())
      info.decisions.push_back(d.reason == passes::FusionReason::None
                                   ? fmt::format("{} ({}): {}", d.pass, passes::decisionKindName(d.kind), d.message)
                                   : fmt::format("{} ({}, {}): {}", d.pass, passes::decisionKindName(d.kind),
                                                 passes::fusionReasonName(d.reason), d.message));
  if (stage.fusion && stage.fusion->groupOfNode.size() == g.nodes().size()) {
    info.readThrough = stage.fusion->groupOfNode[static_cast<size_t>(node)] < 0;
    info.kernel = kernelOf(stage, node, names);
  }
  return info;
}

std::vector<ir::Cost> nodeCosts(const ir::Graph& g) {
  const auto& reg = ops::registry();
  std::vector<ir::Cost> costs(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) costs[i] = ir::nodeCost(g, g.nodes()[i], reg);
  return costs;
}

ir::NodeId nodeAtLine(const Stage& stage, int line) {
  auto it = std::upper_bound(stage.nodeLines.begin(), stage.nodeLines.end(), line);
  if (it == stage.nodeLines.begin()) return ir::kNone;
  return static_cast<ir::NodeId>(it - stage.nodeLines.begin() - 1);
}

Result<std::vector<ir::NodeId>> searchNodes(const Stage& stage, const std::string& pattern) {
  std::regex re;
  try {
    re = std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return makeError("invalid regular expression '{}': {}", pattern, e.what());
  }
  const ir::Graph& g = *stage.graph;
  std::vector<std::string> names = valueNames(g);
  std::vector<ir::NodeId> hits;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    bool match = std::regex_search(opName(g, static_cast<ir::NodeId>(i)), re) ||
                 (!n.prov.modulePath.empty() && std::regex_search(n.prov.modulePath, re));
    for (ir::ValueId v : n.results) {
      if (match) break;
      match = std::regex_search(names[static_cast<size_t>(v)], re) || std::regex_search(g.aval(v).toString(), re);
    }
    if (match) hits.push_back(static_cast<ir::NodeId>(i));
  }
  return hits;
}

std::vector<NodeSummary> summarizeNodes(const ir::Graph& g, const std::vector<ir::NodeId>& nodes) {
  std::vector<std::string> names = valueNames(g);
  std::vector<NodeSummary> out;
  out.reserve(nodes.size());
  for (ir::NodeId id : nodes) {
    const ir::Node& n = g.nodes()[static_cast<size_t>(id)];
    NodeSummary s;
    s.node = id;
    s.op = opName(g, id);
    s.name = n.results.empty() ? s.op : names[static_cast<size_t>(n.results[0])];
    if (!n.results.empty()) s.aval = g.aval(n.results[0]).toString();
    s.modulePath = n.prov.modulePath;
    out.push_back(std::move(s));
  }
  return out;
}

const Stage* fusionStageFor(const std::vector<Stage>& stages, const Stage& stage) {
  for (const Stage& s : stages)
    if (s.fusion && (&s == &stage || sameGraph(s, stage))) return &s;
  return nullptr;
}

passes::FusionVerdict fusionVerdict(const Stage& fusionStage, ir::NodeId a, ir::NodeId b) {
  if (!fusionStage.fusion || !fusionStage.graph) return {};
  return passes::whyNotFused(*fusionStage.graph, *fusionStage.fusion, fusionStage.decisions, a, b);
}

std::vector<passes::UnfusedBoundary> unfusedBoundaries(const Stage& fusionStage, size_t count) {
  if (!fusionStage.fusion || !fusionStage.graph) return {};
  return passes::costliestUnfusedBoundaries(*fusionStage.graph, *fusionStage.fusion, fusionStage.decisions, count);
}

}  // namespace tsr::inspect
