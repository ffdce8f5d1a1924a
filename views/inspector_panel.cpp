#include "views/inspector_panel.h"

#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

#include "engine/inspect/node_info.h"
#include "engine/inspect/project_snapshot.h"

namespace tsr::studio {

namespace {

QString esc(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }

QString flopsText(double f) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (f >= 1000 && u < 4) {
    f /= 1000;
    ++u;
  }
  return QString("%1 %2FLOP").arg(f, 0, 'f', u ? 2 : 0).arg(units[u]);
}

QString bytesText(double b) { return QString::fromStdString(inspect::formatBytes(static_cast<int64_t>(b))); }

// The kernel a node runs in: name, kind, members, why, and where its arguments live.
QString kernelHtml(const inspect::NodeKernel& k, int node) {
  QString h = "<h4>Kernel</h4><table cellspacing=4>";
  h += QString("<tr><td><b>kernel</b></td><td><code>%1</code> (%2), %3 op%4 over <code>%5</code></td></tr>")
           .arg(esc(k.name), esc(k.kind))
           .arg(k.members)
           .arg(k.members == 1 ? "" : "s")
           .arg(esc(k.shape));
  if (!k.reason.empty()) h += QString("<tr><td><b>reason</b></td><td>%1</td></tr>").arg(esc(k.reason));
  if (k.members > 1) {
    QString others;
    for (ir::NodeId m : k.nodes)
      if (m != node) others += QString(" <a href=\"node:%1\">%1</a>").arg(m);
    h += QString("<tr><td><b>members</b></td><td>nodes%1</td></tr>").arg(others);
  }
  if (k.launch >= 0)
    h += QString("<tr><td><b>CPU launch</b></td><td>%1 of %2; %3, %4 moved; arena %5 in all</td></tr>")
             .arg(k.launch + 1)
             .arg(k.launches)
             .arg(flopsText(k.flops), bytesText(k.bytes), bytesText(static_cast<double>(k.arenaBytes)));
  else if (!k.noLaunch.empty())
    h += QString("<tr><td><b>CPU launch</b></td><td>%1</td></tr>").arg(esc(k.noLaunch));
  auto args = [&](const char* title, const std::vector<inspect::KernelArg>& list) {
    QStringList rows;
    for (const auto& a : list) rows << QString("<code>%1</code> <code>%2</code> %3").arg(esc(a.name), esc(a.aval), esc(a.where));
    return QString("<tr><td><b>%1</b></td><td>%2</td></tr>").arg(title, rows.join("<br>"));
  };
  h += args("reads", k.inputs);
  h += args("writes", k.outputs);
  h += "</table>";
  if (!k.native.empty())
    h += QObject::tr("<h4>Native code</h4><p>What the CPU backend compiles for this kernel once the step is hot "
                     "(AVX2, one vector of 8 elements through every op):</p>") +
         QString("<pre style=\"font-size: small\">%1</pre>").arg(esc(k.native));
  return h;
}

// The node's kernel as the latest profile measured it: its launches over the profiled steps, per step, its
// share of all kernel time, and this node's even part of it (what the time overlay colours).
QString timeHtml(const inspect::ProfileTimes& p, int node) {
  const inspect::KernelTime* k = p.kernelOf(node);
  QString h = QObject::tr("<h4>Measured time</h4>");
  if (!k) return h + QObject::tr("<p>No kernel of its own in profile %1.</p>").arg(p.profile.id);
  auto ms = [](double ns) { return QString("%1 ms").arg(ns * 1e-6, 0, 'f', 3); };
  double total = static_cast<double>(k->totalNs);
  double steps = static_cast<double>(p.steps);
  h += "<table cellspacing=4>";
  h += QString("<tr><td><b>kernel time</b></td><td><code>%1</code>: %2 in %3 launches over %4 steps</td></tr>")
           .arg(esc(k->name), ms(total))
           .arg(k->count)
           .arg(p.steps);
  h += QString("<tr><td><b>per step</b></td><td>%1</td></tr>").arg(ms(total / steps));
  h += QString("<tr><td><b>share</b></td><td>%1% of the step's kernel time</td></tr>")
           .arg(p.totalNs > 0 ? 100.0 * total / static_cast<double>(p.totalNs) : 0.0, 0, 'f', 2);
  if (k->nodes.size() > 1)
    h += QString("<tr><td><b>this node</b></td><td>%1 a step (1/%2 of the kernel)</td></tr>")
             .arg(ms(total / steps / static_cast<double>(k->nodes.size())))
             .arg(k->nodes.size());
  h += QString("<tr><td><b>profile</b></td><td>%1 (%2)</td></tr>").arg(p.profile.id).arg(esc(p.profile.name));
  return h + "</table>";
}

}  // namespace

InspectorPanel::InspectorPanel(Session* session, QWidget* parent)
    : QWidget(parent), m_session(session), m_browser(new QTextBrowser) {
  setObjectName("inspectorPanel");
  m_browser->setOpenLinks(false);
  m_browser->setPlaceholderText(tr("Select a node in the graph or the IR text."));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(m_browser);
  connect(m_session, &Session::nodeSelected, this, &InspectorPanel::show);
  connect(m_session, &Session::pairSelected, this, &InspectorPanel::showPair);
  connect(m_session, &Session::stagesReady, this, [this] { show(m_session->selectedNode()); });
  connect(m_session, &Session::projectClosed, this, [this] {
    m_planCache = {};
    m_browser->clear();
  });
  connect(m_session, &Session::stageChanged, this, [this] {
    const auto [a, b] = m_session->selectedPair();
    if (a >= 0) showPair(a, b);
    else show(m_session->selectedNode());
  });
  connect(m_session, &Session::profileChanged, this, [this] { show(m_session->selectedNode()); });
  connect(m_session, &Session::shardingChanged, this, [this] { show(m_session->selectedNode()); });
  connect(m_browser, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == "node") m_session->selectNode(url.path().toInt());
  });
}

QString InspectorPanel::plainText() const { return m_browser->toPlainText(); }

const sharding::ShardingPlan* InspectorPanel::stagePlan(QString* error) {
  const inspect::Stage* stage = m_session->stage();
  ShardingPtr snap = m_session->sharding();
  const train::StepShardingPlan* plan = snap ? snap->plan.get() : nullptr;
  if (!stage || !plan) return nullptr;
  if (m_planCache.stage != stage || m_planCache.plan != plan) {
    m_planCache = {stage, plan, nullptr, QString()};
    auto r = inspect::stageSharding(*stage, *plan);
    if (r.ok()) m_planCache.value = std::make_shared<const sharding::ShardingPlan>(std::move(*r));
    else m_planCache.error = QString::fromStdString(r.error().message);
  }
  *error = m_planCache.error;
  return m_planCache.value.get();
}

void InspectorPanel::show(int node) {
  const inspect::Stage* stage = m_session->stage();
  if (!stage) {
    m_browser->clear();
    return;
  }
  if (node < 0) {
    showFusionSummary();
    return;
  }
  QString shardingError;
  const sharding::ShardingPlan* plan = stagePlan(&shardingError);
  inspect::NodeInfo info = inspect::describeNode(*stage, node, plan);
  // A value's sharding and why, as a cell (empty without a plan).
  auto shardCell = [plan](const inspect::ValueRef& v) {
    if (!plan) return QString();
    return QString("<td><code>%1</code><br><small>%2</small></td>").arg(esc(v.sharding), esc(v.shardingOrigin));
  };
  auto link = [&](const inspect::ValueRef& v) {
    QString who = v.node >= 0 ? QString("<a href=\"node:%1\">%2 (node %1)</a>").arg(v.node).arg(esc(v.nodeOp))
                              : esc(v.nodeOp);
    return QString("<tr><td><code>%1</code></td><td><code>%2</code></td><td>%3</td>%4</tr>")
        .arg(esc(v.name), esc(v.aval), who, shardCell(v));
  };
  QString h;
  h += QString("<h3>%1 <small>node %2 · %3</small></h3>").arg(esc(info.op)).arg(node).arg(esc(stage->name));
  h += "<table cellspacing=4>";
  h += QString("<tr><td><b>family</b></td><td>%1 (fusion: %2)</td></tr>").arg(esc(info.family), esc(info.fusionKind));
  if (!info.attrs.empty()) h += QString("<tr><td><b>attributes</b></td><td><code>%1</code></td></tr>").arg(esc(info.attrs));
  h += QString("<tr><td><b>module</b></td><td>%1</td></tr>").arg(info.modulePath.empty() ? tr("(none)") : esc(info.modulePath));
  if (!info.file.empty())
    h += QString("<tr><td><b>source</b></td><td><code>%1:%2</code></td></tr>").arg(esc(info.file)).arg(info.line);
  h += QString("<tr><td><b>cost</b></td><td>%1, %2 read, %3 written</td></tr>")
           .arg(flopsText(info.flops), esc(inspect::formatBytes(info.bytesRead)), esc(inspect::formatBytes(info.bytesWritten)));
  h += QString("<tr><td><b>IR line</b></td><td>%1</td></tr>").arg(info.textLine + 1);
  h += "</table>";
  h += "<h4>Results</h4><table cellspacing=4>";
  for (const auto& r : info.results)
    h += QString("<tr><td><code>%1</code></td><td><code>%2</code></td>%3</tr>").arg(esc(r.name), esc(r.aval), shardCell(r));
  h += "</table>";
  if (plan)
    h += tr("<p><b>sharding</b> on %1: each value's PartitionSpec and where it came from.</p>")
             .arg(esc(plan->mesh.toString()));
  else if (!shardingError.isEmpty())
    h += tr("<p><b>sharding</b>: the plan does not apply to this stage: %1</p>").arg(esc(shardingError.toStdString()));
  else
    h += tr("<p><b>sharding</b>: none planned (one device). Drop a PartitionSpec from the Sharding panel to plan one.</p>");
  h += "<h4>Operands (producers)</h4><table cellspacing=4>";
  for (const auto& v : info.operands) h += link(v);
  h += "</table><h4>Consumers</h4><table cellspacing=4>";
  for (const auto& v : info.consumers) h += link(v);
  h += "</table>";
  if (info.kernel) h += kernelHtml(*info.kernel, node);
  if (ProfilePtr p = m_session->profile(); p && m_session->profileMapsTo(*stage)) h += timeHtml(*p, node);
  if (info.readThrough)
    h += tr("<h4>Kernel</h4><p>None of its own: a view every consumer reads through (no memory traffic).</p>");
  h += "<h4>Decisions</h4>";
  if (info.decisions.empty()) h += tr("<p>No pass recorded a decision about this node at this stage.</p>");
  for (const auto& d : info.decisions) h += "<p>" + esc(d) + "</p>";
  m_browser->setHtml(h);
}

namespace {

QString nodeLink(const ir::Graph& g, int node) {
  std::string where = inspect::opName(g, node);
  const ir::Node& n = g.nodes()[static_cast<size_t>(node)];
  if (!n.prov.modulePath.empty()) where += " @ " + n.prov.modulePath;
  return QString("<a href=\"node:%1\">node %1</a> (%2)").arg(node).arg(esc(where));
}

QString kernelOf(const inspect::Stage& fs, int node) {
  const auto& groupOf = fs.fusion->groupOfNode;
  if (node < 0 || static_cast<size_t>(node) >= groupOf.size() || groupOf[static_cast<size_t>(node)] < 0)
    return QObject::tr("no kernel of its own (a view read through)");
  return esc(fs.fusion->groups[static_cast<size_t>(groupOf[static_cast<size_t>(node)])].name);
}

}  // namespace

void InspectorPanel::showPair(int a, int b) {
  const inspect::Stage* stage = m_session->stage();
  StagesPtr stages = m_session->stages();
  if (!stage || !stages) return;
  const int numNodes = static_cast<int>(stage->graph->nodes().size());
  if (a < 0 || b < 0 || a >= numNodes || b >= numNodes) return;
  QString h = tr("<h3>Fused? <small>node %1 and node %2 · %3</small></h3>").arg(a).arg(b).arg(esc(stage->name));
  const inspect::Stage* fs = inspect::fusionStageFor(*stages, *stage);
  if (!fs) {
    h += tr("<p>Fusion is planned at the fusion stage (the last): select the two nodes there to ask.</p>");
    h += "<p>" + nodeLink(*stage->graph, a) + "<br>" + nodeLink(*stage->graph, b) + "</p>";
    m_browser->setHtml(h);
    return;
  }
  const passes::FusionVerdict v = inspect::fusionVerdict(*fs, a, b);
  h += "<table cellspacing=4>";
  for (int n : {a, b})
    h += QString("<tr><td>%1</td><td>%2 %3</td></tr>").arg(nodeLink(*stage->graph, n), tr("in"), kernelOf(*fs, n));
  h += "</table>";
  h += QString("<p><b>%1</b> <code>[%2]</code>: %3</p>")
           .arg(v.fused ? tr("Fused") : tr("Not fused"), passes::fusionReasonName(v.reason), esc(v.detail));
  if (!v.hint.empty()) h += tr("<p><b>To fuse them:</b> %1</p>").arg(esc(v.hint));
  m_browser->setHtml(h);
}

void InspectorPanel::showFusionSummary() {
  const inspect::Stage* stage = m_session->stage();
  StagesPtr stages = m_session->stages();
  const inspect::Stage* fs = stage && stages ? inspect::fusionStageFor(*stages, *stage) : nullptr;
  if (!fs) {
    m_browser->setHtml(tr("<p>Select a node to see its op, attributes, provenance, cost and the decisions about "
                          "it. At the fusion stage, this place lists the costliest boundaries between kernels.</p>"));
    return;
  }
  const auto boundaries = inspect::unfusedBoundaries(*fs, 10);
  QString h = tr("<h3>Fusion: the %1 costliest boundaries</h3><p>Values one kernel writes to memory and another "
                 "reads back, by bytes moved (written and read). Ctrl+click two nodes in the graph to ask about "
                 "any pair.</p>")
                  .arg(boundaries.size());
  h += tr("<table cellspacing=4><tr><th>bytes</th><th>from</th><th>to</th><th>why not fused</th></tr>");
  for (const passes::UnfusedBoundary& b : boundaries) {
    QString why = QString("<code>[%1]</code> %2").arg(passes::fusionReasonName(b.verdict.reason), esc(b.verdict.detail));
    if (!b.verdict.hint.empty()) why += "<br><small>" + tr("to fuse them: ") + esc(b.verdict.hint) + "</small>";
    h += QString("<tr><td align=right>%1</td><td>%2<br><small>%3</small></td><td>%4<br><small>%5</small></td><td>%6</td></tr>")
             .arg(esc(inspect::formatBytes(b.bytes)), nodeLink(*fs->graph, b.producer),
                  kernelOf(*fs, b.producer), nodeLink(*fs->graph, b.consumer), kernelOf(*fs, b.consumer), why);
  }
  h += "</table>";
  m_browser->setHtml(h);
}

}  // namespace tsr::studio
