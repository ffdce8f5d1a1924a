#pragma once
// What the IDE's window tests share: their first step, opening a project and waiting for its graph, waiting for a
// layout, and writing a file.
#include <QCoreApplication>
#include <QFile>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "app/studio/main_window.h"
#include "views/graph_panel.h"
#include "views/runs_panel.h"
#include "views/session.h"

namespace tsr::studio::test {

// A test's initTestCase: the window's settings (layout, theme, recent projects, run configurations) in a test
// location of the test's own (`app`), cleared, so that no test meets what another test or a user left there; with
// `tesseraBin`, the CLI that the window's Run and Profile start.
inline void initStudioTest(const char* app, const char* tesseraBin = nullptr) {
  QStandardPaths::setTestModeEnabled(true);
  QCoreApplication::setOrganizationName("TesseraTest");
  QCoreApplication::setApplicationName(app);
  QSettings().clear();
  if (tesseraBin) qputenv("TESSERA_BIN", tesseraBin);
}

// Opens a project and waits until it is compiled and the graph laid out.
inline bool openAndWait(MainWindow& w, const QString& path) {
  QSignalSpy opened(w.session(), &Session::projectOpened);
  QSignalSpy failed(w.session(), &Session::projectFailed);
  w.openProject(path);
  if (!QTest::qWaitFor([&] { return !opened.isEmpty() || !failed.isEmpty(); }, 30000) || opened.isEmpty()) return false;
  return QTest::qWaitFor([&] {
    return !w.session()->busy() && !w.graphPanel()->layoutRunning() && w.session()->stages()->size() > 1 &&
           !w.graphPanel()->visibleGroups().isEmpty();
  }, 30000);
}

inline bool waitLayout(GraphPanel* g) {
  QTest::qWait(1);
  return QTest::qWaitFor([&] { return !g->layoutRunning(); }, 30000);
}

// Waits until the Runs panel has answered every read asked for (they run on its reader thread).
inline bool runsRead(RunsPanel* runs) { return QTest::qWaitFor([&] { return !runs->reading(); }, 30000); }

// Reads the Runs panel's store and waits until the answer is on screen.
inline bool refreshRuns(RunsPanel* runs) {
  runs->refresh();
  return runsRead(runs);
}

// Waits for the answer to the Runs panel's edit (made on its reader thread) and, when the edit was made, for the
// table read after it: whether it was made.
inline bool runsEdited(RunsPanel* runs) {
  if (!QTest::qWaitFor([&] { return !runs->editing(); }, 30000)) return false;
  return runs->lastError().isEmpty() && runsRead(runs);
}

inline void writeFile(const QString& path, const QByteArray& text) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(text);
}

}  // namespace tsr::studio::test
