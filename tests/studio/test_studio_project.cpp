// Fixing a project from inside the IDE (offscreen): a timeline whose profile no longer shows the project says so
// and profiles it again from its banner; a project.toml that does not parse opens in an editor with its error's
// line marked, and saving it opens the project once it is fixed.
#include <QAction>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>

#include "app/studio/main_window.h"
#include "tests/studio/studio_test_util.h"
#include "views/console_panel.h"
#include "views/graph_panel.h"
#include "views/ir_panel.h"
#include "views/metrics_panel.h"
#include "views/param_tree_model.h"
#include "views/project_panel.h"
#include "views/run_controller.h"
#include "views/runs_panel.h"
#include "views/session.h"
#include "views/timeline_panel.h"

using namespace tsr;
using namespace tsr::studio;
using namespace tsr::studio::test;

namespace {

QByteArray readFile(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// A three-layer MLP on synthetic digits: compiled and profiled in seconds.
QByteArray tinyMlp(const QByteArray& sizes = "[784, 16, 10]", const QByteArray& lr = "0.1") {
  return "[project]\nname = \"tiny\"\n[model]\nfamily = \"mlp\"\nsizes = " + sizes +
         "\n[data]\nkind = \"synthetic-digits\"\n[train]\nsteps = 6\nbatch_size = 32\noptimizer = \"sgd\"\nlr = " + lr +
         "\nwarmup_steps = 0\neval_every = 0\nlog_every = 1\n";
}

// What the window shows of the open project: graph boxes, IR lines, parameter rows.
int graphBoxes(MainWindow& w) { return w.graphPanel()->visibleNodeCount() + static_cast<int>(w.graphPanel()->visibleGroups().size()); }
bool showsAProject(MainWindow& w) {
  return graphBoxes(w) > 0 && !w.irPanel()->editor()->toPlainText().isEmpty() && w.projectPanel()->paramModel()->rowCount() > 0;
}
bool showsNoProject(MainWindow& w) {
  return graphBoxes(w) == 0 && w.irPanel()->editor()->toPlainText().isEmpty() && w.projectPanel()->paramModel()->rowCount() == 0;
}

// The banner of a stale profile, when it is shown (not merely not hidden: the panel need not be on screen).
QWidget* staleBanner(MainWindow& w) {
  auto* banner = w.timelinePanel()->findChild<QWidget*>("timelineStaleBanner");
  return banner && !banner->isHidden() ? banner : nullptr;
}

// What the banner says.
QString staleText(MainWindow& w) {
  QWidget* banner = staleBanner(w);
  QLabel* text = banner ? banner->findChild<QLabel*>() : nullptr;
  return text ? text->text() : QString();
}

// Reopens the project and waits until the timeline shows its latest profile, linked to the compiled step.
bool reopenWithTimeline(MainWindow& w, const QString& dir) {
  QSignalSpy loaded(w.timelinePanel(), &TimelinePanel::loaded);
  if (!openAndWait(w, dir)) return false;
  return (!loaded.isEmpty() || loaded.wait(30000)) && QTest::qWaitFor([&] { return !w.timelinePanel()->loading(); }, 30000);
}

}  // namespace

class TestStudioProject : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    initStudioTest("StudioProjectTest", TSR_TESSERA_BIN);
  }

  // The timeline's profile is compared with the project as it is: project.toml edited since (a learning rate),
  // or a step that compiles to other kernels (a wider layer), make it stale; the banner says which, and its
  // Re-profile runs Run ▶ Profile, after which the new profile is current again.
  void staleTimelineOffersToProfileAgain() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), tinyMlp());
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    QSignalSpy finished(w.runController(), &RunController::finished);
    QSignalSpy loaded(w.timelinePanel(), &TimelinePanel::loaded);
    w.action("profile")->trigger();
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    QVERIFY(loaded.wait(30000));
    QVERIFY2(w.timelinePanel()->linked(), qPrintable(w.timelinePanel()->linkError()));
    QVERIFY2(!staleBanner(w), qPrintable(staleText(w)));

    // Another learning rate: the same step, another project.toml.
    writeFile(dir.filePath("project.toml"), tinyMlp("[784, 16, 10]", "0.05"));
    QVERIFY(reopenWithTimeline(w, dir.path()));
    QVERIFY(staleBanner(w));
    QVERIFY2(staleText(w).contains("project.toml was edited"), qPrintable(staleText(w)));

    // Re-profile: Run ▶ Profile again; the new profile is the project's.
    auto* reprofile = w.timelinePanel()->findChild<QPushButton*>("reprofileButton");
    QVERIFY(reprofile && reprofile->isEnabled());
    finished.clear();
    loaded.clear();
    QTest::mouseClick(reprofile, Qt::LeftButton);
    QCOMPARE(w.runController()->command(), QString("profile"));
    QVERIFY(!reprofile->isEnabled());  // one profile at a time
    QVERIFY(finished.wait(120000));
    QVERIFY2(finished.front()[0].toBool(), qPrintable(finished.front()[1].toString()));
    QVERIFY(loaded.wait(30000));
    QVERIFY2(!staleBanner(w), qPrintable(staleText(w)));
    QVERIFY(reprofile->isEnabled());

    // Opened again as it is: still current.
    QVERIFY(reopenWithTimeline(w, dir.path()));
    QVERIFY2(!staleBanner(w), qPrintable(staleText(w)));
    // A wider hidden layer: another step, another project.toml.
    writeFile(dir.filePath("project.toml"), tinyMlp("[784, 24, 10]", "0.05"));
    QVERIFY(reopenWithTimeline(w, dir.path()));
    QVERIFY(staleBanner(w));
    QVERIFY2(staleText(w).contains("project.toml was edited"), qPrintable(staleText(w)));
  }

  // A project that does not open replaces the one that was open: nothing of the last one stays on screen (its
  // graph, IR and parameters), Run ▶ and Profile ▶ are off with the reason in their tooltips, and the title, the
  // Project panel and the console name the new project's error. It was the other way: the last project stayed,
  // and Run trained it under the new one's error. The same when the open project itself breaks; fixed, it opens
  // and runs again.
  void brokenProjectReplacesTheOpenOne() {
    QTemporaryDir a, b;
    QByteArray broken = tinyMlp();
    broken.replace("steps = 6", "stpes = 6");
    writeFile(a.filePath("project.toml"), tinyMlp());
    writeFile(b.filePath("project.toml"), broken);
    MainWindow w;
    QVERIFY(openAndWait(w, a.path()));
    QVERIFY(showsAProject(w));
    QVERIFY(w.action("run")->isEnabled() && w.action("profile")->isEnabled());

    auto failOpening = [&](const QString& dir) {
      QSignalSpy failed(w.session(), &Session::projectFailed);
      w.openProject(dir);
      QVERIFY(failed.isEmpty() ? failed.wait(30000) : true);
      QVERIFY(!w.session()->project());
      QVERIFY(!w.session()->stages());
      QVERIFY2(showsNoProject(w), qPrintable(QString("%1 boxes, %2 IR characters, %3 parameters")
                                                   .arg(graphBoxes(w))
                                                   .arg(w.irPanel()->editor()->toPlainText().size())
                                                   .arg(w.projectPanel()->paramModel()->rowCount())));
      for (const char* name : {"run", "profile", "resume", "eval"}) {
        QVERIFY2(!w.action(name)->isEnabled(), name);
        QVERIFY2(w.action(name)->toolTip().contains("did not open"), qPrintable(w.action(name)->toolTip()));
      }
      const QString folder = QFileInfo(dir).fileName();
      QVERIFY2(w.windowTitle().startsWith(folder) && w.windowTitle().contains("did not open"), qPrintable(w.windowTitle()));
      auto* summary = w.findChild<QLabel*>("projectSummary");
      QVERIFY2(summary && summary->text().contains("stpes"), qPrintable(summary ? summary->text() : QString()));
      QVERIFY(w.consolePanel()->plainText().contains("stpes"));
      // The Runs and Metrics panels say why they show nothing (the Runs panel said "No project: no runs.").
      for (QWidget* panel : {static_cast<QWidget*>(w.runsPanel()), static_cast<QWidget*>(w.metricsPanel())}) {
        QStringList texts;
        for (auto* label : panel->findChildren<QLabel*>()) texts << label->text();
        QVERIFY2(texts.join('\n').contains("the project did not open"), qPrintable(texts.join(" | ")));
      }
      // F5 (or the command palette) asks anyway: nothing starts.
      QSignalSpy started(w.runController(), &RunController::started);
      w.startRun();
      w.startProfile();
      QVERIFY(started.isEmpty() && !w.runController()->running());
    };
    // Another project that does not open.
    failOpening(b.path());
    if (QTest::currentTestFailed()) return;
    // Fixed: it opens, and runs.
    writeFile(b.filePath("project.toml"), tinyMlp());
    QVERIFY(openAndWait(w, b.path()));
    QVERIFY(showsAProject(w));
    QVERIFY(w.action("run")->isEnabled() && w.action("profile")->isEnabled());
    QVERIFY2(!w.windowTitle().contains("did not open"), qPrintable(w.windowTitle()));
    // The open project broken on disk and opened again.
    writeFile(b.filePath("project.toml"), broken);
    failOpening(b.path());
  }

  // A project.toml that does not parse: the error (file and line) with "Open project.toml", which opens the file
  // in an editor with line numbers, the error's line marked and the cursor on it. Saving opens the project again:
  // still broken, the new error is marked; fixed, the project loads and the editor closes.
  void brokenProjectTomlIsFixedInTheIde() {
    QTemporaryDir dir;
    QByteArray good = tinyMlp();
    QByteArray broken = good;
    broken.replace("steps = 6", "stpes = 6");  // line 9
    writeFile(dir.filePath("project.toml"), broken);
    MainWindow w;
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QSignalSpy failed(w.session(), &Session::projectFailed);
    QSignalSpy opened(w.session(), &Session::projectOpened);
    w.openProject(dir.path());
    QVERIFY(failed.wait(20000));
    QString message = failed.front().front().toString();
    QVERIFY2(message.contains("project.toml:9") && message.contains("stpes"), qPrintable(message));

    auto* open = w.projectPanel()->findChild<QPushButton*>("openProjectTomlButton");
    QVERIFY(open && open->isVisible());
    QTest::mouseClick(open, Qt::LeftButton);
    auto* editor = w.findChild<QPlainTextEdit*>("projectTomlEditor");
    QVERIFY(editor && editor->isVisible());
    QCOMPARE(editor->toPlainText(), QString::fromUtf8(broken));
    auto markedLines = [&] {
      QList<int> lines;
      for (const auto& sel : editor->extraSelections()) lines << sel.cursor.blockNumber() + 1;
      return lines;
    };
    QCOMPARE(markedLines(), QList<int>{9});
    QCOMPARE(editor->textCursor().blockNumber() + 1, 9);
    QVERIFY2(editor->viewport()->geometry().left() > 10, "line numbers in the margin");
    auto* error = w.findChild<QLabel*>("projectTomlError");
    QVERIFY(error && error->text().contains("stpes"));

    // Typing: the mark follows the parser. The typo fixed and another made (line 4's family); saved, the project
    // fails again with that error marked.
    QTextCursor c(editor->document()->findBlockByNumber(8));
    c.select(QTextCursor::LineUnderCursor);
    c.insertText("steps = 6");
    QTextCursor family(editor->document()->findBlockByNumber(3));
    family.select(QTextCursor::LineUnderCursor);
    family.insertText("family = \"mpl\"");
    QTRY_COMPARE(markedLines(), QList<int>{4});
    auto* save = w.findChild<QPushButton*>("saveProjectTomlButton");
    QVERIFY(save);
    failed.clear();
    QTest::mouseClick(save, Qt::LeftButton);
    QVERIFY(failed.wait(20000));
    QVERIFY2(failed.front().front().toString().contains("project.toml:4"), qPrintable(failed.front().front().toString()));
    QVERIFY(editor->isVisible());
    QCOMPARE(markedLines(), QList<int>{4});
    QCOMPARE(editor->textCursor().blockNumber() + 1, 4);

    // Fixed: saved, the project opens and the editor closes.
    QTextCursor fix(editor->document()->findBlockByNumber(3));
    fix.select(QTextCursor::LineUnderCursor);
    fix.insertText("family = \"mlp\"");
    QTRY_VERIFY(markedLines().isEmpty());
    QTest::mouseClick(save, Qt::LeftButton);
    QVERIFY(opened.wait(30000));
    QVERIFY(w.session()->project());
    QCOMPARE(readFile(dir.filePath("project.toml")), good);
    QTRY_VERIFY(!editor->isVisible());
    QVERIFY(!open->isVisible());
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestStudioProject)
#include "test_studio_project.moc"
