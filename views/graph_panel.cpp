#include "views/graph_panel.h"

#include <algorithm>
#include <cmath>

#include <QComboBox>
#include <QGraphicsPathItem>
#include <QGraphicsScene>
#include <QGraphicsSceneDragDropEvent>
#include <QGraphicsSceneMouseEvent>
#include <QMimeData>
#include <QGraphicsView>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPainter>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QStyleOptionGraphicsItem>
#include <QTreeWidget>
#include <QVBoxLayout>
#include <QWheelEvent>
#include <QtConcurrent>

#include "engine/inspect/node_info.h"
#include "views/graph_box_item.h"
#include "views/graph_search.h"

namespace tsr::studio {

namespace {

// Ctrl+wheel zooms; dragging pans.
class ZoomView : public QGraphicsView {
 public:
  using QGraphicsView::QGraphicsView;

 protected:
  void wheelEvent(QWheelEvent* e) override {
    if (e->modifiers() & Qt::ControlModifier) {
      double f = std::pow(1.0015, e->angleDelta().y());
      scale(f, f);
      return;
    }
    QGraphicsView::wheelEvent(e);
  }
};

QColor heat(double t) {
  t = std::clamp(t, 0.0, 1.0);
  // light yellow -> orange -> dark red
  return QColor::fromHsvF(0.16 - 0.16 * t, 0.25 + 0.7 * t, 1.0 - 0.35 * t);
}

}  // namespace

GraphPanel::GraphPanel(Session* session, QWidget* parent, bool secondary)
    : QWidget(parent),
      m_session(session),
      m_secondary(secondary),
      m_stageBox(new QComboBox),
      m_search(new GraphSearch),
      m_overlay(new QComboBox),
      m_progress(new QProgressBar),
      m_cancel(new QPushButton(tr("Cancel"))),
      m_status(new QLabel),
      m_view(new ZoomView),
      m_scene(new QGraphicsScene(this)),
      m_watcher(new QFutureWatcher<LayoutResult>(this)) {
  setObjectName("graphPanel");
  m_overlay->addItems({tr("No overlay"), tr("FLOPs"), tr("Bytes"), tr("Time (profile)")});
  m_overlay->setToolTip(tr("Colour nodes by cost (log scale); time comes from the project's latest profile"));
  m_legend = new QLabel;
  m_legend->setWordWrap(true);
  m_progress->setMaximumWidth(140);
  m_progress->setVisible(false);
  m_cancel->setVisible(false);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Stage")));
  bar->addWidget(m_stageBox, 1);
  bar->addWidget(m_search, 2);
  bar->addWidget(m_overlay);
  bar->addWidget(m_progress);
  bar->addWidget(m_cancel);
  m_view->setScene(m_scene);
  m_view->setDragMode(QGraphicsView::ScrollHandDrag);
  m_view->setRenderHints(QPainter::Antialiasing | QPainter::TextAntialiasing);
  m_view->setTransformationAnchor(QGraphicsView::AnchorUnderMouse);
  // What is centred stays centred when the view is resized (the list of matches appearing under it).
  m_view->setResizeAnchor(QGraphicsView::AnchorViewCenter);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(bar);
  // The search's list of matches sits under the graph.
  auto* column = new QSplitter(Qt::Vertical);
  column->setChildrenCollapsible(false);
  layout->addWidget(column, 1);
  m_column = column;
  if (m_secondary) {
    column->addWidget(m_view);
  } else {
    m_compareBox = new QComboBox;
    m_compareBox->setToolTip(tr("Show another stage on the left, nodes coloured added / removed / changed"));
    m_diffInfo = new QLabel;
    bar->insertWidget(2, new QLabel(tr("vs")));
    bar->insertWidget(3, m_compareBox, 1);
    auto* split = new QSplitter(Qt::Horizontal);
    m_other = new GraphPanel(session, nullptr, true);
    m_other->setVisible(false);
    split->addWidget(m_other);
    split->addWidget(m_view);
    column->addWidget(split);
    connect(m_compareBox, &QComboBox::currentIndexChanged, this, [this](int i) {
      if (!m_syncing) setCompareStage(i - 1);
    });
    connect(m_other, &GraphPanel::pinnedStageChanged, this, [this](int i) {
      QSignalBlocker block(m_compareBox);
      m_compareBox->setCurrentIndex(i + 1);
      updateDiff();
    });
  }
  column->addWidget(m_search->results());
  column->setStretchFactor(0, 4);
  column->setStretchFactor(1, 1);
  auto* foot = new QHBoxLayout;
  foot->addWidget(m_status, 1);
  foot->addWidget(m_legend);
  if (m_diffInfo) foot->addWidget(m_diffInfo);
  layout->addLayout(foot);

  connect(m_session, &Session::stagesReady, this, &GraphPanel::onStagesReady);
  if (!m_secondary) {
    connect(m_session, &Session::stageChanged, this, &GraphPanel::onStageChanged);
    connect(m_session, &Session::nodeSelected, this, &GraphPanel::onNodeSelected);
  }
  connect(m_session, &Session::projectOpening, this, [this] {
    m_expanded.clear();
    m_states.clear();
    m_search->setMatches({});
    m_hits.clear();
    m_diff.clear();
    m_diffResult.reset();
    m_pinned = 0;
  });
  connect(m_session, &Session::projectClosed, this, &GraphPanel::onProjectClosed);
  connect(m_stageBox, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (m_syncing) return;
    if (m_secondary) {
      setPinnedStage(i);
    } else {
      m_session->setCurrentStage(i);
    }
  });
  connect(m_search, &GraphSearch::patternEdited, this, &GraphPanel::search);
  connect(m_search, &GraphSearch::matchChosen, this, &GraphPanel::showMatch);
  connect(m_overlay, &QComboBox::currentIndexChanged, this, &GraphPanel::applyDecorations);
  connect(m_session, &Session::profileChanged, this, &GraphPanel::applyDecorations);
  connect(m_session, &Session::shardingChanged, this, &GraphPanel::applySharding);
  connect(m_cancel, &QPushButton::clicked, this, [this] {
    if (m_cancelFlag) m_cancelFlag->store(true);
  });
  connect(m_watcher, &QFutureWatcherBase::finished, this, &GraphPanel::onLayoutDone);
  connect(m_scene, &QGraphicsScene::selectionChanged, this, &GraphPanel::onSceneSelection);
}

GraphPanel::~GraphPanel() {
  // The scene, a child, is deleted after this body: clearing it deselects its items, and the selection signal
  // must not reach this half-destroyed panel (nor the session, which the window may have deleted already).
  m_scene->disconnect(this);
  if (m_cancelFlag) m_cancelFlag->store(true);
  m_watcher->waitForFinished();
}

void GraphPanel::onStagesReady() {
  m_stages = m_session->stages();
  // The trees and layout caches of graphs that are gone (a compile replaces all but the traced stage): a new
  // graph may be allocated where an old one was, and must not find its tree.
  for (auto it = m_states.begin(); it != m_states.end();) {
    bool live = it->first == m_layoutGraph.get() || it->first == m_pendingGraph.get() ||
                std::any_of(m_stages->begin(), m_stages->end(), [&](const inspect::Stage& s) { return s.graph.get() == it->first; });
    it = live ? std::next(it) : m_states.erase(it);
  }
  m_syncing = true;
  m_stageBox->clear();
  for (const auto& s : *m_stages)
    m_stageBox->addItem(QString("%1 — %2 nodes").arg(QString::fromStdString(s.name)).arg(s.graph->nodes().size()));
  m_stageBox->setCurrentIndex(m_secondary ? m_pinned : m_session->currentStage());
  if (m_compareBox) {
    int keep = m_compareBox->currentIndex();
    m_compareBox->clear();
    m_compareBox->addItem(tr("(no comparison)"));
    for (const auto& s : *m_stages) m_compareBox->addItem(QString::fromStdString(s.name));
    m_compareBox->setCurrentIndex(keep > 0 && keep < m_compareBox->count() ? keep : 0);
  }
  m_syncing = false;
  if (m_secondary) {
    if (m_pinned >= static_cast<int>(m_stages->size())) m_pinned = 0;
    if (!isHidden() || m_layout) startLayout();
    return;
  }
  onStageChanged();
  updateDiff();
}

void GraphPanel::onProjectClosed() {
  // A layout still running is for the last project: stopped, and dropped when it ends (onLayoutDone).
  if (m_cancelFlag) m_cancelFlag->store(true);
  m_relayout = false;
  m_syncing = true;
  m_scene->clear();
  m_items.clear();
  m_stages.reset();
  m_states.clear();
  m_layout.reset();
  m_layoutGraph.reset();
  m_layoutTree.reset();
  m_pendingGraph.reset();
  m_pendingTree.reset();
  m_hits.clear();
  m_search->setMatches({});
  m_diff.clear();
  m_diffResult.reset();
  m_overlayValues.clear();
  m_localNode = -1;
  m_stageBox->clear();
  if (m_compareBox) {
    m_compareBox->clear();
    m_compareBox->addItem(tr("(no comparison)"));
  }
  m_syncing = false;
  if (m_other) m_other->setVisible(false);
  if (m_diffInfo) m_diffInfo->clear();
  updateLegend(0);
  if (m_secondary) return;
  auto* note = m_scene->addText(tr("The project did not open, so there is no graph to show.\n"
                                   "Its error is in the Console and the Project panel. The project opens again "
                                   "when its project.toml or model.py is saved here, or on File › Reload Project "
                                   "(Ctrl+R)."));
  note->setDefaultTextColor(palette().color(QPalette::PlaceholderText));
  QFont noteFont = font();
  noteFont.setPointSizeF(noteFont.pointSizeF() * 1.25);
  note->setFont(noteFont);
  // Narrow enough that fitting the view to it enlarges it rather than shrinking it to a line.
  note->setTextWidth(420);
  m_scene->setSceneRect(note->boundingRect().adjusted(-20, -20, 20, 20));
  m_status->setText(tr("No graph: the project did not open"));
}

const inspect::Stage* GraphPanel::currentStage() const {
  if (!m_secondary) return m_session->stage();
  if (!m_stages || m_pinned < 0 || m_pinned >= static_cast<int>(m_stages->size())) return nullptr;
  return &(*m_stages)[static_cast<size_t>(m_pinned)];
}

void GraphPanel::setPinnedStage(int index) {
  m_pinned = index;
  {
    QSignalBlocker block(m_stageBox);
    m_stageBox->setCurrentIndex(index);
  }
  startLayout();
  emit pinnedStageChanged(index);
}

void GraphPanel::setCompareStage(int index) {
  if (!m_other) return;
  if (index < 0) {
    m_other->setVisible(false);
    QSignalBlocker block(m_compareBox);
    m_compareBox->setCurrentIndex(0);
    updateDiff();
    return;
  }
  m_other->m_stages = m_session->stages();
  m_other->m_expanded = m_expanded;
  bool wasHidden = m_other->isHidden();
  m_other->setVisible(true);
  if (auto* split = qobject_cast<QSplitter*>(m_other->parentWidget()); split && wasHidden) {
    int half = std::max(200, split->width() / 2);
    split->setSizes({half, half});
  }
  m_other->setPinnedStage(index);
}

namespace {
const QStringList kOverlays = {"none", "flops", "bytes", "time"};
}

void GraphPanel::setOverlay(const QString& name) {
  if (int i = static_cast<int>(kOverlays.indexOf(name)); i >= 0) m_overlay->setCurrentIndex(i);
}

QString GraphPanel::overlay() const { return kOverlays.value(m_overlay->currentIndex()); }

QString GraphPanel::overlayLegend() const { return m_legend->text(); }

void GraphPanel::updateLegend(double maxLog) {
  int overlay = m_overlay->currentIndex();
  double top = std::pow(10.0, maxLog) - 1;  // the largest box's value
  QString text;
  if (overlay > 0 && currentStage() && !sceneIsCurrent()) {
    text = tr("%1: shown once this stage is laid out").arg(m_overlay->currentText());
  } else if (overlay == 1) {
    text = tr("FLOPs, log scale up to %1").arg(top, 0, 'g', 3);
  } else if (overlay == 2) {
    text = tr("bytes moved, log scale up to %1").arg(QString::fromStdString(inspect::formatBytes(static_cast<int64_t>(top))));
  } else if (overlay == 3) {
    ProfilePtr p = m_session->profile();
    const inspect::Stage* stage = currentStage();
    if (!p) {
      text = tr("time: %1").arg(m_session->profileError());
    } else if (!stage || !m_session->profileMapsTo(*stage)) {
      // The session's stages (the profile's indices), which a compile replaces before this panel hears of it.
      QStringList names;
      for (int i : m_session->profileStages()) names << QString::fromStdString((*m_session->stages())[static_cast<size_t>(i)].name);
      text = tr("time: none at this stage: profile %1 measured the graph of %2, and this stage's graph is another "
                "(its nodes are numbered differently); choose that stage")
                 .arg(p->profile.id)
                 .arg(names.isEmpty() ? tr("the fusion stage") : "'" + names.join("', '") + "'");
    } else {
      text = tr("time: profile %1, %2 ms of kernels per step over %3 steps; a kernel's time split evenly among its "
                "nodes; log scale up to %4 ms a step")
                 .arg(p->profile.id)
                 .arg(static_cast<double>(p->totalNs) * 1e-6 / static_cast<double>(p->steps), 0, 'f', 2)
                 .arg(p->steps)
                 .arg(top * 1e-6 / static_cast<double>(p->steps), 0, 'f', 3);
    }
  }
  m_legend->setText(text);
  m_legend->setToolTip(text);
}

int GraphPanel::compareStage() const { return m_other && !m_other->isHidden() ? m_other->m_pinned : -1; }

void GraphPanel::updateDiff() {
  if (!m_other) return;
  const inspect::Stage* right = currentStage();
  const inspect::Stage* left = m_other->currentStage();
  if (m_other->isHidden() || !left || !right) {
    m_diffResult.reset();
    setDiff({});
    m_other->setDiff({});
    m_diffInfo->clear();
    return;
  }
  m_diffResult = inspect::diffStages(*left, *right);
  setDiff(m_diffResult->b);
  m_other->setDiff(m_diffResult->a);
  m_diffInfo->setText(tr("<span style=\"color:#2a9d3a\">+%1 added</span> · <span style=\"color:#d04040\">−%2 removed</span> · "
                         "<span style=\"color:#d08a20\">%3 changed</span> · %4 same")
                          .arg(m_diffResult->added).arg(m_diffResult->removed).arg(m_diffResult->changed).arg(m_diffResult->same));
}

void GraphPanel::setDiff(std::vector<inspect::DiffStatus> statuses) {
  m_diff = std::move(statuses);
  applyDecorations();
}

void GraphPanel::onStageChanged() {
  m_syncing = true;
  m_stageBox->setCurrentIndex(m_session->currentStage());
  m_syncing = false;
  if (currentStage()) startLayout();
  // Matches are node ids of a stage: the search runs again on the new one.
  if (!m_search->pattern().isEmpty()) search(m_search->pattern());
  updateDiff();
}

GraphPanel::StageState& GraphPanel::stateFor(const inspect::Stage& stage) {
  StageState& st = m_states[stage.graph.get()];
  if (!st.tree) {
    ProjectPtr project = m_session->project();
    st.tree = std::make_shared<const inspect::ModuleTree>(
        *stage.graph, project ? project->outputPaths : std::vector<std::string>{}, stage.fusion);
    st.cache = std::make_shared<inspect::LayoutCache>();
    if (m_expanded.empty()) m_expanded = st.tree->defaultExpanded();
  }
  return st;
}

void GraphPanel::startLayout() {
  const inspect::Stage* stage = currentStage();
  if (!stage) return;
  if (m_watcher->isRunning()) {
    m_relayout = true;
    return;
  }
  StageState& st = stateFor(*stage);
  m_busy = true;
  m_cancelFlag = std::make_shared<std::atomic<bool>>(false);
  m_progress->setRange(0, 0);
  m_progress->setVisible(true);
  m_cancel->setVisible(true);
  m_status->setText(tr("Laying out…"));
  m_clock.start();
  m_pendingGraph = stage->graph;
  m_pendingTree = st.tree;
  auto graph = stage->graph;
  auto tree = st.tree;
  auto cache = st.cache;
  auto expanded = m_expanded;
  auto cancel = m_cancelFlag;
  QPointer<GraphPanel> self(this);
  m_watcher->setFuture(QtConcurrent::run([graph, tree, cache, expanded, cancel, self]() -> LayoutResult {
    inspect::LayoutOptions o;
    o.cancel = cancel.get();
    o.progress = [self](int done, int total) {
      QMetaObject::invokeMethod(qApp, [self, done, total] {
        if (!self) return;
        self->m_progress->setRange(0, total);
        self->m_progress->setValue(done);
      });
    };
    return std::make_shared<Result<inspect::ViewLayout>>(inspect::layoutView(*tree, *graph, expanded, *cache, o));
  }));
}

void GraphPanel::onLayoutDone() {
  m_progress->setVisible(false);
  m_cancel->setVisible(false);
  LayoutResult r = m_watcher->result();
  m_layoutSeconds = static_cast<double>(m_clock.nsecsElapsed()) / 1e9;
  m_busy = false;
  if (m_relayout) {
    m_relayout = false;
    startLayout();
    return;
  }
  if (!currentStage()) {
    // Laid out for a project that has gone since (it failed to open again).
    emit layoutFinished();
    return;
  }
  if (!r->ok()) {
    m_status->setText(tr("Layout stopped: %1").arg(QString::fromStdString(r->error().message)));
    // The boxes of another stage do not stay on screen as if they were this one's.
    if (!sceneIsCurrent()) {
      m_scene->clear();
      m_items.clear();
      m_layout.reset();
      m_layoutGraph.reset();
      m_layoutTree.reset();
      updateLegend(0);
    }
    emit layoutFinished();
    return;
  }
  m_layout = std::move(*r).value();
  m_layoutGraph = m_pendingGraph;
  m_layoutTree = m_pendingTree;
  buildScene();
  m_status->setText(layoutSummary(*m_layout, m_layoutSeconds));
  emit layoutFinished();
}

QString GraphPanel::layoutSummary(const inspect::ViewLayout& layout, double seconds) {
  // The levels on screen: the top one and each open group. Those the layout did not lay out came from the
  // cache; of those it did, Graphviz placed some and the others took the places of a level of the same shape.
  int levels = 1;
  for (const inspect::ItemBox& b : layout.boxes) levels += b.item.kind == inspect::LevelItem::Kind::Group && b.item.expanded;
  const int laidOut = static_cast<int>(layout.laidOut.size());
  const int graphviz = static_cast<int>(layout.ranGraphviz.size());
  const int cached = std::max(0, levels - laidOut);
  auto count = [](int n, const char* one, const char* many) { return QString("%1 %2").arg(n).arg(n == 1 ? tr(one) : tr(many)); };
  QString how;
  if (laidOut == 0) {
    how = levels == 1 ? tr("its one level from the layout cache") : tr("all %1 levels from the layout cache").arg(levels);
  } else {
    QStringList parts;
    if (graphviz) parts << tr("%1 laid out by Graphviz").arg(graphviz);
    if (laidOut > graphviz) parts << tr("%1 placed as a level of the same shape was").arg(laidOut - graphviz);
    if (cached) parts << tr("%1 from the layout cache").arg(cached);
    how = QString("%1: %2").arg(count(levels, "level", "levels"), parts.join(", "));
  }
  return tr("%1, %2; %3; %4 s")
      .arg(count(static_cast<int>(layout.boxes.size()), "box", "boxes"),
           count(static_cast<int>(layout.edges.size()), "edge", "edges"), how)
      .arg(seconds, 0, 'f', 2);
}

void GraphPanel::buildScene() {
  m_syncing = true;
  m_scene->clear();
  m_items.clear();
  auto toggle = [this](GraphBoxItem* item) {
    setExpanded(QString::fromStdString(m_layoutTree->group(item->box().item.group).path), !item->isExpandedGroup());
  };
  const inspect::ModuleTree& tree = *m_layoutTree;
  for (const inspect::ItemBox& b : m_layout->boxes) {
    auto* item = new GraphBoxItem(b, toggle);
    if (b.item.kind == inspect::LevelItem::Kind::Node) item->setReadThrough(tree.isReadThrough(b.item.node));
    if (b.item.kind == inspect::LevelItem::Kind::Cluster) {
      const auto& k = tree.plan()->groups[static_cast<size_t>(b.item.cluster)];
      item->setToolTip(QString("%1 (%2): %3").arg(QString::fromStdString(k.name), passes::groupKindName(k.kind),
                                                 QString::fromStdString(k.reason)));
    }
    if (b.item.kind == inspect::LevelItem::Kind::Input && !m_secondary) {
      ir::ValueId v = b.item.input;
      item->setDropHandler([this, v](const QString& spec) {
        QString path = inputPath(v);
        if (!path.isEmpty()) m_session->dropSpec(path, spec);
      });
    }
    // An op's result, at the stage the sharding panel plans (the compile's last): a sharding constraint.
    const auto stages = m_session->stages();
    if (b.item.kind == inspect::LevelItem::Kind::Node && !m_secondary && stages && stages->size() > 1 &&
        stages->back().graph == m_layoutGraph) {
      const ir::Node& n = m_layoutGraph->nodes()[static_cast<size_t>(b.item.node)];
      if (!n.results.empty()) {
        ir::ValueId v = n.results.front();
        item->setDropHandler([this, v](const QString& spec) { m_session->dropSpecOnValue(v, spec); });
      }
    }
    m_scene->addItem(item);
    m_items.insert(QString::fromStdString(b.item.key), item);
  }
  for (const inspect::EdgeCurve& e : m_layout->edges) {
    if (e.points.size() < 2) continue;
    QPainterPath path(QPointF(e.points[0].x, e.points[0].y));
    size_t i = 1;
    for (; i + 2 < e.points.size(); i += 3)
      path.cubicTo(e.points[i].x, e.points[i].y, e.points[i + 1].x, e.points[i + 1].y, e.points[i + 2].x, e.points[i + 2].y);
    for (; i < e.points.size(); ++i) path.lineTo(e.points[i].x, e.points[i].y);
    auto* item = m_scene->addPath(path, QPen(QColor(128, 128, 128), e.count > 1 ? 1.6 : 1.0));
    // Arrow head at the last point, pointing along the last segment.
    QPointF tip(e.points.back().x, e.points.back().y);
    QPointF prev(e.points[e.points.size() - 2].x, e.points[e.points.size() - 2].y);
    QLineF dir(tip, prev);
    if (dir.length() > 0.1) {
      dir.setLength(7);
      QLineF l1 = dir, l2 = dir;
      l1.setAngle(dir.angle() + 25);
      l2.setAngle(dir.angle() - 25);
      QPolygonF head({tip, l1.p2(), l2.p2()});
      auto* h = m_scene->addPolygon(head, QPen(Qt::NoPen), QColor(128, 128, 128));
      h->setZValue(item->zValue());
    }
    item->setZValue(50);
  }
  m_scene->setSceneRect(m_scene->itemsBoundingRect().adjusted(-20, -20, 20, 20));
  m_syncing = false;
  applyDecorations();
  onNodeSelected(m_secondary && m_localNode >= 0 ? m_localNode : m_session->selectedNode());
}

bool GraphPanel::sceneIsCurrent() const {
  const inspect::Stage* stage = currentStage();
  return m_layout && stage && stage->graph == m_layoutGraph;
}

void GraphPanel::clearDecorations() {
  m_overlayValues.clear();
  for (GraphBoxItem* item : std::as_const(m_items)) {
    item->setHit(false);
    item->setFill(QColor());
    item->setDiffColor(QColor());
    item->setSharding(QString(), false);
  }
}

void GraphPanel::applyDecorations() {
  // Node ids name nodes of one stage: the boxes of another (on screen while this stage is laid out) carry none
  // of this stage's colours.
  if (!sceneIsCurrent()) {
    clearDecorations();
    updateLegend(0);
    return;
  }
  const inspect::Stage* stage = currentStage();
  StageState& st = stateFor(*stage);
  QSet<int> hitSet(m_hits.begin(), m_hits.end());
  // Groups that hold a hit are marked too.
  QSet<int> hitGroups;
  for (int n : m_hits)
    for (int g = st.tree->groupOfNode(n); g >= 0; g = st.tree->group(g).parent) hitGroups.insert(g);
  int overlay = m_overlay->currentIndex();
  if ((overlay == 1 || overlay == 2) && !st.costs)
    st.costs = std::make_shared<const std::vector<ir::Cost>>(inspect::nodeCosts(*stage->graph));
  // Time: the profile's node ids are those of the graph it ran (the fusion stage's, and the stages with the
  // same graph); other stages get no colours and a legend that says so.
  ProfilePtr profile = overlay == 3 ? m_session->profile() : nullptr;
  if (overlay == 3 && !(profile && m_session->profileMapsTo(*stage))) overlay = -1;
  auto one = [&](int n) {
    if (overlay == 3) return profile->nodeNs[static_cast<size_t>(n)];
    const ir::Cost& c = (*st.costs)[static_cast<size_t>(n)];
    return overlay == 1 ? c.flops : static_cast<double>(c.bytesRead + c.bytesWritten);
  };
  // A collapsed group shows the sum of what lies below it.
  std::vector<double> groupSum;
  if (overlay > 0) {
    groupSum.assign(st.tree->groups().size(), 0.0);
    for (size_t n = 0; n < stage->graph->nodes().size(); ++n) {
      double v = one(static_cast<int>(n));
      for (int g = st.tree->groupOfNode(static_cast<int>(n)); g >= 0; g = st.tree->group(g).parent)
        groupSum[static_cast<size_t>(g)] += v;
    }
  }
  auto costOf = [&](const GraphBoxItem* item) -> double {
    const auto& it = item->box().item;
    if (it.kind == inspect::LevelItem::Kind::Node) return one(it.node);
    return it.kind == inspect::LevelItem::Kind::Group ? groupSum[static_cast<size_t>(it.group)] : 0.0;
  };
  QHash<GraphBoxItem*, double> costs;
  double maxLog = 0;
  for (GraphBoxItem* item : std::as_const(m_items)) {
    const auto& it = item->box().item;
    bool hit = (it.kind == inspect::LevelItem::Kind::Node && hitSet.contains(it.node)) ||
               (it.kind == inspect::LevelItem::Kind::Group && !it.expanded && hitGroups.contains(it.group));
    item->setHit(hit);
    if (overlay > 0 && !item->isFrame()) {
      double c = costOf(item);
      costs[item] = c;
      maxLog = std::max(maxLog, std::log10(1 + c));
    }
  }
  m_overlayValues.clear();
  for (GraphBoxItem* item : std::as_const(m_items)) {
    bool coloured = overlay > 0 && costs.contains(item) && maxLog > 0;
    item->setFill(coloured ? heat(std::log10(1 + costs[item]) / maxLog) : QColor());
    if (coloured) m_overlayValues.insert(QString::fromStdString(item->box().item.key), costs[item]);
  }
  updateLegend(maxLog);
  applySharding();
  // Comparison: the worst status of what a box holds (a group: any of its nodes).
  bool diffing = m_diff.size() == stage->graph->nodes().size();
  std::vector<int> groupWorst;
  if (diffing) {
    groupWorst.assign(st.tree->groups().size(), 0);
    for (size_t n = 0; n < m_diff.size(); ++n) {
      int w = m_diff[n] == inspect::DiffStatus::Only ? 2 : m_diff[n] == inspect::DiffStatus::Changed ? 1 : 0;
      for (int g = st.tree->groupOfNode(static_cast<int>(n)); g >= 0 && w > 0; g = st.tree->group(g).parent)
        groupWorst[static_cast<size_t>(g)] = std::max(groupWorst[static_cast<size_t>(g)], w);
    }
  }
  QColor only = m_secondary ? QColor(240, 160, 160) : QColor(160, 220, 160);
  QColor changed(245, 200, 120);
  for (GraphBoxItem* item : std::as_const(m_items)) {
    const auto& it = item->box().item;
    int w = 0;
    if (diffing && it.kind == inspect::LevelItem::Kind::Node) {
      w = m_diff[static_cast<size_t>(it.node)] == inspect::DiffStatus::Only ? 2 : m_diff[static_cast<size_t>(it.node)] == inspect::DiffStatus::Changed ? 1 : 0;
    } else if (diffing && it.kind == inspect::LevelItem::Kind::Group) {
      w = groupWorst[static_cast<size_t>(it.group)];
    }
    item->setDiffColor(w == 2 ? only : w == 1 ? changed : QColor());
  }
}

QString GraphPanel::inputPath(ir::ValueId v) const {
  const inspect::Stage* stage = currentStage();
  ProjectPtr project = m_session->project();
  if (!stage || !project) return {};
  const auto& ins = stage->graph->inputs();
  auto it = std::find(ins.begin(), ins.end(), v);
  auto i = static_cast<size_t>(it - ins.begin());
  return it == ins.end() || i >= project->inputPaths.size() ? QString() : QString::fromStdString(project->inputPaths[i]);
}

void GraphPanel::dropSpecOnInput(int inputIndex, const QString& spec) {
  const inspect::Stage* stage = currentStage();
  if (!stage || inputIndex < 0 || inputIndex >= static_cast<int>(stage->graph->inputs().size())) return;
  auto it = m_items.find(QString("i:%1").arg(stage->graph->inputs()[static_cast<size_t>(inputIndex)]));
  if (it != m_items.end()) (*it)->dropSpec(spec);
}

bool GraphPanel::dropSpecOnNode(int node, const QString& spec) {
  auto it = m_items.find(QString("n:%1").arg(node));
  if (it == m_items.end() || !(*it)->acceptDrops()) return false;
  (*it)->dropSpec(spec);
  return true;
}

QVector<int> GraphPanel::conflictNodes() const {
  QVector<int> out;
  ShardingPtr s = m_session->sharding();
  if (s)
    for (const auto& c : s->conflicts) out << c.node;
  return out;
}

void GraphPanel::applySharding() {
  // The plan is made for the compile's last stage (plan->step): its ops show their results' specs there; graph
  // inputs keep their order through the compile, so they show theirs at every stage.
  ShardingPtr s = m_session->sharding();
  const inspect::Stage* stage = currentStage();
  const auto* plan = s ? s->plan.get() : nullptr;
  bool sameGraph = plan && stage && plan->step == stage->graph;
  auto specText = [&](ir::ValueId stepValue) {
    ir::ValueId v = plan->fromStep[static_cast<size_t>(stepValue)];
    return QString("%1 — %2").arg(QString::fromStdString(plan->plan.values[static_cast<size_t>(v)].toString(plan->mesh)),
                                 QString::fromStdString(inspect::originText(*plan, v)));
  };
  std::map<int, QString> conflicts;
  if (s && stage && s->stepGraph == stage->graph)
    for (const auto& c : s->conflicts)
      conflicts[c.node] = tr("conflict: %1 and %2").arg(QString::fromStdString(c.first), QString::fromStdString(c.second));
  for (GraphBoxItem* item : std::as_const(m_items)) {
    const auto& it = item->box().item;
    QString text;
    if (plan && stage && it.kind == inspect::LevelItem::Kind::Input) {
      const auto& ins = stage->graph->inputs();
      auto at = static_cast<size_t>(std::find(ins.begin(), ins.end(), it.input) - ins.begin());
      if (at < ins.size() && at < plan->step->inputs().size()) text = specText(plan->step->inputs()[at]);
    } else if (sameGraph && it.kind == inspect::LevelItem::Kind::Node) {
      const ir::Node& n = stage->graph->nodes()[static_cast<size_t>(it.node)];
      for (ir::ValueId r : n.results) text += QString("%1%%2 %3").arg(text.isEmpty() ? "" : "\n").arg(r).arg(specText(r));
    }
    auto c = it.kind == inspect::LevelItem::Kind::Node ? conflicts.find(it.node) : conflicts.end();
    if (c != conflicts.end()) text += "\n" + c->second;
    item->setSharding(text, c != conflicts.end());
  }
}

void GraphPanel::setExpanded(const QString& path, bool expanded) {
  std::string p = path.toStdString();
  if (expanded) {
    // Expanding a group shows it: its ancestors open too.
    for (size_t dot = p.find('.'); dot != std::string::npos; dot = p.find('.', dot + 1)) m_expanded.insert(p.substr(0, dot));
    m_expanded.insert(p);
  } else {
    m_expanded.erase(p);
  }
  startLayout();
  if (m_other && !m_other->isHidden()) m_other->setExpanded(path, expanded);
}

void GraphPanel::expandAll(bool expanded) {
  const inspect::Stage* stage = currentStage();
  if (!stage) return;
  StageState& st = stateFor(*stage);
  if (expanded) {
    for (const auto& g : st.tree->groups()) m_expanded.insert(g.path);
  } else {
    m_expanded = {""};
  }
  startLayout();
}

void GraphPanel::search(const QString& pattern) {
  m_hits.clear();
  m_searchError.clear();
  QVector<GraphSearch::Match> matches;
  const inspect::Stage* stage = currentStage();
  if (stage && !pattern.isEmpty()) {
    auto r = inspect::searchNodes(*stage, pattern.toStdString());
    if (r.ok()) {
      // Each match as the list shows it: the module is the group the graph draws it in.
      const inspect::ModuleTree& tree = *stateFor(*stage).tree;
      for (const inspect::NodeSummary& n : inspect::summarizeNodes(*stage->graph, *r)) {
        m_hits.push_back(n.node);
        matches.push_back({n.node, QString::fromStdString(n.name), QString::fromStdString(n.op),
                           QString::fromStdString(tree.group(tree.groupOfNode(n.node)).path), QString::fromStdString(n.aval)});
      }
    } else {
      m_searchError = QString::fromStdString(r.error().message);
    }
  }
  m_search->setPattern(pattern);
  bool listWasShown = m_search->results()->isVisibleTo(this);
  m_search->setMatches(std::move(matches), m_searchError);
  // The list takes a quarter of the column when it appears.
  if (!listWasShown && m_search->results()->isVisibleTo(this)) {
    int h = m_column->height();
    m_column->setSizes({h - h / 4, h / 4});
  }
  applyDecorations();
  emit searchFinished(static_cast<int>(m_hits.size()));
}

QString GraphPanel::searchStatus() const { return m_search->status(); }

void GraphPanel::findNext() { m_search->next(); }

void GraphPanel::findPrevious() { m_search->previous(); }

void GraphPanel::showMatch(int node) {
  // The primary panel selects through the session (every panel follows); a secondary one selects on its own.
  if (m_secondary) {
    m_localNode = node;
    onNodeSelected(node);
  } else if (m_session->selectedNode() == node) {
    onNodeSelected(node);  // the same match again: centre on it
  } else {
    m_session->selectNode(node);
  }
}

void GraphPanel::focusSearch() {
  m_search->box()->setFocus();
  m_search->box()->selectAll();
}

void GraphPanel::fitToView() { m_view->fitInView(m_scene->sceneRect(), Qt::KeepAspectRatio); }

void GraphPanel::setZoom(double scale) {
  m_view->resetTransform();
  m_view->scale(scale, scale);
  const auto sel = m_scene->selectedItems();
  if (!sel.isEmpty()) m_view->centerOn(sel.front());
}

void GraphPanel::onNodeSelected(int node) {
  if (m_syncing || !sceneIsCurrent()) return;
  const inspect::Stage* stage = currentStage();
  m_syncing = true;
  m_scene->clearSelection();
  if (node >= 0) {
    // The node, or all the nodes of a kernel picked in the timeline. Groups holding any not shown open first
    // (each once: a group already open is not laid out again).
    std::vector<int> nodes = m_session->selectedKernelNodes();
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes = {node};
    StageState& st = stateFor(*stage);
    std::string open;
    for (int n : nodes) {
      if (m_items.contains(QString("n:%1").arg(n))) continue;
      const std::string& path = st.tree->group(st.tree->groupOfNode(n)).path;
      bool closed = !m_expanded.count(path);
      for (size_t dot = path.find('.'); dot != std::string::npos; dot = path.find('.', dot + 1))
        closed |= m_expanded.insert(path.substr(0, dot)).second;
      if (closed) {
        m_expanded.insert(path);
        open = path;
      }
    }
    m_syncing = false;
    if (!open.empty()) {
      setExpanded(QString::fromStdString(open), true);
      return;
    }
    m_syncing = true;
    for (int n : nodes) {
      auto it = m_items.find(QString("n:%1").arg(n));
      if (it != m_items.end()) (*it)->setSelected(true);
    }
    auto it = m_items.find(QString("n:%1").arg(node));
    if (it != m_items.end()) m_view->centerOn(*it);
  }
  m_syncing = false;
}

void GraphPanel::onSceneSelection() {
  if (m_syncing || m_secondary) return;
  const auto sel = m_scene->selectedItems();
  if (sel.size() == 2) {  // Ctrl+click a second node: compare the two
    auto* a = static_cast<GraphBoxItem*>(sel[0]);
    auto* b = static_cast<GraphBoxItem*>(sel[1]);
    if (a->box().item.kind == inspect::LevelItem::Kind::Node && b->box().item.kind == inspect::LevelItem::Kind::Node) {
      m_syncing = true;
      m_session->selectPair(std::min(a->box().item.node, b->box().item.node), std::max(a->box().item.node, b->box().item.node));
      m_syncing = false;
    }
    return;
  }
  if (sel.size() != 1) return;
  auto* item = static_cast<GraphBoxItem*>(sel.front());
  if (item->box().item.kind == inspect::LevelItem::Kind::Node) {
    m_syncing = true;
    m_session->selectNode(item->box().item.node);
    m_syncing = false;
  }
}

QStringList GraphPanel::visibleGroups() const {
  QStringList out;
  if (!m_layout) return out;
  for (const auto& b : m_layout->boxes)
    if (b.item.kind == inspect::LevelItem::Kind::Group) out << QString::fromStdString(m_layoutTree->group(b.item.group).path);
  return out;
}

int GraphPanel::selectNodeBoxes(const QVector<int>& nodes) {
  QList<GraphBoxItem*> boxes;
  for (int n : nodes)
    if (auto it = m_items.find(QString("n:%1").arg(n)); it != m_items.end()) boxes << *it;
  {
    const QSignalBlocker block(m_scene);  // one selection change, not one per box
    m_scene->clearSelection();
    for (GraphBoxItem* b : boxes) b->setSelected(true);
  }
  onSceneSelection();
  return static_cast<int>(boxes.size());
}

QVector<int> GraphPanel::selectedNodes() const {
  QVector<int> out;
  for (QGraphicsItem* i : m_scene->selectedItems()) {
    auto* item = static_cast<GraphBoxItem*>(i);
    if (item->box().item.kind == inspect::LevelItem::Kind::Node) out << item->box().item.node;
  }
  std::sort(out.begin(), out.end());
  return out;
}

QStringList GraphPanel::visibleClusters() const {
  QStringList out;
  if (m_layout)
    for (const auto& b : m_layout->boxes)
      if (b.item.kind == inspect::LevelItem::Kind::Cluster) out << QString::fromStdString(b.label);
  return out;
}

QStringList GraphPanel::expandedGroups() const {
  QStringList out;
  for (const auto& e : m_expanded) out << QString::fromStdString(e);
  return out;
}

int GraphPanel::visibleNodeCount() const {
  int n = 0;
  if (m_layout)
    for (const auto& b : m_layout->boxes) n += b.item.kind == inspect::LevelItem::Kind::Node;
  return n;
}

QString GraphPanel::statusText() const { return m_status->text(); }

bool GraphPanel::layoutRunning() const { return m_busy || m_watcher->isRunning(); }

QStringList GraphPanel::lastLaidOut() const {
  QStringList out;
  if (m_layout)
    for (const auto& p : m_layout->laidOut) out << QString::fromStdString(p);
  return out;
}

}  // namespace tsr::studio
