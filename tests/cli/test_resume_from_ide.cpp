// The IDE's Run ▶ Resume (views/run_controller) of a run that `tessera train` is training, in a terminal here or
// on another machine sharing the store: refused before anything is launched, naming the process that trains it,
// as `tessera train --resume` refuses it (the run's lease, engine/store/run_lease.h). Once that process stopped,
// the resume is launched.
#include <QtTest>

#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <csignal>

#include "engine/inspect/run_configuration.h"
#include "tests/cli/cli_test_util.h"
#include "views/run_controller.h"

using namespace tsr;
using namespace tsr::test;

class TestResumeFromIde : public QObject {
  Q_OBJECT
 private slots:
  void resumingARunAnotherProcessTrainsIsRefused() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    QProcess first;
    QVERIFY2(startTrainer(first, dir.path(), {"--resume", "1"}), qPrintable(runsList(dir.path())));

    inspect::RunConfiguration local;
    local.steps = 1;
    const QString db = dir.filePath("runs.db");
    studio::RunController controller;
    QSignalSpy started(&controller, &studio::RunController::started);
    QSignalSpy finished(&controller, &studio::RunController::finished);
    // The run selected in the Runs panel (1), and none selected (the latest run with a checkpoint).
    for (const int64_t run : {int64_t(1), int64_t(0)}) {
      auto command = inspect::launchCommand(local, inspect::RunAction::Resume, dir.path().toStdString(), TESSERA_BIN, run);
      QVERIFY(command.ok());
      finished.clear();
      controller.start(*command, "resume", db);
      QCOMPARE(finished.size(), 1);
      QCOMPARE(finished.front().at(0).toBool(), false);
      const QString message = finished.front().at(1).toString();
      QVERIFY2(message.startsWith(QString("Not resumed: run 1 of %1 is being trained by another process (pid %2): stop "
                                          "it first (Ctrl-C where it runs, or kill -INT %2), then resume")
                                      .arg(db)
                                      .arg(first.processId())),
               qPrintable(message));
      QVERIFY(started.isEmpty());
      QVERIFY(!controller.running());
    }

    ::kill(static_cast<pid_t>(first.processId()), SIGINT);
    QVERIFY(first.waitForFinished(60000));
    QCOMPARE(first.exitCode(), 130);
    auto command = inspect::launchCommand(local, inspect::RunAction::Resume, dir.path().toStdString(), TESSERA_BIN, 1);
    QVERIFY(command.ok());
    finished.clear();
    controller.start(*command, "resume", db);
    QCOMPARE(started.size(), 1);  // launched: the run is past step 1, which the launched process says
    QVERIFY(finished.wait(120000) || !finished.isEmpty());
    const QString message = finished.front().at(1).toString();
    QVERIFY2(message.contains("is at step") && !message.contains("another process"), qPrintable(message));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestResumeFromIde)
#include "test_resume_from_ide.moc"
