#include "engine/passes/dot.h"

#include <map>
#include <memory>

#include <fmt/format.h>

#include "engine/passes/fusion.h"
#include "engine/passes/rewrite.h"

namespace tsr::passes {

namespace {

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

const char* fillColor(const ir::OpRegistry& reg, ir::OpCode op) {
  if (op == ir::OpCode::Constant || op == ir::OpCode::Iota) return "#eeeeee";
  const ir::OpDef* def = reg.find(op);
  if (!def) return "#ffffff";
  switch (def->fusion) {
    case ir::FusionKind::Elementwise: return "#e3f2d9";
    case ir::FusionKind::Reduction: return "#d9e8f5";
    case ir::FusionKind::Layout: return "#fbf3d5";
    case ir::FusionKind::Opaque: return "#f8dcc8";
  }
  return "#ffffff";
}

// Clusters keyed by module-path component: "layers.0" lives in cluster "layers" > "layers.0".
struct Cluster {
  std::string path;
  std::map<std::string, std::unique_ptr<Cluster>> children;
  std::vector<std::string> lines;

  Cluster& at(const std::string& modulePath) {
    Cluster* c = this;
    size_t start = 0;
    while (start <= modulePath.size() && !modulePath.empty()) {
      size_t dot = modulePath.find('.', start);
      std::string prefix = modulePath.substr(0, dot);
      std::string part = modulePath.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      auto& child = c->children[part];
      if (!child) {
        child = std::make_unique<Cluster>();
        child->path = prefix;
      }
      c = child.get();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return *c;
  }

  void write(std::string& out, int& counter, const std::string& indent) const {
    for (const auto& l : lines) out += indent + l + "\n";
    for (const auto& [name, child] : children) {
      out += fmt::format("{}subgraph cluster_{} {{\n{}  label={}; style=rounded; color=\"#999999\";\n", indent,
                         counter++, indent, quoted(child->path));
      child->write(out, counter, indent + "  ");
      out += indent + "}\n";
    }
  }
};

std::string nodeLabel(const ir::Graph& g, const ir::OpRegistry& reg, const ir::Node& n,
                      const std::vector<int64_t>& number, const DotOptions& options) {
  std::string label = opName(reg, n.op);
  if (options.showLiterals && n.op == ir::OpCode::Constant) {
    const auto* c = std::get_if<ir::ConstantAttrs>(&n.attrs);
    if (c && c->value.data && c->value.aval.numel() == 1) label += " " + firstElementText(c->value);
  }
  for (ir::ValueId r : n.results)
    label += fmt::format("\n%{}: {}", number[static_cast<size_t>(r)], g.aval(r).toString());
  int graphs = 0, nodes = 0;
  for (const auto& body : nestedGraphsOf(n.attrs)) {
    ++graphs;
    nodes += static_cast<int>(body->nodes().size());
  }
  if (graphs) label += fmt::format("\n({} nested graph{}, {} nodes)", graphs, graphs == 1 ? "" : "s", nodes);
  return label;
}

}  // namespace

std::string toDot(const ir::Graph& g, const ir::OpRegistry& reg, const DotOptions& options) {
  // The printer's numbering (inputs, then results in order), so labels match the .tir text.
  std::vector<int64_t> number(static_cast<size_t>(g.numValues()), -1);
  int64_t next = 0;
  for (ir::ValueId v : g.inputs()) number[static_cast<size_t>(v)] = next++;
  for (const auto& n : g.nodes())
    for (ir::ValueId v : n.results) number[static_cast<size_t>(v)] = next++;

  std::string out = fmt::format("digraph {} {{\n", quoted(g.name));
  out += "  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fontname=\"Helvetica\", fontsize=10];\n";
  out += "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    ir::ValueId v = g.inputs()[i];
    out += fmt::format("  in{} [shape=ellipse, fillcolor=\"#ffffff\", label={}];\n", i,
                       quoted(fmt::format("%{}: {}", number[static_cast<size_t>(v)], g.aval(v).toString())));
  }
  Cluster root;
  const FusionPlan* plan = options.fusion;
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const ir::Node& n = g.nodes()[i];
    bool readThrough = plan && plan->groupOfNode[i] < 0;
    std::string line = fmt::format("n{} [fillcolor=\"{}\", label={}{}];", i, fillColor(reg, n.op),
                                   quoted(nodeLabel(g, reg, n, number, options)),
                                   readThrough ? ", style=\"rounded,filled,dashed\"" : "");
    if (plan) {
      int gi = plan->groupOfNode[i];
      if (gi >= 0 && plan->groups[static_cast<size_t>(gi)].nodes.size() > 1) continue;  // in its kernel's cluster
      root.lines.push_back(std::move(line));
      continue;
    }
    (options.clusters ? root.at(n.prov.modulePath) : root).lines.push_back(std::move(line));
  }
  int counter = 0;
  root.write(out, counter, "  ");
  if (plan) {
    for (const auto& gr : plan->groups) {
      if (gr.nodes.size() < 2) continue;
      out += fmt::format("  subgraph cluster_{} {{\n    label={}; style=\"rounded,filled\"; fillcolor=\"#f4f4fb\"; "
                         "color=\"#5b5bd6\";\n",
                         counter++, quoted(fmt::format("{} ({})", gr.name, groupKindName(gr.kind))));
      for (ir::NodeId m : gr.nodes) {
        const ir::Node& n = g.nodes()[static_cast<size_t>(m)];
        out += fmt::format("    n{} [fillcolor=\"{}\", label={}];\n", m, fillColor(reg, n.op),
                           quoted(nodeLabel(g, reg, n, number, options)));
      }
      out += "  }\n";
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i)
    out += fmt::format("  out{} [shape=ellipse, fillcolor=\"#ffffff\", label={}];\n", i,
                       quoted(fmt::format("output {}: {}", i, g.aval(g.outputs()[i]).toString())));

  // Edges: from the input ellipse or the producing node.
  std::vector<int> inputIndex(static_cast<size_t>(g.numValues()), -1);
  for (size_t i = 0; i < g.inputs().size(); ++i) inputIndex[static_cast<size_t>(g.inputs()[i])] = static_cast<int>(i);
  auto edge = [&](ir::ValueId v, const std::string& to) {
    const ir::ValueInfo& info = g.value(v);
    if (info.producer == ir::kNone) {
      out += fmt::format("  in{} -> {};\n", inputIndex[static_cast<size_t>(v)], to);
    } else if (g.nodes()[static_cast<size_t>(info.producer)].results.size() > 1) {
      out += fmt::format("  n{} -> {} [label=\"#{}\"];\n", info.producer, to, info.resultIndex);
    } else {
      out += fmt::format("  n{} -> {};\n", info.producer, to);
    }
  };
  for (size_t i = 0; i < g.nodes().size(); ++i)
    for (ir::ValueId v : g.nodes()[i].operands) edge(v, fmt::format("n{}", i));
  for (size_t i = 0; i < g.outputs().size(); ++i) edge(g.outputs()[i], fmt::format("out{}", i));
  return out + "}\n";
}

}  // namespace tsr::passes
