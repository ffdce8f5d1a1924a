// The IDE's preferences (File › Preferences…, offscreen): the run store's lock wait is shown with its default,
// saved with the IDE's settings, applied to the IDE's own stores when set and when a window opens, and passed to
// the runs the IDE starts, which then wait that long for a store another process holds locked.
#include <QAction>
#include <QApplication>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include <sqlite3.h>

#include <chrono>
#include <functional>

#include "app/studio/main_window.h"
#include "engine/core/env_options.h"
#include "engine/store/lock_wait.h"
#include "engine/store/run_store.h"
#include "tests/studio/studio_test_util.h"
#include "views/preferences_dialog.h"
#include "views/run_controller.h"

using namespace tsr;
using namespace tsr::studio;
using namespace tsr::studio::test;
using namespace std::chrono_literals;

namespace {

const char* kTinyMlp =
    "[project]\nname = \"tiny\"\n[model]\nfamily = \"mlp\"\nsizes = [784, 16, 10]\n[data]\nkind = "
    "\"synthetic-digits\"\n[train]\nsteps = 6\nbatch_size = 32\noptimizer = \"sgd\"\nlr = 0.1\nwarmup_steps = "
    "0\neval_every = 0\nlog_every = 1\n";

// File › Preferences… as a user answers it: `edit` fills the form, then OK. Whether the dialog was shown.
bool answerPreferences(MainWindow& w, const std::function<void(PreferencesDialog*)>& edit) {
  bool shown = false;
  QTimer poll;
  poll.setInterval(10);
  QObject::connect(&poll, &QTimer::timeout, [&] {
    if (auto* d = qobject_cast<PreferencesDialog*>(QApplication::activeModalWidget())) {
      poll.stop();
      shown = true;
      edit(d);
      d->accept();
    }
  });
  poll.start();
  w.action("preferences")->trigger();
  return shown;
}

void setVariable(const char* value) {
  if (value) qputenv("TESSERA_STORE_LOCK_WAIT", value);
  else qunsetenv("TESSERA_STORE_LOCK_WAIT");
  reloadEnvOptions();
}

}  // namespace

class TestStudioPreferences : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase() {
    initStudioTest("StudioPreferencesTest", TSR_TESSERA_BIN);
    setVariable(nullptr);
  }

  void cleanup() {
    QSettings().clear();
    store::setLockWaitLimit(std::nullopt);
    setVariable(nullptr);
  }

  // Left alone, the box shows the default the IDE waits: 30 s, or TESSERA_STORE_LOCK_WAIT's when it is set.
  void theLockWaitShowsItsDefault() {
    PreferencesDialog plain(std::nullopt);
    QCOMPARE(plain.lockWaitBox()->value(), 0.0);
    QCOMPARE(plain.lockWaitBox()->text(), QString("default: 30 s"));
    QCOMPARE(plain.lockWait(), std::optional<double>());
    setVariable("5");
    PreferencesDialog fromVariable(std::nullopt);
    QCOMPARE(fromVariable.lockWaitBox()->text(), QString("default: 5 s (TESSERA_STORE_LOCK_WAIT)"));
    PreferencesDialog set(12.5);
    QCOMPARE(set.lockWaitBox()->text(), QString("12.5 s"));
    QCOMPARE(set.lockWait(), std::optional<double>(12.5));
  }

  // Set in the dialog, the wait is saved and is the IDE's at once; a window opened later (the next start) applies
  // it again; set back to the default (0), it is forgotten and the IDE waits 30 s again.
  void theLockWaitIsSavedAndApplied() {
    {
      MainWindow w;
      QCOMPARE(w.storeLockWait(), std::optional<double>());
      QVERIFY(answerPreferences(w, [](PreferencesDialog* d) {
        QCOMPARE(d->lockWaitBox()->text(), QString("default: 30 s"));
        d->lockWaitBox()->setValue(2.5);
      }));
      QCOMPARE(QSettings().value("store/lockWait").toDouble(), 2.5);
      QCOMPARE(store::lockWaitLimit(), 2500ms);
      QCOMPARE(w.runController()->lockWait(), std::optional<double>(2.5));
    }
    store::setLockWaitLimit(std::nullopt);
    QCOMPARE(store::lockWaitLimit(), 30000ms);
    MainWindow w;
    QCOMPARE(store::lockWaitLimit(), 2500ms);
    QCOMPARE(w.runController()->lockWait(), std::optional<double>(2.5));
    QVERIFY(answerPreferences(w, [](PreferencesDialog* d) {
      QCOMPARE(d->lockWaitBox()->value(), 2.5);
      d->lockWaitBox()->setValue(0);
    }));
    QVERIFY(!QSettings().contains("store/lockWait"));
    QCOMPARE(store::lockWaitLimit(), 30000ms);
    QCOMPARE(w.runController()->lockWait(), std::optional<double>());
  }

  // Run ▶ Train passes the wait on: its command ends in --lock-wait 1, and while another process holds the store
  // locked the run fails after about a second saying so, where TESSERA_STORE_LOCK_WAIT, which it inherits, says 60.
  void aRunFromTheIdeWaitsAsSet() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString db = dir.filePath("runs.db");
    QVERIFY(store::RunStore::open(db.toStdString()).ok());
    setVariable("60");
    MainWindow w;
    QVERIFY(openAndWait(w, dir.path()));
    w.setStoreLockWait(1);
    sqlite3* holder = nullptr;
    QCOMPARE(sqlite3_open(db.toUtf8().constData(), &holder), SQLITE_OK);
    QCOMPARE(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
    QSignalSpy started(w.runController(), &RunController::started);
    QSignalSpy finished(w.runController(), &RunController::finished);
    QElapsedTimer waited;
    waited.start();
    w.startRun();
    const bool done = finished.wait(40000);
    QCOMPARE(sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(holder);
    QVERIFY(done);
    QCOMPARE(started.size(), 1);
    QVERIFY2(started.front()[0].toString().endsWith(" --lock-wait 1"), qPrintable(started.front()[0].toString()));
    QVERIFY(!finished.front()[0].toBool());
    QVERIFY2(finished.front()[1].toString().contains("is locked by another process"),
             qPrintable(finished.front()[1].toString()));
    QVERIFY2(waited.elapsed() < 30000, qPrintable(QString::number(waited.elapsed())));
  }
};

QTEST_MAIN(TestStudioPreferences)
#include "test_studio_preferences.moc"
