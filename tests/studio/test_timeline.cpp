// The Timeline panel in the IDE, on xcb under Xvfb (its canvas is OpenGL). Input goes through the Qt-to-ImGui
// shim as a user's would (QTest mouse events, wheel and key events on the canvas): zoom, pan, range selection,
// and a click on a known kernel of a profile recorded with Profile ▶, whose nodes must become the session's,
// the graph's and the IR panel's selection, and back. Without an OpenGL context the GL tests skip; the panel's
// model side (loading, linking, statistics, selection by API) runs everywhere.
#include <QAbstractItemModel>
#include <QComboBox>
#include <QDir>
#include <QOpenGLContext>
#include <QPlainTextEdit>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QWheelEvent>

#include <fmt/format.h>

#include "app/studio/main_window.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "tests/studio/studio_test_util.h"
#include "views/graph_panel.h"
#include "views/ir_panel.h"
#include "views/run_controller.h"
#include "views/session.h"
#include "views/timeline_canvas.h"
#include "views/timeline_panel.h"

using namespace tsr;
using namespace tsr::studio;

using tsr::studio::test::writeFile;

namespace {

// A tiny MLP: compiles and profiles in a few seconds.
void writeTinyProject(const QString& dir) {
  writeFile(dir + "/project.toml",
            "[project]\nname = \"tiny\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 64, 10]\n[data]\nkind = "
            "\"synthetic-digits\"\n[train]\nsteps = 6\nbatch_size = 32\noptimizer = \"adamw\"\nlr = 0.01\nwarmup_steps = "
            "0\neval_every = 0\nlog_every = 1\n");
}

bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy opened(w.session(), &Session::projectOpened);
  w.openProject(path);
  if (!QTest::qWaitFor([&] { return !opened.isEmpty(); }, 30000)) return false;
  return QTest::qWaitFor([&] {
    return !w.session()->busy() && !w.graphPanel()->layoutRunning() && w.session()->stages()->size() > 1;
  }, 30000);
}

void sendWheel(QWidget* w, QPointF pos, int steps, Qt::KeyboardModifiers mods = {}) {
  QWheelEvent e(pos, w->mapToGlobal(pos), QPoint(), QPoint(0, 120 * steps), Qt::NoButton, mods, Qt::NoScrollPhase, false);
  QApplication::sendEvent(w, &e);
}

// Waits until the canvas has drawn the frames its input asked for.
bool settle(TimelineCanvas* c) {
  return QTest::qWaitFor([&] {
    int64_t before = c->frameCount();
    QTest::qWait(60);
    return !c->animating() && !c->inputPending() && c->frameCount() == before;
  }, 10000);
}

// Pixels that are not the background: something was drawn.
int drawnPixels(const QImage& img, QColor background) {
  int n = 0;
  for (int y = 0; y < img.height(); y += 2)
    for (int x = 0; x < img.width(); x += 2) n += QColor(img.pixel(x, y)) != background;
  return n;
}

}  // namespace

class TestTimeline : public QObject {
  Q_OBJECT

  QString m_noGl;  // why the GL tests skip

 private slots:
  void initTestCase() {
    test::initStudioTest("TimelineTest", TSR_TESSERA_BIN);
    QString platform = QGuiApplication::platformName();
    QOpenGLContext probe;
    if (platform == "offscreen" || platform == "minimal")
      m_noGl = QString("no OpenGL on the '%1' Qt platform: run under xvfb-run with QT_QPA_PLATFORM=xcb").arg(platform);
    else if (!probe.create())
      m_noGl = "no OpenGL context could be created on " + platform;
  }

  // The canvas alone with a synthetic timeline: the shim's wheel, drag, shift-drag and keys reach ImGui.
  void shimDrivesZoomPanAndRange() {
    if (!m_noGl.isEmpty()) QSKIP(qPrintable(m_noGl));
    TimelineCanvas c;
    c.resize(1000, 400);
    c.show();
    QVERIFY(QTest::qWaitForWindowExposed(&c));
    auto t = std::make_shared<const inspect::Timeline>(inspect::syntheticTimeline(50'000, 2, 2));
    c.setTimeline(t);
    QVERIFY(settle(&c));
    QVERIFY2(c.glReady(), qPrintable(c.glError()));
    QVERIFY(c.frameCount() > 0);
    QVERIFY(c.lastBoxCount() > 0);
    QCOMPARE(static_cast<size_t>(c.lastBoxEvents()), t->events.size());  // fitted: every event, folded
    QImage img = c.grabFramebuffer();
    QVERIFY(drawnPixels(img, c.palette().color(QPalette::Base)) > 2000);

    // Idle: no frames without input.
    int64_t idle = c.frameCount();
    QTest::qWait(300);
    QCOMPARE(c.frameCount(), idle);

    // Wheel up three steps at x = 300 of the event area: 0.8^3 of the span, the time under the cursor kept.
    QRectF area = c.eventArea();
    inspect::TimeWindow before = c.window();
    double anchor = before.ns(300);
    sendWheel(&c, QPointF(area.left() + 300, area.top() + 60), 3);
    QVERIFY(settle(&c));
    inspect::TimeWindow after = c.window();
    QVERIFY2(std::abs(after.nsPerPx / before.nsPerPx - 0.512) < 0.01, qPrintable(QString::number(after.nsPerPx / before.nsPerPx)));
    QVERIFY(std::abs(after.ns(300) - anchor) < 2 * after.nsPerPx);
    QVERIFY(c.lastBoxEvents() < t->events.size());

    // Drag 200 px left: the window moves 200 px later.
    QPoint from(static_cast<int>(area.left()) + 500, static_cast<int>(area.top()) + 60);
    QTest::mousePress(&c, Qt::LeftButton, {}, from);
    QTest::mouseMove(&c, from - QPoint(100, 0));
    QTest::mouseMove(&c, from - QPoint(200, 0));
    QTest::mouseRelease(&c, Qt::LeftButton, {}, from - QPoint(200, 0));
    QVERIFY(settle(&c));
    QVERIFY2(std::abs(c.window().startNs - (after.startNs + 200 * after.nsPerPx)) < 1.5 * after.nsPerPx,
             qPrintable(QString("%1 vs %2").arg(c.window().startNs).arg(after.startNs + 200 * after.nsPerPx)));

    // Shift-drag from x 100 to 400: the range of those pixels.
    QSignalSpy range(&c, &TimelineCanvas::rangeChanged);
    inspect::TimeWindow w = c.window();
    QPoint a(static_cast<int>(area.left()) + 100, static_cast<int>(area.top()) + 60);
    QTest::mousePress(&c, Qt::LeftButton, Qt::ShiftModifier, a);
    QTest::mouseMove(&c, a + QPoint(150, 0));
    QTest::mouseMove(&c, a + QPoint(300, 0));
    QTest::mouseRelease(&c, Qt::LeftButton, Qt::ShiftModifier, a + QPoint(300, 0));
    QVERIFY(!range.isEmpty() || range.wait(3000));
    QVERIFY(std::abs(static_cast<double>(range.front()[0].toLongLong()) - w.ns(100)) <= w.nsPerPx);
    QVERIFY(std::abs(static_cast<double>(range.front()[1].toLongLong()) - w.ns(400)) <= w.nsPerPx);
    QVERIFY(c.range().has_value());

    // F fits the whole timeline again (animated); Esc clears the range.
    c.setFocus();
    QTest::keyClick(&c, Qt::Key_F);
    QTest::keyClick(&c, Qt::Key_Escape);
    QVERIFY(settle(&c));
    QCOMPARE(static_cast<size_t>(c.lastBoxEvents()), t->events.size());
    QVERIFY(!c.range().has_value());
  }

  // Profile ▶ in the IDE opens its result in the timeline; a click on a kernel selects its nodes in the
  // session, the graph and the IR text; a node selected in the graph marks its kernel's launches.
  void clickOnAKernelSelectsItsNodes() {
    if (!m_noGl.isEmpty()) QSKIP(qPrintable(m_noGl));
    QTemporaryDir dir;
    writeTinyProject(dir.path());
    MainWindow w;
    w.resize(1600, 1000);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndWait(w, dir.path()));
    TimelinePanel* panel = w.timelinePanel();
    QVERIFY(!panel->timeline());  // never profiled
    QSignalSpy finished(w.runController(), &RunController::finished);
    QSignalSpy loaded(panel, &TimelinePanel::loaded);
    w.action("profile")->trigger();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    QVERIFY(!loaded.isEmpty() || loaded.wait(30000));
    QVERIFY(panel->timeline() && !panel->timeline()->events.empty());
    QVERIFY2(panel->linked(), qPrintable(panel->linkError()));
    TimelineCanvas* c = panel->canvas();
    QVERIFY(c);
    QVERIFY(QTest::qWaitFor([&] { return c->isVisible() && c->height() > 100; }, 5000));

    // The known kernel: the longest launch of a kernel with several nodes, zoomed to fill the middle.
    const inspect::Timeline& t = *panel->timeline();
    int64_t event = -1;
    for (size_t i = 0; i < t.events.size(); ++i) {
      const auto* k = t.kernelOf(static_cast<uint32_t>(i));
      if (k && k->nodes.size() >= 2 && (event < 0 || t.events[i].durationNs > t.events[static_cast<size_t>(event)].durationNs))
        event = static_cast<int64_t>(i);
    }
    QVERIFY(event >= 0);
    const auto& e = t.events[static_cast<size_t>(event)];
    const inspect::TimelineKernel& kernel = *t.kernelOf(static_cast<uint32_t>(event));
    c->setWindow(static_cast<double>(e.startNs - e.durationNs), static_cast<double>(e.endNs() + e.durationNs));
    QVERIFY(settle(c));
    auto px = c->pixelOf(static_cast<uint32_t>(event));
    QVERIFY2(px.has_value(), "the kernel is not on screen");

    QSignalSpy clicked(c, &TimelineCanvas::eventClicked);
    QTest::mouseClick(c, Qt::LeftButton, {}, px->toPoint());
    QVERIFY(!clicked.isEmpty() || clicked.wait(5000));
    QCOMPARE(clicked.front()[0].toLongLong(), event);
    QCOMPARE(c->selectedEvent(), event);

    Session* s = w.session();
    QCOMPARE(s->currentStage(), s->profileStage());
    QCOMPARE(s->selectedNode(), kernel.nodes.front());
    QCOMPARE(s->selectedKernelNodes(), kernel.nodes);
    // The graph selects every node of the kernel (once the groups holding them are laid out).
    QVector<int> want(kernel.nodes.begin(), kernel.nodes.end());
    std::sort(want.begin(), want.end());
    QVERIFY2(QTest::qWaitFor([&] { return !w.graphPanel()->layoutRunning() && w.graphPanel()->selectedNodes() == want; }, 30000),
             qPrintable(QString("graph selects %1 nodes").arg(w.graphPanel()->selectedNodes().size())));
    // The IR text marks the first node's line and the others'.
    const inspect::Stage& stage = *s->stage();
    QCOMPARE(w.irPanel()->highlightedLine(), stage.nodeLines[static_cast<size_t>(kernel.nodes.front())]);
    QCOMPARE(w.irPanel()->editor()->extraSelections().size(), static_cast<qsizetype>(kernel.nodes.size()));

    // And back: a node of another kernel selected in the graph marks that kernel's launches.
    int otherKernel = -1;
    for (size_t k = 0; k < t.kernels.size() && otherKernel < 0; ++k)
      if (t.kernels[k].fusion != kernel.fusion && !t.kernels[k].events.empty()) otherKernel = static_cast<int>(k);
    QVERIFY(otherKernel >= 0);
    s->selectNode(t.kernels[static_cast<size_t>(otherKernel)].nodes.front());
    QCOMPARE(c->highlightedKernels(), std::vector<int>{otherKernel});
    QVERIFY(s->selectedKernelNodes().empty());

    // A click on empty space (above the first row, below the axis) selects no kernel.
    clicked.clear();
    QTest::mouseClick(c, Qt::LeftButton, {}, QPoint(static_cast<int>(c->eventArea().left()) + 5, c->height() - 3));
    QVERIFY(!clicked.isEmpty() || clicked.wait(5000));
    QCOMPARE(clicked.front()[0].toLongLong(), qint64(-1));

    // A range dragged with the right button fills the statistics table.
    c->fitAll();
    QVERIFY(settle(c));
    QRectF area = c->eventArea();
    QPoint a(static_cast<int>(area.left()) + 20, static_cast<int>(area.top()) + 40);
    QTest::mousePress(c, Qt::RightButton, {}, a);
    QTest::mouseMove(c, a + QPoint(200, 0));
    QTest::mouseMove(c, a + QPoint(400, 0));
    QTest::mouseRelease(c, Qt::RightButton, {}, a + QPoint(400, 0));
    QVERIFY(QTest::qWaitFor([&] { return panel->rangeStats().has_value(); }, 5000));
    const inspect::RangeStats& st = *panel->rangeStats();
    QVERIFY(st.count > 0);
    QCOMPARE(panel->statsTable()->rowCount(), static_cast<int>(st.kernels.size()));
    inspect::RangeStats ref = inspect::rangeStats(t, st.fromNs, st.toNs);
    QCOMPARE(st.count, ref.count);
    QCOMPARE(st.totalNs, ref.totalNs);

    // The picture: kernels drawn.
    QImage img = c->grabFramebuffer();
    QVERIFY(drawnPixels(img, c->palette().color(QPalette::Base)) > 1000);
  }

  // A profile larger than the panel holds whole: read a window at a time. The first window is the whole profile as
  // density; a narrow one comes as launches (exactly those a filter over all of them keeps); range statistics are
  // summed by SQLite; with a canvas, zooming in fetches the launches by itself.
  void largeProfileOpensAWindowAtATime() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.db");
    std::vector<store::KernelEvent> all;
    {
      auto s = store::RunStore::open(db.toStdString());
      QVERIFY(s.ok());
      auto run = s->createRun("big", "p", "");
      auto prof = s->createProfile(*run, "big", 0, 1);
      QVERIFY(s->addProfileKernels(*prof, {{0, "train_step", "fusion.0", "loop", {1}, {"add"}, ""},
                                          {1, "train_step", "fusion.1", "gemm", {2}, {"dot_general"}, ""}}).ok());
      int64_t t = 0;
      for (int i = 0; i < 20'000; ++i) {
        all.push_back({"cpu:0", i % 2, fmt::format("fusion.{}", i % 2), i % 2, t, 700 + (i % 7) * 100, 10, 20});
        t += 500;  // a stream launches every 1 us for 0.7 to 1.3 us: some overlap (deeper lanes)
      }
      QVERIFY(s->addKernelEvents(*prof, all).ok());
      QVERIFY(s->buildProfileLevels(*prof).ok());
    }
    Session session;
    TimelinePanel panel(&session);
    panel.setWholeProfileLimit(1000);
    QSignalSpy loaded(&panel, &TimelinePanel::loaded);
    panel.openProfile(db);
    QVERIFY(!loaded.isEmpty() || loaded.wait(10000));
    QVERIFY(panel.windows());
    QVERIFY(panel.windowData() && !panel.windowData()->raw);
    QCOMPARE(panel.timeline()->rows.size(), size_t(2));
    QCOMPARE(panel.timeline()->events.size(), size_t(0));
    QCOMPARE(panel.timeline()->rows[0].numEvents, uint32_t(10'000));

    auto naive = [&](int64_t from, int64_t to) {
      return std::count_if(all.begin(), all.end(),
                           [&](const auto& e) { return e.startNs <= to && e.startNs + e.durationNs >= from; });
    };
    panel.requestWindow(1'000'000, 1'200'000, 100);
    QTRY_VERIFY_WITH_TIMEOUT(!panel.fetching() && panel.windowData()->raw, 10000);
    QCOMPARE(static_cast<int64_t>(panel.timeline()->events.size()), static_cast<int64_t>(naive(1'000'000, 1'200'000)));
    panel.setRange(2'000'000, 3'000'000);
    QTRY_VERIFY_WITH_TIMEOUT(!panel.fetching() && panel.rangeStats().has_value(), 10000);
    QCOMPARE(panel.rangeStats()->count,
             static_cast<int64_t>(std::count_if(all.begin(), all.end(), [](const auto& e) {
               return e.startNs < 3'000'000 && e.startNs + e.durationNs > 2'000'000;
             })));
    QCOMPARE(panel.statsTable()->rowCount(), 2);

    if (!m_noGl.isEmpty()) return;
    panel.resize(1200, 700);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    TimelineCanvas* c = panel.canvas();
    QVERIFY(c);
    c->fitAll();
    c->renderNow();
    QTRY_VERIFY_WITH_TIMEOUT(!panel.fetching() && c->windowData() && !c->windowData()->raw, 10000);
    QImage coarse = c->grabFramebuffer();
    QVERIFY(drawnPixels(coarse, c->palette().color(QPalette::Base)) > 1000);  // density bars
    c->setWindow(4'000'000, 4'100'000);
    c->renderNow();
    QTRY_VERIFY_WITH_TIMEOUT(!panel.fetching() && c->windowData()->raw, 10000);
    c->renderNow();
    QVERIFY(c->lastBoxEvents() > 0);
    QCOMPARE(static_cast<int64_t>(c->timeline()->events.size()), static_cast<int64_t>(naive(c->windowData()->fromNs, c->windowData()->toNs)));
  }

  // Without the canvas: a trace file loads, links to nothing without a kernel table, and statistics work.
  // Compare…: run 1's profile against run 2's (the same graph compiled again, its fusion ids renumbered) shows a
  // step of each and lists the kernels paired by node with their times per step (by hand: the gemm 350 -> 150 ns,
  // the loop 150 -> 100 ns), the largest change first; opening a profile again ends the comparison.
  void twoRunsCompareOnTheTimeline() {
    QTemporaryDir dir;
    const QString db = dir.filePath("runs.db");
    {
      auto s = store::RunStore::open(db.toStdString());
      QVERIFY(s.ok());
      for (int64_t base : {0, 5}) {
        auto run = s->createRun(base == 0 ? "before" : "after", "p", "");
        auto prof = s->createProfile(*run, "steps 1-2", 1, 2);
        QVERIFY(s->addProfileKernels(*prof, {{base, "train_step", fmt::format("fusion.{} gemm", base), "gemm", {1},
                                               {"dot_general"}, "h.0"},
                                              {base + 1, "train_step", fmt::format("fusion.{} loop", base + 1), "loop",
                                               {2, 3}, {"add", "gelu"}, "h.0"}}).ok());
        const int64_t gemm = base == 0 ? 350 : 150, loop = base == 0 ? 150 : 100;
        std::vector<store::KernelEvent> events;
        for (int64_t step = 0; step < 2; ++step) {
          events.push_back({"cpu:0", 0, "gemm", base, 1000 * step + 10, gemm, 0, 0});
          events.push_back({"cpu:0", 0, "loop", base + 1, 1000 * step + 500, loop, 0, 0});
        }
        QVERIFY(s->addKernelEvents(*prof, events).ok());
        QVERIFY(s->addProfileMarks(*prof, {{"step 1", 0, 1000}, {"step 2", 1000, 1000}}).ok());
      }
    }
    Session session;
    TimelinePanel panel(&session);
    QSignalSpy loaded(&panel, &TimelinePanel::loaded);
    panel.openProfile(db, 1);
    QVERIFY(!loaded.isEmpty() || loaded.wait(10000));
    QVERIFY(!panel.comparison());
    auto candidates = panel.compareCandidates();
    QCOMPARE(candidates.size(), size_t(1));
    QCOMPARE(candidates[0].first, qint64(2));
    loaded.clear();
    panel.compareRuns(db, 1, 2);
    QVERIFY(!loaded.isEmpty() || loaded.wait(10000));
    QVERIFY(panel.comparison());
    QCOMPARE(panel.timeline()->rows.size(), size_t(2));
    QCOMPARE(panel.timeline()->rows[1].device, std::string("B · cpu:0"));
    QTableWidget* table = panel.statsTable();
    QCOMPARE(table->rowCount(), 2);
    QCOMPARE(table->horizontalHeaderItem(0)->text(), QString("Kernel (A)"));
    QCOMPARE(table->item(0, 0)->text(), QString("fusion.0 gemm"));
    QCOMPARE(table->item(0, 1)->text(), QString("fusion.5 gemm"));
    QVERIFY2(table->item(0, 5)->text().startsWith(QString("−")), qPrintable(table->item(0, 5)->text()));
    QCOMPARE(table->item(1, 0)->text(), QString("fusion.1 loop"));
    auto* colour = panel.findChild<QComboBox*>();
    QVERIFY(colour);
    QCOMPARE(colour->currentData().toString(), QString("change"));
    if (panel.canvas()) QCOMPARE(panel.canvas()->colourBy(), TimelineCanvas::ColourBy::Change);
    // Back to a profile of its own: no comparison, no change colouring.
    loaded.clear();
    panel.openProfile(db, 2);
    QVERIFY(!loaded.isEmpty() || loaded.wait(10000));
    QVERIFY(!panel.comparison());
    QCOMPARE(colour->findData("change"), -1);
    QCOMPARE(table->horizontalHeaderItem(0)->text(), QString("Kernel"));
  }

  void traceFileLoadsInThePanel() {
    QTemporaryDir dir;
    runtime::Trace trace;
    trace.events = {{"cpu:0", 0, "a", -1, 1000, 500, 10, 20, -1, {}}, {"cpu:0", 1, "b", -1, 1200, 300, 0, 0, -1, {}},
                    {"cuda:0", 3, "a", -1, 1100, 100, 0, 0, -1, {}}};
    writeFile(dir.filePath("t.json"), QByteArray::fromStdString(runtime::toChromeTrace(trace)));
    Session session;
    TimelinePanel panel(&session);
    QSignalSpy loaded(&panel, &TimelinePanel::loaded);
    panel.openTrace(dir.filePath("t.json"));
    QVERIFY(!loaded.isEmpty() || loaded.wait(10000));
    QCOMPARE(panel.timeline()->events.size(), size_t(3));
    QCOMPARE(panel.timeline()->rows.size(), size_t(3));
    QVERIFY(!panel.linked());
    panel.setRange(0, 400);
    QVERIFY(panel.rangeStats().has_value());
    QCOMPARE(panel.rangeStats()->count, int64_t(3));
    QCOMPARE(panel.statsTable()->rowCount(), 2);
    panel.selectEvent(0);  // no graph: nothing selected there, nothing breaks
    QCOMPARE(session.selectedNode(), -1);
    QSignalSpy failed(&panel, &TimelinePanel::failed);
    panel.openTrace(dir.filePath("missing.json"));
    QVERIFY(!failed.isEmpty() || failed.wait(10000));
    if (!m_noGl.isEmpty()) {
      QVERIFY(!panel.canvas());
      QVERIFY(!panel.canvasError().isEmpty());
    }
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestTimeline)
#include "test_timeline.moc"
