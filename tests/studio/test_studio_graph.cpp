// The graph panel on the offscreen platform: the time overlay follows the stage on screen (colours only where
// the profile's node ids name the stage's nodes, none left on the boxes of another stage), and the search steps
// through its matches (Enter / Shift+Enter, F3 / Shift+F3), counts them ("k of n") and lists them. The
// expected values come from the graph and the run store directly.
#include <map>

#include <QAction>
#include <QGraphicsItem>
#include <QGraphicsView>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeWidget>

#include "app/studio/main_window.h"
#include "engine/inspect/node_info.h"
#include "engine/store/run_store.h"
#include "tests/studio/studio_test_util.h"
#include "views/graph_panel.h"
#include "views/run_controller.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;
using namespace tsr::studio::test;

namespace {

const QString kSamples = QStringLiteral(TSR_SOURCE_DIR "/sample_projects");

// A three-layer MLP on synthetic digits: compiled and profiled in seconds.
const QByteArray kTinyMlp =
    "[project]\nname = \"tiny\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n[data]\nkind = "
    "\"synthetic-digits\"\n[train]\nsteps = 6\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\nwarmup_steps = "
    "0\neval_every = 0\nlog_every = 1\n";

// Each node's time in the latest profile of the store, read from its kernel table and launches: a kernel's
// total split evenly among its nodes.
std::map<int, double> profiledNodeTimes(const QString& db) {
  std::map<int, double> out;
  auto store = store::RunStore::openReadOnly(db.toStdString());
  if (!store.ok()) return out;
  int64_t latest = 0;
  auto runs = store->runs();
  for (const auto& r : runs.value()) {
    auto profiles = store->profiles(r.id);
    for (const auto& p : profiles.value()) latest = std::max(latest, p.id);
  }
  auto events = store->kernelEvents(latest);
  auto kernels = store->profileKernels(latest);
  if (!events.ok() || !kernels.ok()) return out;
  std::map<int64_t, double> total;
  for (const auto& e : *events) total[e.fusion] += static_cast<double>(e.durationNs);
  for (const auto& k : *kernels)
    if (k.executable == "train_step")
      for (int n : k.nodes) out[n] = total[k.fusion] / static_cast<double>(k.nodes.size());
  return out;
}

// The one selected box, or null.
QGraphicsItem* selectedBox(GraphPanel* g) {
  auto* view = g->findChild<QGraphicsView*>();
  const auto sel = view ? view->scene()->selectedItems() : QList<QGraphicsItem*>();
  return sel.size() == 1 ? sel.front() : nullptr;
}

// Whether the selected box lies in the view, near its centre (as far as the scene's edges let the view scroll).
bool selectedBoxCentred(GraphPanel* g) {
  QGraphicsItem* box = selectedBox(g);
  auto* view = g->findChild<QGraphicsView*>();
  if (!box || !view) return false;
  QRectF seen = view->mapToScene(view->viewport()->rect()).boundingRect();
  QRectF r = box->sceneBoundingRect();
  if (!seen.contains(r)) return false;
  QRectF scene = view->sceneRect();
  QPointF want(std::clamp(r.center().x(), scene.left() + seen.width() / 2, scene.right() - seen.width() / 2),
               std::clamp(r.center().y(), scene.top() + seen.height() / 2, scene.bottom() - seen.height() / 2));
  QPointF off = seen.center() - want;
  return std::abs(off.x()) < 4 && std::abs(off.y()) < 4;
}

}  // namespace

class TestStudioGraph : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    initStudioTest("GraphPanelTest", TSR_TESSERA_BIN);
  }

  // The time overlay colours a node by its kernel's time at the stages whose graph the profile ran, and no
  // node at the others: from the moment the stage changes (the previous stage's boxes stay on screen until the
  // new layout is done, and carry nothing of the new stage), with a legend that says why.
  void timeOverlayFollowsTheStage() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    Session* s = w.session();
    QSignalSpy finished(w.runController(), &RunController::finished);
    w.action("profile")->trigger();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    QTRY_VERIFY2(s->profile(), qPrintable(s->profileError()));  // read on a worker thread
    GraphPanel* g = w.graphPanel();
    QCOMPARE(g->overlay(), QString("time"));
    const std::map<int, double> times = profiledNodeTimes(s->runsDbPath());
    QVERIFY(!times.empty());
    const auto& stages = *s->stages();
    const int fusion = static_cast<int>(stages.size()) - 1;
    QVERIFY(stages[static_cast<size_t>(fusion)].fusion);
    // Every other stage, and whether its graph is the fusion stage's (the same text: the same node ids).
    int same = -1, other = -1;
    for (int i = 0; i < fusion; ++i) {
      bool identical = stages[static_cast<size_t>(i)].text == stages[static_cast<size_t>(fusion)].text;
      if (identical) same = i;
      if (!identical && i > 0) other = i;
    }
    QVERIFY2(same > 0, "the cleanup's last stage has the fusion stage's graph");
    QVERIFY(other > 0);

    auto checkTimes = [&](int stage) {
      // Until the stage is laid out, the boxes on screen are the previous stage's: they show none of its times.
      QVERIFY(s->currentStage() != stage);
      s->setCurrentStage(stage);
      QVERIFY(g->layoutRunning());
      QVERIFY2(g->overlayValues().isEmpty(), "the previous stage's boxes carry none of this stage's times");
      QVERIFY(waitLayout(g));
      g->expandAll(true);
      QVERIFY(waitLayout(g));
      const QMap<QString, double> values = g->overlayValues();
      int nodes = 0;
      for (auto it = values.begin(); it != values.end(); ++it) {
        if (!it.key().startsWith("n:")) continue;
        int n = it.key().mid(2).toInt();
        auto t = times.find(n);
        QVERIFY2(t != times.end() || it.value() == 0, qPrintable(it.key()));
        if (t != times.end()) QVERIFY2(std::abs(it.value() - t->second) <= 1e-6 * t->second + 1e-9, qPrintable(it.key()));
        nodes += it.value() > 0;
      }
      QVERIFY2(nodes > 0, qPrintable(g->overlayLegend()));
      QVERIFY2(g->overlayLegend().contains("split evenly"), qPrintable(g->overlayLegend()));
    };
    QCOMPARE(s->currentStage(), 0);
    checkTimes(fusion);
    if (QTest::currentTestFailed()) return;
    // A stage with another graph: nothing painted, from the switch on.
    s->setCurrentStage(0);
    QVERIFY(g->layoutRunning());
    QVERIFY2(g->overlayValues().isEmpty(), "the previous stage's boxes keep no times");
    QVERIFY(waitLayout(g));
    QVERIFY(g->overlayValues().isEmpty());
    QVERIFY2(g->overlayLegend().contains("choose that stage"), qPrintable(g->overlayLegend()));
    // The stage before fusion has the fusion stage's graph: the profile's node ids name its nodes.
    checkTimes(same);
    if (QTest::currentTestFailed()) return;
    s->setCurrentStage(other);
    QVERIFY(g->overlayValues().isEmpty());
    QVERIFY(waitLayout(g));
    QVERIFY(g->overlayValues().isEmpty());
    QVERIFY2(g->overlayLegend().contains("choose that stage"), qPrintable(g->overlayLegend()));
    checkTimes(fusion);
    if (QTest::currentTestFailed()) return;
    // Opened again: the profile is read as the compile ends, before the panel has the new stages; the overlay
    // and its legend follow the session's.
    QVERIFY(openAndWait(w, dir.path()));
    QVERIFY(s->profile());
    QCOMPARE(s->currentStage(), 0);
    QVERIFY2(g->overlayLegend().contains("choose that stage"), qPrintable(g->overlayLegend()));
    for (int i : {same, fusion})
      QVERIFY2(g->overlayLegend().contains(QString::fromStdString((*s->stages())[static_cast<size_t>(i)].name)),
               qPrintable(g->overlayLegend()));
    checkTimes(fusion);
  }

  // Search steps through its matches in graph order: Enter and Shift+Enter in the box, F3 and Shift+F3 in the
  // window; each match is selected (its block opened), the view centred on it, the count says which it is, and
  // the list of matches names each (node, op, module, shape); a row selects its node.
  // The status line says how the layout on screen was made, level by level (the top one and each open group):
  // laid out now, or taken from the layout cache. Collapsing a group again takes every level from the cache; it
  // said "0 group level(s) laid out (0 by Graphviz, the others of a shape it had laid out), the rest from the
  // cache", which named neither how many levels there were nor that all of them came from the cache.
  void statusSaysWhatCameFromTheCache() {
    MainWindow w;
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    GraphPanel* g = w.graphPanel();
    // The levels on screen: the top and each group shown open.
    auto levels = [&] {
      const QStringList expanded = g->expandedGroups();
      int n = 1;
      for (const QString& group : g->visibleGroups()) n += expanded.contains(group);
      return n;
    };
    g->setExpanded("h.0", true);
    QVERIFY(waitLayout(g));
    const int open = levels();
    const int laidOut = static_cast<int>(g->lastLaidOut().size());
    QVERIFY(laidOut > 0 && laidOut <= open);
    QVERIFY2(g->statusText().contains(QString("; %1 levels: ").arg(open)), qPrintable(g->statusText()));
    if (open > laidOut)
      QVERIFY2(g->statusText().contains(QString("%1 from the layout cache").arg(open - laidOut)), qPrintable(g->statusText()));
    g->setExpanded("h.0", false);
    QVERIFY(waitLayout(g));
    QVERIFY(g->lastLaidOut().isEmpty());
    QVERIFY2(g->statusText().contains(QString("; all %1 levels from the layout cache; ").arg(levels())),
             qPrintable(g->statusText()));
    QVERIFY2(!g->statusText().contains("Graphviz"), qPrintable(g->statusText()));
  }

  void searchStepsThroughMatchesAndListsThem() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndWait(w, kSamples + "/gpt2_mini"));
    Session* s = w.session();
    GraphPanel* g = w.graphPanel();
    const inspect::Stage& stage = *s->stage();
    const ir::Graph& graph = *stage.graph;
    std::vector<int> dots;
    for (size_t i = 0; i < graph.nodes().size(); ++i)
      if (graph.nodes()[i].op == ir::OpCode::DotGeneral) dots.push_back(static_cast<int>(i));
    const int n = static_cast<int>(dots.size());
    QVERIFY(n > 3);
    auto* box = g->findChild<QLineEdit*>("graphSearch");
    auto* status = g->findChild<QLabel*>("graphSearchStatus");
    auto* list = g->findChild<QTreeWidget*>("graphSearchResults");
    QVERIFY(box && status && list);
    auto at = [&](int k) { return QString("%1 of %2").arg(k).arg(n); };
    auto shows = [&](int k) {  // match k (1-based) selected, its box on screen and centred
      if (status->text() != at(k) || s->selectedNode() != dots[static_cast<size_t>(k - 1)]) return false;
      if (!waitLayout(g)) return false;
      return g->selectedNodes() == QVector<int>{dots[static_cast<size_t>(k - 1)]} && selectedBoxCentred(g);
    };
    // Typed, then Enter at once: the search runs and the first match shows.
    box->setFocus();
    QTest::keyClicks(box, "^dot_general$");
    QTest::keyClick(box, Qt::Key_Return);
    QVERIFY2(shows(1), qPrintable(status->text()));
    QTest::keyClick(box, Qt::Key_Return);
    QVERIFY2(shows(2), qPrintable(status->text()));
    QTest::keyClick(box, Qt::Key_Return, Qt::ShiftModifier);
    QVERIFY2(shows(1), qPrintable(status->text()));
    QTest::keyClick(box, Qt::Key_Return, Qt::ShiftModifier);  // wraps around
    QVERIFY2(shows(n), qPrintable(status->text()));
    // F3 / Shift+F3 from the window.
    QAction* next = w.action("findNext");
    QAction* previous = w.action("findPrevious");
    QVERIFY(next && previous);
    QCOMPARE(next->shortcut(), QKeySequence(Qt::Key_F3));
    QCOMPARE(previous->shortcut(), QKeySequence(Qt::SHIFT | Qt::Key_F3));
    next->trigger();
    QVERIFY2(shows(1), qPrintable(status->text()));
    next->trigger();
    next->trigger();
    QVERIFY2(shows(3), qPrintable(status->text()));
    previous->trigger();
    QVERIFY2(shows(2), qPrintable(status->text()));

    // The list: one row per match in graph order, with what names it.
    QVERIFY(list->isVisible());
    QCOMPARE(list->topLevelItemCount(), n);
    const std::vector<std::string> names = inspect::valueNames(graph);
    for (int i = 0; i < n; ++i) {
      const ir::Node& node = graph.nodes()[static_cast<size_t>(dots[static_cast<size_t>(i)])];
      QTreeWidgetItem* row = list->topLevelItem(i);
      QCOMPARE(row->text(0), QString::fromStdString(names[static_cast<size_t>(node.results[0])]));
      QCOMPARE(row->text(1), QString("dot_general"));
      QVERIFY2(row->text(2).startsWith(QString::fromStdString(node.prov.modulePath)) && !node.prov.modulePath.empty(),
               qPrintable(row->text(2)));
      QCOMPARE(row->text(3), QString::fromStdString(graph.aval(node.results[0]).toString()));
    }
    // A click on a row shows that match.
    QTreeWidgetItem* fifth = list->topLevelItem(4);
    list->scrollToItem(fifth);
    QTest::mouseClick(list->viewport(), Qt::LeftButton, {}, list->visualItemRect(fifth).center());
    QVERIFY2(shows(5), qPrintable(status->text()));

    // Matches are the stage's own: on another stage the search runs again.
    const int last = static_cast<int>(s->stages()->size()) - 1;
    s->setCurrentStage(last);
    QVERIFY(waitLayout(g));
    const ir::Graph& fused = *s->stage()->graph;
    QCOMPARE(static_cast<int>(g->searchHits().size()), fused.count(ir::OpCode::DotGeneral));
    QCOMPARE(status->text(), QString("%1 matches").arg(fused.count(ir::OpCode::DotGeneral)));
    QCOMPARE(list->topLevelItemCount(), fused.count(ir::OpCode::DotGeneral));
    for (int hit : g->searchHits()) QCOMPARE(fused.nodes()[static_cast<size_t>(hit)].op, ir::OpCode::DotGeneral);
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestStudioGraph)
#include "test_studio_graph.moc"
