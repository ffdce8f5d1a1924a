// engine/inspect: what the IDE's panels read, checked against the engine computed another way.
#include <algorithm>
#include <map>
#include <set>

#include <QDir>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include "engine/inspect/graph_layout.h"
#include "engine/inspect/graph_stages.h"
#include "engine/inspect/module_tree.h"
#include "engine/inspect/new_project.h"
#include "engine/inspect/node_info.h"
#include "engine/inspect/project_edit.h"
#include "engine/inspect/profile_times.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/inspect/roofline.h"
#include "engine/inspect/runs_reader.h"
#include "engine/inspect/stage_diff.h"
#include "engine/ops/registry.h"
#include "engine/passes/fusion.h"
#include "engine/project/model_family.h"
#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/run.h"
#include "engine/train/sharding_plan.h"

using namespace tsr;

namespace {

const std::string kMini = std::string(TSR_SOURCE_DIR) + "/sample_projects/gpt2_mini";

std::string readFile(const std::string& path) {
  QFile f(QString::fromStdString(path));
  if (!f.open(QIODevice::ReadOnly)) return "";
  return f.readAll().toStdString();
}

}  // namespace

class TestInspect : public QObject {
  Q_OBJECT

 private:
  std::optional<inspect::ProjectSnapshot> m_mini;

 private slots:
  void initTestCase() {
    auto s = inspect::openProject(kMini);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    m_mini = std::move(s).value();
  }

  // Roofline points from a kernel table, against values worked out by hand: a GEMM of 2 GFLOP over 100 MB
  // (20 FLOPs/byte) in 0.1 s runs at 20 GFLOP/s; under roofs of 100 GFLOP/s and 10 GB/s its roof is
  // min(100, 10 x 20) = 100, so it is at 20%. A copy (no FLOPs) has no point; a loop of 1 FLOP/byte at 5 GFLOP/s
  // is at 50% of its 10 GFLOP/s roof.
  void rooflineFromAKernelTable() {
    inspect::ProfileTimes p;
    p.totalNs = 400'000'000;
    inspect::KernelTime gemm, copy, loop;
    gemm.name = "dot_general", gemm.kind = "gemm", gemm.nodes = {3}, gemm.count = 2, gemm.totalNs = 100'000'000;
    gemm.flops = 2e9, gemm.bytes = 1e8;
    copy.name = "copy", copy.kind = "copy", copy.count = 1, copy.totalNs = 100'000'000, copy.bytes = 1e8;
    loop.name = "fusion.1", loop.kind = "loop", loop.nodes = {5, 6}, loop.count = 1, loop.totalNs = 200'000'000;
    loop.flops = 1e9, loop.bytes = 1e9;
    p.kernels = {gemm, copy, loop};
    inspect::Roofs roofs;
    roofs.flopsPerSecond = 100e9, roofs.bytesPerSecond = 10e9;
    QCOMPARE(roofs.ridge(), 10.0);
    inspect::Roofline r = inspect::rooflineOf(p, roofs);
    QCOMPARE(r.points.size(), size_t(2));
    QCOMPARE(r.withoutFlops, 1);
    QCOMPARE(r.points[0].kernel, 0);
    QCOMPARE(r.points[0].intensity, 20.0);
    QVERIFY(std::abs(r.points[0].flopsPerSecond - 20e9) < 1);
    QVERIFY(std::abs(r.points[0].ofRoof - 0.2) < 1e-12);
    QVERIFY(std::abs(r.points[0].share - 0.25) < 1e-12);
    QCOMPARE(r.points[1].kernel, 2);
    QVERIFY(std::abs(r.points[1].ofRoof - 0.5) < 1e-12);
    QCOMPARE(r.points[1].nodes, (std::vector<ir::NodeId>{5, 6}));
    // Measured roofs are positive and meet at a positive intensity.
    inspect::Roofs measured = inspect::measureRoofs(1);
    QVERIFY2(measured.flopsPerSecond > 0 && measured.bytesPerSecond > 0, measured.how.c_str());
    QVERIFY(measured.how.find("SGEMM 1024^3 on 1 threads") == 0);
  }

  void parametersMatchModelInfo() {
    auto p = project::loadProject(kMini);
    QVERIFY(p.ok());
    auto info = train::describeModel(*p);
    QVERIFY(info.ok());
    QCOMPARE(m_mini->numParams, info->numParams);
    QCOMPARE(m_mini->paramBytes, info->bytes);
    std::set<std::string> paths;
    for (const auto& prm : m_mini->params) paths.insert(prm.path);
    QVERIFY(paths.count("wte.weight"));
    QVERIFY(paths.count("h.1.attn.c_attn.weight"));
    // n_embd 128: c_attn is [128, 384] in the Hugging Face layout.
    for (const auto& prm : m_mini->params)
      if (prm.path == "h.1.attn.c_attn.weight") QCOMPARE(prm.shape.dims(), (std::vector<int64_t>{128, 384}));
  }

  void moduleTreeGroupsEveryNode() {
    const ir::Graph& g = *m_mini->traced;
    inspect::ModuleTree tree(g, m_mini->outputPaths);
    std::set<std::string> paths;
    for (const auto& n : g.nodes()) paths.insert(n.prov.modulePath);
    for (const auto& p : paths) QVERIFY2(tree.find(p) >= 0, p.c_str());
    QCOMPARE(tree.group(0).totalNodes, static_cast<int>(g.nodes().size()));
    // A transformer opens at its blocks: "h" is expanded by default.
    QVERIFY(tree.defaultExpanded().count("h"));
    // The root level: every top-level module is one group item.
    std::set<std::string> top;
    for (const auto& p : paths)
      if (!p.empty()) top.insert(p.substr(0, p.find('.')));
    // Nodes without a module path are grouped by the output they feed.
    bool unnamed = paths.count("") > 0;
    QVERIFY(unnamed);
    top.insert("update");
    if (tree.find("(shared)") >= 0) top.insert("(shared)");
    if (tree.find("(unused)") >= 0) top.insert("(unused)");
    QVERIFY(tree.group(0).nodes.empty());
    inspect::Level root = inspect::buildLevel(tree, g, 0, tree.defaultExpanded());
    std::set<std::string> shown;
    for (const auto& item : root.items)
      if (item.kind == inspect::LevelItem::Kind::Group && item.group != tree.inputsGroup()) shown.insert(tree.group(item.group).path);
    QCOMPARE(shown, top);
  }

  void largeGroupsShowInParts() {
    // The unnamed nodes of the training step all sit in the root when no output names are given, but for the
    // constants an op with a module path reads (they sit with that op).
    const ir::Graph& g = *m_mini->traced;
    inspect::ModuleTree tree(g);
    std::set<ir::NodeId> readInModule;
    for (const auto& n : g.nodes())
      if (!n.prov.modulePath.empty())
        for (ir::ValueId v : n.operands) readInModule.insert(g.value(v).producer);
    int unnamed = 0;
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const ir::Node& n = g.nodes()[i];
      unnamed += n.prov.modulePath.empty() && !(n.op == ir::OpCode::Constant && readInModule.count(static_cast<ir::NodeId>(i)));
    }
    QVERIFY(unnamed > inspect::ModuleTree::kMaxDirectNodes);
    QVERIFY(tree.group(0).nodes.empty());
    int inParts = 0;
    for (const auto& grp : tree.groups()) {
      QVERIFY(static_cast<int>(grp.nodes.size()) <= inspect::ModuleTree::kMaxDirectNodes);
      if (grp.parent == 0 && grp.name.rfind("ops ", 0) == 0) inParts += grp.totalNodes;
    }
    QCOMPARE(inParts, unnamed);
    for (size_t i = 0; i < g.nodes().size(); ++i) QVERIFY(tree.contains(0, tree.groupOfNode(static_cast<int>(i))));
  }

  void searchCountsMatchTheGraph() {
    inspect::Stage st = inspect::makeStage("traced", m_mini->traced);
    auto hits = inspect::searchNodes(st, "^dot_general$");
    QVERIFY(hits.ok());
    QCOMPARE(static_cast<int>(hits->size()), m_mini->traced->count(ir::OpCode::DotGeneral));
    QVERIFY(!inspect::searchNodes(st, "(unclosed").ok());
  }

  void nodeLinesPointAtTheNode() {
    inspect::Stage st = inspect::makeStage("traced", m_mini->traced);
    auto names = inspect::valueNames(*st.graph);
    QStringList lines = QString::fromStdString(st.text).split('\n');
    for (size_t i = 0; i < st.graph->nodes().size(); i += 37) {
      const auto& n = st.graph->nodes()[i];
      QString line = lines[st.nodeLines[i]].trimmed();
      QString expect = n.results.empty() ? QString::fromStdString(inspect::opName(*st.graph, static_cast<int>(i)))
                                         : QString::fromStdString(names[static_cast<size_t>(n.results[0])]);
      QVERIFY2(line.startsWith(expect), qPrintable(line));
      QCOMPARE(inspect::nodeAtLine(st, st.nodeLines[i]), static_cast<int>(i));
    }
  }

  void describeNodeNamesProducersAndConsumers() {
    inspect::Stage st = inspect::makeStage("traced", m_mini->traced);
    const ir::Graph& g = *st.graph;
    int dot = -1;
    for (size_t i = 0; i < g.nodes().size() && dot < 0; ++i)
      if (g.nodes()[i].op == ir::OpCode::DotGeneral) dot = static_cast<int>(i);
    QVERIFY(dot >= 0);
    inspect::NodeInfo info = inspect::describeNode(st, dot);
    QCOMPARE(info.op, std::string("dot_general"));
    QCOMPARE(info.operands.size(), size_t(2));
    QVERIFY(info.flops > 0);
    QVERIFY(info.attrs.find("lhs_contracting") != std::string::npos);
    QCOMPARE(info.modulePath, g.nodes()[static_cast<size_t>(dot)].prov.modulePath);
    for (const auto& c : info.consumers)
      if (c.node >= 0) {
        const auto& ops = g.nodes()[static_cast<size_t>(c.node)].operands;
        QVERIFY(std::find(ops.begin(), ops.end(), c.value) != ops.end());
      }
  }

  void compileStagesKeepsChangedPasses() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    QVERIFY(stages->size() >= 2);
    QCOMPARE((*stages)[0].name, std::string("traced"));
    QVERIFY(stages->back().graph->nodes().size() < m_mini->traced->nodes().size());
    for (const auto& s : *stages) QCOMPARE(s.nodeLines.size(), s.graph->nodes().size());
  }

  void stageDiffMatchesNodes() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    const inspect::Stage& first = stages->front();
    const inspect::Stage& last = stages->back();
    inspect::StageDiff self = inspect::diffStages(first, first);
    QCOMPARE(self.same, static_cast<int>(first.graph->nodes().size()));
    QCOMPARE(self.added + self.removed + self.changed, 0);
    inspect::StageDiff d = inspect::diffStages(first, last);
    QCOMPARE(d.same + d.changed + d.removed, static_cast<int>(first.graph->nodes().size()));
    QCOMPARE(d.same + d.changed + d.added, static_cast<int>(last.graph->nodes().size()));
    QVERIFY(d.removed > 0);
    // A matched pair has the same op and module path.
    for (size_t i = 0; i < d.matchOfA.size(); ++i) {
      if (d.matchOfA[i] < 0) continue;
      const auto& na = first.graph->nodes()[i];
      const auto& nb = last.graph->nodes()[static_cast<size_t>(d.matchOfA[i])];
      QCOMPARE(na.op, nb.op);
      QCOMPARE(na.prov.modulePath, nb.prov.modulePath);
    }
  }

  void expandingABlockLaysOutOnlyThatBlock() {
    const ir::Graph& g = *m_mini->traced;
    inspect::ModuleTree tree(g, m_mini->outputPaths);
    inspect::LayoutCache cache;
    auto expanded = tree.defaultExpanded();
    auto first = inspect::layoutView(tree, g, expanded, cache);
    QVERIFY2(first.ok(), first.ok() ? "" : first.error().message.c_str());
    std::set<std::string> groups;
    for (const auto& b : first->boxes)
      if (b.item.kind == inspect::LevelItem::Kind::Group) groups.insert(tree.group(b.item.group).path);
    QVERIFY(groups.count("h.0") && groups.count("h.1"));
    expanded.insert("h.0");
    auto second = inspect::layoutView(tree, g, expanded, cache);
    QVERIFY(second.ok());
    QCOMPARE(std::set<std::string>(second->laidOut.begin(), second->laidOut.end()), (std::set<std::string>{"", "h", "h.0"}));
    // Every box of h.0's level lies inside h.0's box.
    const inspect::ItemBox* block = nullptr;
    for (const auto& b : second->boxes)
      if (b.item.key == "g:h.0") block = &b;
    QVERIFY(block && block->item.expanded);
    int inside = 0;
    for (const auto& b : second->boxes) {
      if (b.item.kind != inspect::LevelItem::Kind::Node || g.nodes()[static_cast<size_t>(b.item.node)].prov.modulePath != "h.0") continue;
      QVERIFY(b.x >= block->x && b.y >= block->y && b.x + b.w <= block->x + block->w + 0.5 && b.y + b.h <= block->y + block->h + 0.5);
      ++inside;
    }
    int direct = 0;
    for (const auto& n : g.nodes()) direct += n.prov.modulePath == "h.0";
    QCOMPARE(inside, direct);
  }

  // Expand All lays out every level, but runs Graphviz once per distinct level shape: the second block's levels
  // have the first's shapes and reuse their geometry, which is what dot gives that level laid out on its own.
  void levelsOfOneShapeRunGraphvizOnce() {
    const ir::Graph& g = *m_mini->traced;
    inspect::ModuleTree tree(g, m_mini->outputPaths);
    std::set<std::string> all;
    for (const auto& grp : tree.groups()) all.insert(grp.path);
    inspect::LayoutCache cache;
    auto view = inspect::layoutView(tree, g, all, cache);
    QVERIFY2(view.ok(), view.ok() ? "" : view.error().message.c_str());
    auto under = [](const std::vector<std::string>& paths, const std::string& prefix) {
      return std::count_if(paths.begin(), paths.end(), [&](const std::string& p) { return p.rfind(prefix, 0) == 0; });
    };
    QCOMPARE(view->laidOut.size(), all.size());
    QVERIFY(under(view->laidOut, "h.1") >= 5);  // h.1, its norms, attention and MLP
    QCOMPARE(under(view->ranGraphviz, "h.1"), std::ptrdiff_t(0));
    // In the first block, the second layer norm has the first one's shape.
    auto ran = [&](const std::string& path) {
      return std::find(view->ranGraphviz.begin(), view->ranGraphviz.end(), path) != view->ranGraphviz.end();
    };
    QVERIFY(ran("h.0") && ran("h.0.ln_1") && ran("h.0.attn") && ran("h.0.mlp"));
    QVERIFY(!ran("h.0.ln_2"));
    QVERIFY(view->ranGraphviz.size() < view->laidOut.size());
    // The reused geometry: h.1.attn's boxes sit where h.0.attn's do in their group, and where dot puts them
    // when h.1.attn is laid out first, in a cache of its own.
    auto relative = [&](const inspect::ViewLayout& v, const std::string& group) {
      std::vector<std::pair<double, double>> out;
      const inspect::ItemBox* frame = nullptr;
      for (const auto& b : v.boxes)
        if (b.item.key == "g:" + group) frame = &b;
      if (!frame) return out;
      for (const auto& b : v.boxes)
        if (b.item.kind == inspect::LevelItem::Kind::Node && tree.group(tree.groupOfNode(b.item.node)).path == group)
          out.push_back({b.x - frame->x, b.y - frame->y});
      return out;
    };
    auto shared = relative(*view, "h.1.attn");
    QVERIFY(shared.size() > 20);
    QCOMPARE(shared, relative(*view, "h.0.attn"));
    inspect::LayoutCache fresh;
    auto alone = inspect::layoutView(tree, g, {"", "h", "h.1", "h.1.attn"}, fresh);
    QVERIFY(alone.ok());
    QVERIFY(std::find(alone->ranGraphviz.begin(), alone->ranGraphviz.end(), "h.1.attn") != alone->ranGraphviz.end());
    QCOMPARE(relative(*alone, "h.1.attn"), shared);
  }

  // A level's edges are those a walk over the whole graph finds: the values flowing between its items.
  void levelEdgesMatchAWalkOverTheWholeGraph() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    for (const inspect::Stage* st : {&stages->front(), &stages->back()}) {
      const ir::Graph& g = *st->graph;
      inspect::ModuleTree tree(g, m_mini->outputPaths, st->fusion);
      std::set<std::string> all;
      for (const auto& grp : tree.groups()) all.insert(grp.path);
      for (size_t grp = 0; grp < tree.groups().size(); ++grp) {
        inspect::Level level = inspect::buildLevel(tree, g, static_cast<int>(grp), all);
        // The item of each node and graph input at this level, by walking up from its group.
        std::map<std::string, int> itemOfKey;
        for (size_t i = 0; i < level.items.size(); ++i) itemOfKey[level.items[i].key] = static_cast<int>(i);
        auto itemOfGroupBelow = [&](int x) {
          while (x >= 0 && tree.group(x).parent != static_cast<int>(grp)) x = tree.group(x).parent;
          return x < 0 ? -1 : itemOfKey.at("g:" + tree.group(x).path);
        };
        auto itemOfNode = [&](ir::NodeId n) {
          auto direct = itemOfKey.find("n:" + std::to_string(n));
          return direct != itemOfKey.end() ? direct->second : itemOfGroupBelow(tree.groupOfNode(n));
        };
        auto itemOfValue = [&](ir::ValueId v) {
          ir::NodeId p = g.value(v).producer;
          if (p != ir::kNone) return itemOfNode(p);
          if (!tree.contains(static_cast<int>(grp), tree.inputsGroup())) return -1;
          auto in = itemOfKey.find("i:" + std::to_string(v));
          return in != itemOfKey.end() ? in->second : itemOfGroupBelow(tree.inputsGroup());
        };
        std::map<std::pair<int, int>, int> want;
        for (size_t n = 0; n < g.nodes().size(); ++n) {
          int to = itemOfNode(static_cast<ir::NodeId>(n));
          if (to < 0) continue;
          for (ir::ValueId v : g.nodes()[n].operands) {
            int from = itemOfValue(v);
            if (from >= 0 && from != to) ++want[{from, to}];
          }
        }
        std::map<std::pair<int, int>, int> got;
        for (const auto& e : level.edges) got[{e.from, e.to}] = e.count;
        QVERIFY2(got == want, tree.group(static_cast<int>(grp)).path.c_str());
      }
    }
  }

  void fusionStageCarriesThePlan() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    const inspect::Stage& fs = stages->back();
    QVERIFY2(fs.name.find("fusion") != std::string::npos, fs.name.c_str());
    QVERIFY(fs.fusion && fs.kernels);
    QVERIFY2(fs.kernels->error.empty(), fs.kernels->error.c_str());
    QCOMPARE(fs.fusion->groupOfNode.size(), fs.graph->nodes().size());
    // The stages before it carry no plan; the fusion stage is the graph the cleanup left.
    for (size_t i = 0; i + 1 < stages->size(); ++i) QVERIFY(!(*stages)[i].fusion);
    QCOMPARE(fs.text, (*stages)[stages->size() - 2].text);
    // Every launch the backend compiled maps back to a plan group.
    int launches = 0;
    for (int k : fs.kernels->kernelOfGroup) launches += k >= 0;
    QCOMPARE(launches, static_cast<int>(fs.kernels->kernels.size()));
    QVERIFY(fs.kernels->memory.arenaBytes > 0);
  }

  void kernelsAreDrawnAsClusters() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    const inspect::Stage& fs = stages->back();
    const ir::Graph& g = *fs.graph;
    // Independently: plan the same graph again; each kernel of several ops must be drawn once.
    auto plan = passes::planFusion(g, ops::registry());
    QVERIFY(plan.ok());
    std::set<std::string> multi;
    for (const auto& k : plan->groups)
      if (k.nodes.size() > 1) multi.insert(k.name);
    QVERIFY(multi.size() > 10);
    inspect::ModuleTree tree(g, m_mini->outputPaths, fs.fusion);
    // A kernel's members sit in one group (one level), even where a group shows its nodes in parts.
    for (const auto& k : fs.fusion->groups)
      for (ir::NodeId m : k.nodes) QCOMPARE(tree.groupOfNode(m), tree.groupOfNode(k.nodes.front()));
    std::set<std::string> all;
    for (const auto& grp : tree.groups()) all.insert(grp.path);
    inspect::LayoutCache cache;
    auto view = inspect::layoutView(tree, g, all, cache);
    QVERIFY2(view.ok(), view.ok() ? "" : view.error().message.c_str());
    std::map<int, const inspect::ItemBox*> clusterBox;
    std::set<std::string> drawn;
    int clusters = 0;
    for (const auto& b : view->boxes) {
      if (b.item.kind != inspect::LevelItem::Kind::Cluster) continue;
      ++clusters;
      drawn.insert(b.label.substr(0, b.label.find(' ')));
      clusterBox[b.item.cluster] = &b;
    }
    QCOMPARE(clusters, static_cast<int>(multi.size()));
    QCOMPARE(drawn, multi);
    // Each member's box lies inside its kernel's cluster, and every member is shown.
    std::map<int, int> shownMembers;
    for (const auto& b : view->boxes) {
      if (b.item.kind != inspect::LevelItem::Kind::Node || b.item.cluster < 0) continue;
      const inspect::ItemBox* c = clusterBox.at(b.item.cluster);
      QVERIFY(b.x >= c->x - 0.5 && b.y >= c->y - 0.5 && b.x + b.w <= c->x + c->w + 0.5 && b.y + b.h <= c->y + c->h + 0.5);
      ++shownMembers[b.item.cluster];
    }
    for (const auto& [k, n] : shownMembers) QCOMPARE(static_cast<size_t>(n), fs.fusion->groups[static_cast<size_t>(k)].nodes.size());
    // Without a plan the same graph shows no clusters.
    inspect::ModuleTree plain(g, m_mini->outputPaths);
    inspect::LayoutCache cache2;
    auto flat = inspect::layoutView(plain, g, all, cache2);
    QVERIFY(flat.ok());
    for (const auto& b : flat->boxes) QVERIFY(b.item.kind != inspect::LevelItem::Kind::Cluster);
  }

  void inspectorShowsTheKernelAndItsDecisions() {
    auto stages = inspect::compileStages(m_mini->traced);
    QVERIFY(stages.ok());
    const inspect::Stage& fs = stages->back();
    // The decisions, recorded again by planning the stage's graph with a log of our own.
    passes::PassContext ctx(ops::registry());
    auto plan = passes::planFusion(*fs.graph, ops::registry(), &ctx);
    QVERIFY(plan.ok());
    const passes::Decision* fused = nullptr;
    for (const auto& d : ctx.log().all())
      if (!fused && d.reason == passes::FusionReason::Fused && d.message.rfind("fused into ", 0) == 0) fused = &d;
    QVERIFY(fused);
    ir::NodeId node = fused->nodes.front();
    inspect::NodeInfo info = inspect::describeNode(fs, node);
    QVERIFY(info.kernel);
    const passes::FusionGroup& k = plan->groups[static_cast<size_t>(plan->groupOfNode[static_cast<size_t>(node)])];
    QCOMPARE(info.kernel->name, k.name);
    QCOMPARE(info.kernel->members, static_cast<int>(k.nodes.size()));
    QCOMPARE(info.kernel->kind, std::string(passes::groupKindName(k.kind)));
    QVERIFY(!info.kernel->reason.empty());
    QVERIFY(info.kernel->launch >= 0);
    // Its native code: one function over AVX2 vectors with an instruction per member op (loops, reductions
    // and gemm epilogues have one; other kernels show none).
    if (k.kind == passes::GroupKind::Loop || k.kind == passes::GroupKind::Reduction) {
      QVERIFY2(info.kernel->native.find("extern \"C\" void tsr_") != std::string::npos, info.kernel->native.c_str());
      QVERIFY(info.kernel->native.find("__m256") != std::string::npos);
    }
    for (size_t n = 0; n < plan->groups.size(); ++n)
      if (plan->groups[n].kind == passes::GroupKind::Opaque && !plan->groups[n].nodes.empty()) {
        inspect::NodeInfo opaque = inspect::describeNode(fs, plan->groups[n].nodes.front());
        QVERIFY(opaque.kernel && opaque.kernel->native.empty());
        break;
      }
    auto has = [&](const std::string& text) {
      return std::any_of(info.decisions.begin(), info.decisions.end(), [&](const std::string& d) { return d.find(text) != std::string::npos; });
    };
    QVERIFY2(has(fused->message), fused->message.c_str());
    for (const auto& d : ctx.log().all())
      if (std::find(d.nodes.begin(), d.nodes.end(), node) != d.nodes.end()) QVERIFY2(has(d.message), d.message.c_str());
    // GPT-2's q, k and v slices launch nothing: the attention reads them in place, as the inspector says, and
    // their results are views of the projection's rows (3C apart).
    int rowViews = 0;
    for (size_t n = 0; n < plan->groups.size(); ++n) {
      const passes::FusionGroup& grp = plan->groups[n];
      const ir::Node& nd = fs.graph->nodes()[static_cast<size_t>(grp.nodes[0])];
      if (grp.kind != passes::GroupKind::Opaque || nd.op != ir::OpCode::Slice) continue;
      inspect::NodeInfo slice = inspect::describeNode(fs, grp.nodes[0]);
      QVERIFY(slice.kernel);
      if (slice.kernel->launch >= 0) continue;
      ++rowViews;
      QVERIFY2(slice.kernel->noLaunch.find("row view") != std::string::npos, slice.kernel->noLaunch.c_str());
      QVERIFY(!slice.kernel->outputs.empty());
      const std::string& where = slice.kernel->outputs[0].where;
      const int64_t width = fs.graph->aval(nd.results[0]).shape.dims().back();  // C of a [B, T, 3C] projection
      const std::string apart = "rows " + std::to_string(3 * width) + " elements apart";
      QVERIFY2(where.rfind("row view of %", 0) == 0 && where.find(apart) != std::string::npos, where.c_str());
    }
    QVERIFY(rowViews >= 3);
    // A view read through has no kernel of its own.
    for (size_t n = 0; n < plan->groupOfNode.size(); ++n)
      if (plan->groupOfNode[n] < 0) {
        inspect::NodeInfo view = inspect::describeNode(fs, static_cast<ir::NodeId>(n));
        QVERIFY(view.readThrough && !view.kernel);
        break;
      }
  }

  void inspectorShowsShardingsAtEveryStage() {
    // The tutorial's 4x2 layout: layer 0 column-parallel over 'model', the batch over 'data'. Worked by hand:
    // the first matmul reads the batch P('data', None) and the weight P(None, 'model'), so its result is
    // P('data', 'model'); the weight is an annotation from its rule; the result comes forward from the matmul.
    auto project = inspect::openProject(std::string(TSR_SOURCE_DIR) + "/sample_projects/mlp_sharding");
    QVERIFY2(project.ok(), project.ok() ? "" : project.error().message.c_str());
    train::ShardPlanOptions options;
    options.compile = false;
    auto plan = train::planStepSharding(project->project, options);
    QVERIFY2(plan.ok(), plan.ok() ? "" : plan.error().message.c_str());
    auto stages = inspect::compileStages(project->traced);
    QVERIFY(stages.ok());
    const size_t w0 = static_cast<size_t>(
        std::find(project->inputPaths.begin(), project->inputPaths.end(), "params.layers.0.weight") -
        project->inputPaths.begin());
    QVERIFY(w0 < project->inputPaths.size());
    for (const inspect::Stage* stage : {&stages->front(), &stages->back()}) {
      auto sp = inspect::stageSharding(*stage, *plan);
      QVERIFY2(sp.ok(), sp.ok() ? "" : sp.error().message.c_str());
      const ir::Graph& g = *stage->graph;
      const ir::ValueId weight = g.inputs()[w0];
      ir::NodeId matmul = ir::kNone;
      for (size_t n = 0; n < g.nodes().size() && matmul == ir::kNone; ++n)
        if (g.nodes()[n].op == ir::OpCode::DotGeneral && g.nodes()[n].operands[1] == weight)
          matmul = static_cast<ir::NodeId>(n);
      QVERIFY2(matmul != ir::kNone, stage->name.c_str());
      inspect::NodeInfo info = inspect::describeNode(*stage, matmul, &*sp);
      QCOMPARE(info.operands[1].sharding, std::string("P(None, 'model')"));
      QVERIFY2(info.operands[1].shardingOrigin.find("annotation: argument params.layers.0.weight") == 0,
               info.operands[1].shardingOrigin.c_str());
      QCOMPARE(info.operands[0].sharding, std::string("P('data', None)"));
      QCOMPARE(info.results[0].sharding, std::string("P('data', 'model')"));
      QVERIFY2(info.results[0].shardingOrigin.find("propagated forward from dot_general") == 0,
               info.results[0].shardingOrigin.c_str());
      // Without a plan the fields stay empty.
      QVERIFY(inspect::describeNode(*stage, matmul).results[0].sharding.empty());
    }
    // A plan of another step does not apply: the inputs differ.
    auto other = inspect::stageSharding(inspect::compileStages(m_mini->traced)->front(), *plan);
    QVERIFY(!other.ok());
  }

  void projectEditKeepsComments() {
    std::string text = readFile(kMini + "/project.toml");
    QVERIFY(!text.empty());
    std::string edited = inspect::setFieldValue(text, "model", "block_size", "128");
    QVERIFY(edited.find("block_size = 128    # n_positions") != std::string::npos);
    edited = inspect::setFieldValue(edited, "train", "checkpoint_every", "100");
    edited = inspect::setFieldValue(edited, "train", "momentum", "0.5");  // absent: added to [train]
    edited = inspect::setFieldValue(edited, "precision", "compute", "\"bf16\"");
    auto p = project::parseProject(edited, "project.toml", kMini);
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    QCOMPARE(p->model.config.integer("block_size"), int64_t(128));
    QCOMPARE(p->train.checkpointEvery, int64_t(100));
    QCOMPARE(p->train.momentum, 0.5);
    QCOMPARE(p->precision, std::string("bf16"));
    // Every comment line survives.
    size_t comments = 0, kept = 0;
    for (const QString& line : QString::fromStdString(text).split('\n'))
      if (line.contains('#')) {
        ++comments;
        kept += QString::fromStdString(edited).contains(line.mid(line.indexOf('#')));
      }
    QCOMPARE(kept, comments);
    QCOMPARE(inspect::fieldValue(edited, "data", "path"), std::string("data/corpus.txt"));
  }

  void projectEditRejectsBadValues() {
    QVERIFY(!inspect::tomlLiteral(inspect::FieldKind::Int, "12x").ok());
    QVERIFY(!inspect::tomlLiteral(inspect::FieldKind::Float, "fast").ok());
    QCOMPARE(*inspect::tomlLiteral(inspect::FieldKind::StringList, "data, model"), std::string("[\"data\", \"model\"]"));
    std::string text = readFile(kMini + "/project.toml");
    std::string bad = inspect::setFieldValue(text, "train", "lr", "-1");
    Status st = inspect::validateProjectText(bad, "project.toml", kMini);
    QVERIFY(!st.ok());
    int line = 0;
    QStringList lines = QString::fromStdString(bad).split('\n');
    for (int i = 0; i < lines.size(); ++i)
      if (lines[i].startsWith("lr = -1")) line = i + 1;
    QVERIFY2(QString::fromStdString(st.error().message).contains(QString("project.toml:%1").arg(line)), st.error().message.c_str());
  }

  // The location an error of the project parser names, as the IDE's editor marks it.
  void errorLocationsNameFileAndLine() {
    std::string text = readFile(kMini + "/project.toml");
    std::string bad = inspect::setFieldValue(text, "train", "lr", "-1");
    Status st = inspect::validateProjectText(bad, "/p/gpt2/project.toml", kMini);
    QVERIFY(!st.ok());
    inspect::TextLocation at = inspect::errorLocation(st.error().message);
    QCOMPARE(at.file, std::string("/p/gpt2/project.toml"));
    QStringList lines = QString::fromStdString(bad).split('\n');
    QCOMPARE(at.line, static_cast<int>(lines.indexOf(QRegularExpression("^lr = -1.*"))) + 1);
    // A TOML syntax error carries a column; a path may hold colons; a message may name no line at all.
    auto syntax = inspect::errorLocation("C:/a:b/project.toml:12:7: expected a value");
    QCOMPARE(syntax.file, std::string("C:/a:b/project.toml"));
    QCOMPARE(syntax.line, 12);
    QCOMPARE(syntax.column, 7);
    QCOMPARE(inspect::errorLocation("/p/project.toml: no such file").line, 0);
    QCOMPARE(inspect::errorLocation("cannot read the run store").line, 0);
  }

  // File › New Project from Template, for every sample: copied into a folder that does not exist yet, each
  // file the template's [data] reads resolves from the copy (into its own folder) whenever it resolves from the
  // template, and the copy opens with the project parser where its family is registered, its data there.
  void newProjectFromEverySampleResolvesItsData() {
    const QDir samples(QString::fromStdString(kMini)+ "/..");
    QTemporaryDir tmp;
    int copied = 0;
    for (const QString& name : samples.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
      const QString from = samples.absoluteFilePath(name);
      if (!QFileInfo::exists(from + "/project.toml")) continue;
      const QString to = tmp.filePath("new/" + name + "/project");  // neither folder exists yet
      auto made = inspect::newProjectFromTemplate(from.toStdString(), to.toStdString());
      QVERIFY2(made.ok(), made.ok() ? "" : made.error().message.c_str());
      QCOMPARE(QFileInfo(QString::fromStdString(*made)).canonicalFilePath(), QFileInfo(to).canonicalFilePath());
      ++copied;
      const std::string text = readFile(to.toStdString() + "/project.toml");
      const std::string original = readFile(from.toStdString() + "/project.toml");
      for (const char* key : {"path", "encoder_json", "vocab_bpe"}) {
        QString was = QString::fromStdString(inspect::fieldValue(original, "data", key));
        QString now = QString::fromStdString(inspect::fieldValue(text, "data", key));
        if (was.isEmpty()) {
          QVERIFY(now.isEmpty());
          continue;
        }
        QFileInfo source(QDir(from).filePath(was)), copy(QDir(to).filePath(now));
        QVERIFY2(!copy.absoluteFilePath().contains("/../"), qPrintable(name + ": " + now));
        QVERIFY2(QDir::cleanPath(copy.absoluteFilePath()).startsWith(QFileInfo(to).canonicalFilePath() + "/"),
                 qPrintable(name + ": " + now));
        if (!source.exists()) continue;  // gpt2_124m's corpus and tokenizer: not shipped, not asked of the copy
        QVERIFY2(copy.exists(), qPrintable(name + ": " + now));
        QCOMPARE(readFile(copy.filePath().toStdString()), readFile(source.filePath().toStdString()));
      }
      // Nothing of a run, and the template's own plugins/ folder, if it has one.
      QVERIFY(!QFileInfo::exists(to + "/runs.db") && !QFileInfo::exists(to + "/checkpoints"));
      if (QFileInfo(from + "/plugins").isDir()) QVERIFY(QFileInfo(to + "/plugins").isDir());
      if (!project::findModelFamily(inspect::fieldValue(text, "model", "family"))) continue;  // a plugin's family
      auto p = project::loadProject(to.toStdString());
      QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
      if (!p->data.path.empty() && QFileInfo::exists(QDir(from).filePath(QString::fromStdString(
                                                         inspect::fieldValue(original, "data", "path")))))
        QVERIFY2(QFileInfo::exists(QString::fromStdString(p->resolve(p->data.path))), p->data.path.c_str());
    }
    QVERIFY(copied >= 7);
    // A folder that already holds a project is not overwritten.
    auto again = inspect::newProjectFromTemplate(kMini, tmp.filePath("new/gpt2_mini/project").toStdString());
    QVERIFY(!again.ok());
    QVERIFY2(QString::fromStdString(again.error().message).contains("already holds a project.toml"), again.error().message.c_str());
  }

  void runsReaderReadsAStore() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    QVERIFY(!inspect::RunsReader::open(path).ok());  // never creates one
    {
      auto s = store::RunStore::open(path);
      QVERIFY(s.ok());
      auto run = s->createRun("a", "p", "");
      QVERIFY(run.ok());
      QVERIFY(s->setParams(*run, {{"lr", "0.1"}}).ok());
      for (int i = 0; i < 5; ++i) QVERIFY(s->logMetrics(*run, i, {{"loss", 5.0 - i}, {"lr", 0.1}}).ok());
      QVERIFY(s->logMetrics(*run, 5, {{"loss", 2.5}}).ok());
    }
    auto r = inspect::RunsReader::open(path);
    QVERIFY(r.ok());
    auto rows = r->runs();
    QVERIFY(rows.ok());
    QCOMPARE(rows->size(), size_t(1));
    const auto& loss = rows->front().metrics.at("loss");
    QCOMPARE(loss.points, int64_t(6));
    QCOMPARE(loss.latest, 2.5);
    QCOMPARE(loss.min, 1.0);
    QCOMPARE(loss.max, 5.0);
    QCOMPARE(rows->front().params.at("lr"), std::string("0.1"));
    auto tail = r->points(rows->front().info.id, "loss", 3);
    QVERIFY(tail.ok());
    QCOMPARE(tail->size(), size_t(2));
    auto params = r->params(rows->front().info.id);
    QVERIFY(params.ok());
    QCOMPARE(params->at("lr"), std::string("0.1"));
    // Columns: appended in step order.
    inspect::MetricColumns columns;
    columns.append(*r->points(rows->front().info.id, "loss"));
    columns.append(*tail);
    QCOMPARE(columns.size(), size_t(8));
    QCOMPARE(columns.steps[6], int64_t(4));
    QCOMPARE(columns.values[7], 2.5);
  }

  // Tokens per step: batch_size * seq_len (* accumulate) of a language model's run, and why there is none otherwise.
  void tokensPerStepOfARun() {
    std::map<std::string, std::string> gpt2 = {{"model.family", "gpt2"}, {"train.batch_size", "8"}, {"train.seq_len", "64"}};
    auto t = inspect::tokensPerStep(gpt2);
    QVERIFY(t.ok());
    QCOMPARE(*t, 512.0);
    // Gradient accumulation: K micro-batches of batch_size a step.
    auto accumulated = gpt2;
    accumulated["train.accumulate"] = "4";
    QCOMPARE(*inspect::tokensPerStep(accumulated), 2048.0);
    auto mlp = inspect::tokensPerStep({{"model.family", "mlp"}, {"train.batch_size", "8"}, {"train.seq_len", "64"}});
    QVERIFY(!mlp.ok());
    QVERIFY2(mlp.error().message.find("not a language model") != std::string::npos, mlp.error().message.c_str());
    gpt2.erase("train.seq_len");
    QVERIFY(!inspect::tokensPerStep(gpt2).ok());
    gpt2["train.seq_len"] = "64x";
    QVERIFY(!inspect::tokensPerStep(gpt2).ok());
    QVERIFY(!inspect::tokensPerStep({{"model.family", "no_such_family"}, {"train.batch_size", "8"}, {"train.seq_len", "64"}}).ok());
    QVERIFY(!inspect::tokensPerStep({}).ok());
  }

  // A run that `tessera train` recorded has what tokensPerStep reads: gpt2_mini with batch 2, seq_len 64 (its
  // [train] value) and 3 micro-batches a step trains on 2 * 64 * 3 = 384 tokens a step.
  void tokensPerStepOfATrainedRun() {
    QTemporaryDir dir;
    QVERIFY(QFile::copy(QString::fromStdString(kMini + "/project.toml"), dir.filePath("project.toml")));
    QVERIFY(QDir().mkpath(dir.filePath("data")));
    QDir data(QString::fromStdString(kMini + "/data"));
    for (const QString& f : data.entryList(QDir::Files)) QVERIFY(QFile::copy(data.filePath(f), dir.filePath("data/" + f)));
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(TSR_TESSERA_BIN, {"train", dir.path(), "--steps", "2", "--set", "train.batch_size=2", "--set",
                              "train.accumulate=3", "--set", "train.eval_every=0"});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAll().constData());
    auto r = inspect::RunsReader::open(dir.filePath("runs.db").toStdString());
    QVERIFY(r.ok());
    auto params = r->params(1);
    QVERIFY(params.ok());
    auto tokens = inspect::tokensPerStep(*params);
    QVERIFY2(tokens.ok(), tokens.ok() ? "" : tokens.error().message.c_str());
    QCOMPARE(*tokens, 384.0);
  }

  // `tessera profile` on a copy of gpt2_mini; the per-node times add up to the store's kernel events (read
  // here with RunStore alone), and a node's kernel time is its kernel's events.
  void profileTimesAddUpToTheKernelEvents() {
    QTemporaryDir dir;
    QVERIFY(QFile::copy(QString::fromStdString(kMini + "/project.toml"), dir.filePath("project.toml")));
    QVERIFY(QDir().mkpath(dir.filePath("data")));
    QDir data(QString::fromStdString(kMini + "/data"));
    for (const QString& f : data.entryList(QDir::Files)) QVERIFY(QFile::copy(data.filePath(f), dir.filePath("data/" + f)));
    std::string db = dir.filePath("runs.db").toStdString();
    auto project = inspect::openProject(dir.path().toStdString());
    QVERIFY(project.ok());
    auto stages = inspect::compileStages(project->traced);
    QVERIFY(stages.ok());
    const inspect::Stage& fs = stages->back();
    auto none = inspect::loadProfileTimes(db, *fs.graph);
    QVERIFY(!none.ok());
    QVERIFY(!QFileInfo::exists(dir.filePath("runs.db")));  // read only: no store created

    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(TSR_TESSERA_BIN, {"profile", dir.path(), "--steps", "2", "--quiet"});
    QVERIFY(p.waitForFinished(120000));
    QVERIFY2(p.exitCode() == 0, p.readAll().constData());

    auto t = inspect::loadProfileTimes(db, *fs.graph);
    QVERIFY2(t.ok(), t.ok() ? "" : t.error().message.c_str());
    QCOMPARE(t->steps, int64_t(2));
    // The reference: every kernel event of the profile, straight from the store.
    auto s = store::RunStore::open(db);
    QVERIFY(s.ok());
    auto profiles = s->profiles(1);
    QVERIFY(profiles.ok() && profiles->size() == 1);
    int64_t pid = profiles->front().id;
    auto events = s->kernelEvents(pid);
    auto kernels = s->profileKernels(pid);
    QVERIFY(events.ok() && kernels.ok() && !events->empty());
    int64_t eventNs = 0;
    std::map<int64_t, int64_t> nsOfFusion;
    for (const auto& e : *events) {
      eventNs += e.durationNs;
      nsOfFusion[e.fusion] += e.durationNs;
    }
    QCOMPARE(t->totalNs, eventNs);
    double nodeSum = 0;
    for (double ns : t->nodeNs) nodeSum += ns;
    QVERIFY2(std::abs(nodeSum - static_cast<double>(eventNs)) <= 1e-9 * static_cast<double>(eventNs),
             qPrintable(QString("%1 vs %2").arg(nodeSum).arg(eventNs)));
    // A fused kernel with several nodes: each member shows the kernel's events, and an equal part of them.
    const store::KernelInfo* fused = nullptr;
    for (const auto& k : *kernels)
      if (k.nodes.size() > 2 && (!fused || k.nodes.size() > fused->nodes.size())) fused = &k;
    QVERIFY(fused);
    for (int n : fused->nodes) {
      const inspect::KernelTime* kt = t->kernelOf(n);
      QVERIFY(kt);
      QCOMPARE(kt->fusion, fused->fusion);
      QCOMPARE(kt->totalNs, nsOfFusion[fused->fusion]);
      QCOMPARE(kt->count, int64_t(2));
      QVERIFY(std::abs(t->nodeNs[static_cast<size_t>(n)] * static_cast<double>(fused->nodes.size()) -
                       static_cast<double>(nsOfFusion[fused->fusion])) < 1e-6);
    }
    // The profile's kernels are the IDE's kernel table at the fusion stage.
    std::set<std::vector<int>> ide, prof;
    for (const auto& k : fs.kernels->kernels) ide.insert(std::vector<int>(k.nodes.begin(), k.nodes.end()));
    for (const auto& k : *kernels) prof.insert(k.nodes);
    QVERIFY(ide == prof);
    // Another graph (the traced one) is refused.
    auto other = inspect::loadProfileTimes(db, *stages->front().graph);
    QVERIFY(!other.ok());
    QVERIFY2(other.error().message.find("is for another graph") != std::string::npos, other.error().message.c_str());
  }

  void smoothingIsADebiasedMovingAverage() {
    std::vector<double> v = {1, 2, 3, 4};
    QCOMPARE(inspect::smooth(v, 0), v);
    // constant in, constant out (the debiasing removes the start-up bias)
    for (double x : inspect::smooth({3, 3, 3, 3}, 0.9)) QVERIFY(std::abs(x - 3) < 1e-12);
    // by hand: w = 0.5: 1, (0.25+1)/0.75, ...
    auto s = inspect::smooth(v, 0.5);
    QVERIFY(std::abs(s[1] - (0.5 * 0.5 * 1 + 0.5 * 2) / 0.75) < 1e-12);
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestInspect)
#include "test_inspect.moc"
