// The op-statistics plugin: a pass at the end of the compiler pipeline that changes nothing and writes
// op_stats.txt, the graph's nodes counted by op family and by op with each op's FLOPs and bytes (from the ops'
// cost rules) and its share of the step's FLOPs. `tessera compile --dump DIR` writes it to DIR/op_stats.txt; the
// IDE shows it in Help › Plugins and in the Op Mix panel.
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "engine/plugin/plugin.h"
#include "engine/version.h"

namespace {

using namespace tsr;

struct Row {
  int nodes = 0;
  double flops = 0;
  double bytes = 0;
  std::string family;
};

// Nodes of nested graphs (scan bodies, cond branches), which the cost of their scan or cond already counts.
int nestedNodes(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes())
    for (const ir::GraphPtr& body : ir::nestedGraphs(node.attrs))
      if (body) n += static_cast<int>(body->nodes().size()) + nestedNodes(*body);
  return n;
}

std::string share(double part, double whole) { return whole > 0 ? fmt::format("{:.1f}%", 100 * part / whole) : "-"; }

std::string report(const ir::Graph& g, const ir::OpRegistry& reg) {
  std::map<std::string, Row> byOp, byFamily;
  Row total;
  for (const ir::Node& n : g.nodes()) {
    const ir::OpDef* def = reg.find(n.op);
    std::string name = def ? def->name : "?";
    ir::Cost c = ir::nodeCost(g, n, reg);
    double bytes = static_cast<double>(c.bytesRead + c.bytesWritten);
    for (Row* r : {&byOp[name], &byFamily[def ? def->family : "?"], &total}) {
      r->nodes += 1;
      r->flops += c.flops;
      r->bytes += bytes;
    }
    byOp[name].family = def ? def->family : "?";
  }
  std::string s = fmt::format("op statistics of '{}': {} nodes", g.name, total.nodes);
  if (int nested = nestedNodes(g)) s += fmt::format(" (and {} in nested graphs, counted by their scan or cond)", nested);
  s += fmt::format(", {:.4g} GFLOP, {:.4g} MB read and written\n\n", total.flops / 1e9, total.bytes / 1e6);

  auto sorted = [](const std::map<std::string, Row>& m) {
    std::vector<std::pair<std::string, Row>> v(m.begin(), m.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return a.second.flops != b.second.flops ? a.second.flops > b.second.flops : a.second.nodes > b.second.nodes;
    });
    return v;
  };
  s += fmt::format("{:<16}{:>8}{:>14}{:>10}{:>14}\n", "family", "nodes", "MFLOP", "flops", "MB");
  for (const auto& [family, r] : sorted(byFamily))
    s += fmt::format("{:<16}{:>8}{:>14.3f}{:>10}{:>14.3f}\n", family, r.nodes, r.flops / 1e6, share(r.flops, total.flops),
                     r.bytes / 1e6);
  s += fmt::format("\n{:<24}{:<14}{:>8}{:>14}{:>10}{:>14}\n", "op", "family", "nodes", "MFLOP", "flops", "MB");
  for (const auto& [op, r] : sorted(byOp))
    s += fmt::format("{:<24}{:<14}{:>8}{:>14.3f}{:>10}{:>14.3f}\n", op, r.family, r.nodes, r.flops / 1e6,
                     share(r.flops, total.flops), r.bytes / 1e6);
  return s;
}

class OpStats : public passes::Pass {
 public:
  std::string_view name() const override { return "op_stats"; }
  Result<bool> run(ir::Graph& g, passes::PassContext& ctx) override {
    ctx.addReport("op_stats.txt", report(g, ctx.registry()));
    return false;
  }
};

int init(TesseraPluginHost* h) {
  plugin::Host& host = plugin::Host::from(h);
  host.addPass({"op_stats", passes::PipelinePoint::End, [] { return std::make_unique<OpStats>(); }, ""});
  return 0;
}

const TesseraPluginInfo kInfo = {TESSERA_PLUGIN_API_VERSION, "op_stats", "1.0.0",
                                 "op statistics (nodes, FLOPs and bytes by family and op) after compiling",
                                 tsr::kVersion, init};

}  // namespace

extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v1(void) { return &kInfo; }
