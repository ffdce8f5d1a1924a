#pragma once
// Runs `tessera train PROJECT` (or `tessera profile PROJECT`) as a child process: progress from its step lines, its output to the console,
// Stop (SIGINT, so the run checkpoints as on Ctrl-C; killed if it does not stop), and a crash or an error
// reported with its message while the IDE keeps running.
#include <optional>

#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>

#include "engine/inspect/run_configuration.h"

namespace tsr::studio {

class RunController : public QObject {
  Q_OBJECT
 public:
  explicit RunController(QObject* parent = nullptr);
  ~RunController() override;

  // The tessera binary: $TESSERA_BIN, next to this program, in the build tree beside it, or on PATH.
  static QString findTessera();

  bool running() const;
  // command: "train" or "profile"; extraArgs follow the project ("--steps", "3").
  void start(const QString& projectDir, const QStringList& extraArgs = {}, const QString& command = "train");
  // A command made from a run configuration (inspect::launchCommand); label: "train", "resume", "profile", "eval".
  // dbPath: the store the run writes, where a crashed run is marked as such.
  void start(const inspect::LaunchCommand& command, const QString& label, const QString& dbPath);
  QString command() const { return m_command; }
  // How long the commands started from now on wait for a run store another process holds locked: passed as
  // --lock-wait SECONDS (the IDE's preference); none: they wait as tessera does by default.
  void setLockWait(std::optional<double> seconds) { m_lockWait = seconds; }
  std::optional<double> lockWait() const { return m_lockWait; }
  // The run the child process trains ("run 3: checkpoints in ..."), 0 until it says.
  qint64 runId() const { return m_runId; }
  void stop();
  QString lastError() const { return m_error; }
  int lastExitCode() const { return m_exitCode; }

 signals:
  void started(const QString& commandLine);
  void output(const QString& level, const QString& line);
  void progress(int step, int total);
  // ok: the run finished, or stopped when asked to (it checkpointed; `tessera train --resume` continues it).
  void finished(bool ok, const QString& message);

 private:
  void readLines(QProcess::ProcessChannel channel);

  QProcess* m_process = nullptr;
  QString m_command = "train";
  QString m_error;
  QString m_lastErrLine;
  QStringList m_lastErrLines;  // the last few lines of stderr, for a crash report
  QString m_dbPath;
  std::optional<double> m_lockWait;
  qint64 m_runId = 0;
  int m_exitCode = 0;
  bool m_stopping = false;
  QByteArray m_buffer[2];
};

}  // namespace tsr::studio
