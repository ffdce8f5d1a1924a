#pragma once
// Runs `tessera train PROJECT` (or `tessera profile PROJECT`) as a child process: progress from its step lines, its output to the console,
// Stop (SIGINT, so the run checkpoints as on Ctrl-C; killed if it does not stop), and a crash or an error
// reported with its message while the IDE keeps running.
#include <QObject>
#include <QProcess>
#include <QString>

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
  QString command() const { return m_command; }
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
  int m_exitCode = 0;
  bool m_stopping = false;
  QByteArray m_buffer[2];
};

}  // namespace tsr::studio
