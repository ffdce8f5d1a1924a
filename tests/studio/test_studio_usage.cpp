// The IDE as a user meets it (offscreen): a model.py that does not trace says where in one line, the Timeline
// follows the project that is open (its profile, or that it has none), the Runs table fits its cells, the
// command palette highlights what can run, code keeps clear of its line numbers and a docstring stays a string,
// and every panel has a name for --screenshot and a way to it from the keyboard.
#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QLabel>
#include <QSettings>
#include <QSignalBlocker>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QHeaderView>
#include <QTableView>
#include <QTreeView>
#include <QTest>
#include <QTextBlock>
#include <QTextDocument>
#include <QTextLayout>

#include <algorithm>
#include <cmath>
#include <functional>

#include "app/studio/command_palette.h"
#include "app/studio/main_window.h"
#include "engine/project/python_family.h"
#include "tests/studio/studio_test_util.h"
#include "views/code_edit.h"
#include "views/memory_panel.h"
#include "views/param_tree_model.h"
#include "views/project_panel.h"
#include "views/roofline_panel.h"
#include "views/run_controller.h"
#include "views/runs_panel.h"
#include "views/source_panel.h"
#include "views/timeline_panel.h"

using namespace tsr;
using namespace tsr::studio;
using namespace tsr::studio::test;

namespace {

// A three-layer MLP on synthetic digits: compiled, trained and profiled in seconds.
QByteArray tinyMlp(const QByteArray& name) {
  return "[project]\nname = \"" + name + "\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n"
         "[data]\nkind = \"synthetic-digits\"\n[train]\nsteps = 4\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\n"
         "warmup_steps = 0\neval_every = 0\nlog_every = 1\n";
}

QString timelineLabel(MainWindow& w) {
  auto* label = w.timelinePanel()->findChild<QLabel*>("timelineSource");
  return label ? label->text() : QString("(no label)");
}

// Runs an action of the Run menu to its end; false (with the message) when it fails.
bool runToEnd(MainWindow& w, const char* action) {
  QSignalSpy finished(w.runController(), &RunController::finished);
  w.action(action)->trigger();
  if (!finished.wait(120000)) return false;
  if (!finished.front()[0].toBool()) qWarning("%s", qPrintable(finished.front()[1].toString()));
  return finished.front()[0].toBool();
}

}  // namespace

class TestStudioUsage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    initStudioTest("StudioUsageTest", TSR_TESSERA_BIN);
  }

  // A model.py with a syntax error: the Project panel and the status bar say "model.py:LINE: the exception" in
  // one line (the traceback, with Python's ^^^^ underlines, is in the console and the tooltip). The whole
  // traceback in the panel's label made the dock, and the window, wider than the screen.
  void pythonTraceFailureIsOneLineWithFileAndLine() {
    if (auto fe = project::pythonFrontEnd(); !fe.ok()) QSKIP(fe.error().message.c_str());
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"),
              "[model]\npython = \"model.py\"\ninput_shape = [12]\nclasses = 3\n[data]\nkind = \"synthetic-digits\"\n"
              "[train]\nbatch_size = 8\n");
    writeFile(dir.filePath("model.py"),
              "import tessera.numpy as tnp\n\ndef init(key, cfg):\n    return {'w': tnp.zeros((12, 3))}\n"
              "      (\ndef loss(params, batch, key):\n    return tnp.mean(batch[0] @ params['w'])\n");
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const int width = w.width();
    QSignalSpy failed(w.session(), &Session::projectFailed);
    w.openProject(dir.path());
    QVERIFY(failed.wait(60000));
    QVERIFY2(failed.front().front().toString().contains("Traceback"), qPrintable(failed.front().front().toString()));
    QTest::qWait(50);

    auto* summary = w.findChild<QLabel*>("projectSummary");
    QVERIFY(summary);
    const QString model = QDir(dir.path()).filePath("model.py");
    QVERIFY2(summary->text().contains(model + ":5: IndentationError"), qPrintable(summary->text()));
    QVERIFY2(!summary->text().contains("Traceback") && !summary->text().contains("^^"), qPrintable(summary->text()));
    QVERIFY2(summary->toolTip().contains("Traceback"), qPrintable(summary->toolTip()));
    const QString status = w.statusBar()->currentMessage();
    QVERIFY2(status.contains(model + ":5: IndentationError") && !status.contains("Traceback"), qPrintable(status));
    QCOMPARE(w.width(), width);
  }

  // The Timeline shows the open project's profile: a store that holds runs but no profile says "No profile"
  // (it said "Loading …runs.db…" for good), and opening another project drops the last one's profile (it stayed,
  // under the new project's name).
  void timelineFollowsTheOpenProject() {
    QTemporaryDir a, b;
    writeFile(a.filePath("project.toml"), tinyMlp("tiny_a"));
    writeFile(b.filePath("project.toml"), tinyMlp("tiny_b"));
    MainWindow w;
    QVERIFY(openAndWait(w, a.path()));
    QCOMPARE(timelineLabel(w), QString("No profile"));

    // Trained, not profiled: the store exists and has no profile.
    QVERIFY(runToEnd(w, "run"));
    QVERIFY(QFileInfo::exists(w.session()->runsDbPath()));
    QSignalSpy timelineFailed(w.timelinePanel(), &TimelinePanel::failed);
    QVERIFY(openAndWait(w, a.path()));
    QVERIFY(!timelineFailed.isEmpty() || timelineFailed.wait(30000));
    QVERIFY(QTest::qWaitFor([&] { return !w.timelinePanel()->loading(); }, 30000));
    QTest::qWait(10);
    QCOMPARE(timelineLabel(w), QString("No profile"));
    QVERIFY(!w.timelinePanel()->timeline());

    // Profiled: the timeline shows it (a load that failed says why).
    QSignalSpy loaded(w.timelinePanel(), &TimelinePanel::loaded);
    QSignalSpy loadFailed(w.timelinePanel(), &TimelinePanel::failed);
    QVERIFY(runToEnd(w, "profile"));
    QVERIFY2(QTest::qWaitFor([&] { return !loaded.isEmpty(); }, 30000),
             qPrintable(loadFailed.isEmpty() ? "no answer: " + timelineLabel(w)
                                             : "failed: " + loadFailed.back()[0].toString()));
    QVERIFY(w.timelinePanel()->timeline());
    QVERIFY2(timelineLabel(w).contains("runs.db"), qPrintable(timelineLabel(w)));

    // Another project, never run: nothing of the first one's is left.
    QVERIFY(openAndWait(w, b.path()));
    QVERIFY(!w.timelinePanel()->timeline());
    QCOMPARE(timelineLabel(w), QString("No profile"));

    // Back to the first: its profile again.
    QSignalSpy reloaded(w.timelinePanel(), &TimelinePanel::loaded);
    QVERIFY(openAndWait(w, a.path()));
    QVERIFY(!reloaded.isEmpty() || reloaded.wait(30000));
    QVERIFY(w.timelinePanel()->timeline());
  }

  // The Runs table shows each metric's latest value (its range in the tooltip) and fits its cells: a metric's
  // "2.9647 (min 2.5628, max 6.2725)" and the start date were cut and wrapped onto a second line.
  void runsTableFitsItsCells() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), tinyMlp("tiny_runs"));
    MainWindow w;
    w.show();
    QVERIFY(openAndWait(w, dir.path()));
    QVERIFY(runToEnd(w, "run"));
    RunsPanel* runs = w.runsPanel();
    QVERIFY(refreshRuns(runs));
    RunsTableModel* model = runs->model();
    QCOMPARE(model->rowCount(), 1);
    int lossColumn = -1, startedColumn = -1;
    for (int c = 0; c < model->columnCount(); ++c) {
      const QString header = model->headerData(c, Qt::Horizontal).toString();
      if (header == "loss") lossColumn = c;
      if (header == "Started") startedColumn = c;
    }
    QVERIFY(lossColumn > 0 && startedColumn > 0);
    const inspect::MetricStats& loss = model->runs().front().metrics.at("loss");
    const QString cell = model->index(0, lossColumn).data().toString();
    bool number = false;
    QVERIFY2(std::abs(cell.toDouble(&number) - loss.latest) <= 1e-4 * std::abs(loss.latest) && number, qPrintable(cell));
    const QString tip = model->index(0, lossColumn).data(Qt::ToolTipRole).toString();
    QVERIFY2(tip.contains("min") && tip.contains("max") && tip.contains(QString("step %1").arg(loss.lastStep)), qPrintable(tip));
    QTableView* table = runs->table();
    QTest::qWait(10);
    for (int c : {startedColumn, lossColumn}) {
      const QString text = model->index(0, c).data().toString();
      QVERIFY2(table->columnWidth(c) >= table->fontMetrics().horizontalAdvance(text),
               qPrintable(QString("%1: %2 px for %3").arg(c).arg(table->columnWidth(c)).arg(text)));
    }
    QVERIFY(!table->wordWrap());
  }

  // The parameter tree's counts are in sight at the Project dock's default width: Elements and Bytes come after
  // the name, before the shape and dtype, and are as wide as their numbers. They were cut at the dock's edge
  // ("65,53", "396,54" for gpt2_mini).
  void parameterCountsFitTheProjectDock() {
    QSettings().remove("window");
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QVERIFY(openAndWait(w, QStringLiteral(TSR_SOURCE_DIR "/sample_projects/gpt2_mini")));
    QTreeView* tree = w.projectPanel()->paramView();
    QAbstractItemModel* model = tree->model();
    QTest::qWait(10);
    // The texts shown, every row the tree has open.
    QStringList counts, bytes;
    std::function<void(const QModelIndex&)> walk = [&](const QModelIndex& parent) {
      for (int r = 0; r < model->rowCount(parent); ++r) {
        counts << model->index(r, ParamTreeModel::Count, parent).data().toString();
        bytes << model->index(r, ParamTreeModel::Bytes, parent).data().toString();
        if (tree->isExpanded(model->index(r, 0, parent))) walk(model->index(r, 0, parent));
      }
    };
    walk({});
    QVERIFY(counts.contains("65,536"));  // wte.weight: [512, 128]
    QHeaderView* h = tree->header();
    for (auto [column, texts] : {std::pair{int(ParamTreeModel::Count), counts}, std::pair{int(ParamTreeModel::Bytes), bytes}}) {
      int widest = tree->fontMetrics().horizontalAdvance(model->headerData(column, Qt::Horizontal).toString());
      for (const QString& t : texts) widest = std::max(widest, tree->fontMetrics().horizontalAdvance(t));
      QVERIFY2(h->sectionSize(column) >= widest, qPrintable(QString("column %1: %2 px for %3 px").arg(column).arg(h->sectionSize(column)).arg(widest)));
      QVERIFY2(h->sectionViewportPosition(column) + h->sectionSize(column) <= tree->viewport()->width(),
               qPrintable(QString("column %1 ends at %2 of %3 px").arg(column)
                              .arg(h->sectionViewportPosition(column) + h->sectionSize(column))
                              .arg(tree->viewport()->width())));
    }
  }

  // The command palette highlights the best match that can run: before a project is open the best matches for
  // "run" (Run › Stop, Run ▶ Train) are disabled, and Enter on it closed the palette having done nothing. With only
  // disabled matches nothing is highlighted and Enter leaves the palette open.
  void commandPaletteHighlightsWhatCanRun() {
    MainWindow w;
    const QList<QAction*> actions = w.allActions();
    auto actionOf = [&](const QString& row) -> QAction* {
      for (QAction* a : actions)
        if (row.startsWith(actionTitle(a))) return a;
      return nullptr;
    };
    QVERIFY(!w.action("run")->isEnabled());
    CommandPalette palette(actions);
    palette.setFilter("run");
    const QStringList rows = palette.visibleCommands();
    QVERIFY2(actionOf(rows.front()) && !actionOf(rows.front())->isEnabled(), qPrintable(rows.join("\n")));
    QAction* current = actionOf(palette.currentCommand());
    QVERIFY2(current && current->isEnabled(), qPrintable(palette.currentCommand()));
    QCOMPARE(palette.currentCommand(), rows.at(static_cast<int>(std::distance(
        rows.begin(), std::find_if(rows.begin(), rows.end(), [&](const QString& r) { return actionOf(r)->isEnabled(); })))));

    palette.setFilter("Profile");
    QCOMPARE(palette.visibleCommands().size(), 1);
    QCOMPARE(palette.currentCommand(), QString());
    palette.show();
    palette.runCurrent();
    QVERIFY(palette.isVisible());
    QCOMPARE(palette.result(), 0);
  }

  // The line numbers' margin widens with the numbers when the text is set with the editor's signals blocked, as
  // the Source panel sets model.py: with 100 lines or more the margin stayed two digits wide (24 px) under
  // numbers three digits wide (31 px), which covered the first letter of every line.
  void codeEditMarginFitsItsNumbers() {
    CodeEdit edit;
    edit.resize(400, 200);
    edit.show();
    QVERIFY(QTest::qWaitForWindowExposed(&edit));
    const int twoDigits = edit.numbersWidth();
    QString text;
    for (int i = 1; i <= 120; ++i) text += QString("x = %1\n").arg(i);
    {
      QSignalBlocker block(&edit);
      edit.setPlainText(text);
    }
    QApplication::processEvents();
    QVERIFY(edit.numbersWidth() > twoDigits);
    QCOMPARE(edit.viewport()->x() - edit.contentsRect().left(), edit.numbersWidth());
    // The numbers' widget is the margin's width, at the editor's left edge.
    int gutters = 0;
    for (QWidget* child : edit.findChildren<QWidget*>(Qt::FindDirectChildrenOnly))
      if (child->x() == edit.contentsRect().left() && child->height() > 100) {
        QCOMPARE(child->width(), edit.numbersWidth());
        ++gutters;
      }
    QCOMPARE(gutters, 1);
  }

  // The Source panel's highlighting keeps a docstring a string to its closing quotes: from its third line on it
  // was highlighted as code (its "and" and "in" as keywords), the state lost on the second.
  void docstringIsAStringToItsEnd() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), "[model]\npython = \"model.py\"\n");
    writeFile(dir.filePath("model.py"), "\"\"\"A model.\n\nthe names and the layout\nin order\n\"\"\"\nimport math\n");
    MainWindow w;
    QSignalSpy failed(w.session(), &Session::projectFailed);
    QSignalSpy opened(w.session(), &Session::projectOpened);
    w.openProject(dir.path());
    QVERIFY(QTest::qWaitFor([&] { return !failed.isEmpty() || !opened.isEmpty(); }, 60000));
    QTextDocument* doc = w.sourcePanel()->editor()->document();
    QCOMPARE(doc->blockCount(), 7);
    // The colour of the text at a line's start, as the highlighter formatted it.
    auto colourAt = [&](int line) {
      const QTextBlock block = doc->findBlockByNumber(line - 1);
      for (const QTextLayout::FormatRange& r : block.layout()->formats())
        if (r.start == 0 && r.length > 0) return r.format.foreground().color();
      return QColor();
    };
    const QColor string(0, 128, 0);
    for (int line : {1, 3, 4, 5}) QVERIFY2(colourAt(line) == string, qPrintable(QString("line %1").arg(line)));
    QVERIFY(colourAt(6) != string);  // import math: code again
  }

  // Memory, Roofline and Source are panels like the others: --screenshot renders them (panels() left them out)
  // and View has a Show action for each (they had none, so no key reached them); Alt+9 is Memory.
  void everyPanelHasANameAndAShowAction() {
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const QMap<QString, QWidget*> panels = w.panels();
    QCOMPARE(panels.value("memory"), static_cast<QWidget*>(w.memoryPanel()));
    QCOMPARE(panels.value("roofline"), static_cast<QWidget*>(w.rooflinePanel()));
    QCOMPARE(panels.value("source"), static_cast<QWidget*>(w.sourcePanel()));
    for (const char* name : {"project", "ir", "inspector", "metrics", "runs", "console", "timeline", "sharding",
                                "memory", "roofline", "source"})
      QVERIFY2(w.action(QString("show_") + name), name);
    QCOMPARE(w.action("show_memory")->shortcut(), QKeySequence(Qt::ALT | Qt::Key_9));
    for (const char* name : {"show_memory", "show_roofline", "show_source"}) {
      w.action(name)->trigger();
      QWidget* panel = panels.value(QString(name).mid(5));
      QVERIFY2(QTest::qWaitFor([&] { return panel->isVisible() && !panel->visibleRegion().isEmpty(); }, 2000), name);
    }
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestStudioUsage)
#include "test_studio_usage.moc"
