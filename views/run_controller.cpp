#include "views/run_controller.h"

#include <csignal>

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTimer>

#include "engine/inspect/environment.h"

namespace tsr::studio {

RunController::RunController(QObject* parent) : QObject(parent) {}

RunController::~RunController() {
  if (running()) {
    m_process->kill();
    m_process->waitForFinished(3000);
  }
}

QString RunController::findTessera() {
  QString env = QString::fromStdString(inspect::envLocations().tesseraBin);
  if (!env.isEmpty() && QFileInfo(env).isExecutable()) return env;
  QDir here(QCoreApplication::applicationDirPath());
  for (const QString& rel : {"tessera", "../cli/tessera", "../app/cli/tessera", "../../app/cli/tessera"}) {
    QFileInfo f(here.filePath(rel));
    if (f.isFile() && f.isExecutable()) return f.canonicalFilePath();
  }
  return QStandardPaths::findExecutable("tessera");
}

bool RunController::running() const { return m_process && m_process->state() != QProcess::NotRunning; }

void RunController::start(const QString& projectDir, const QStringList& extraArgs, const QString& command) {
  if (running()) return;
  m_command = command;
  m_error.clear();
  m_lastErrLine.clear();
  m_exitCode = 0;
  m_stopping = false;
  m_buffer[0].clear();
  m_buffer[1].clear();
  QString bin = findTessera();
  if (bin.isEmpty()) {
    m_error = tr("cannot find the tessera program (set TESSERA_BIN)");
    emit output("error", m_error);
    emit finished(false, m_error);
    return;
  }
  delete m_process;
  m_process = new QProcess(this);
  QStringList args = {command, projectDir};
  args += extraArgs;
  connect(m_process, &QProcess::readyReadStandardOutput, this, [this] { readLines(QProcess::StandardOutput); });
  connect(m_process, &QProcess::readyReadStandardError, this, [this] { readLines(QProcess::StandardError); });
  connect(m_process, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) {
      m_error = tr("could not start %1: %2").arg(m_process->program(), m_process->errorString());
      emit output("error", m_error);
      emit finished(false, m_error);
    }
  });
  connect(m_process, &QProcess::finished, this, [this](int code, QProcess::ExitStatus status) {
    readLines(QProcess::StandardOutput);
    readLines(QProcess::StandardError);
    m_exitCode = code;
    // tessera train exits with 130 when interrupted, after its checkpoint.
    bool stopped = m_stopping && status == QProcess::NormalExit && code == 130;
    bool ok = (status == QProcess::NormalExit && code == 0) || stopped;
    if (stopped) {
      emit finished(true, tr("run stopped (checkpointed; Run continues it with --resume from the command line)"));
      return;
    }
    if (!ok) {
      m_error = status == QProcess::CrashExit ? tr("the run crashed (%1)").arg(m_process->errorString())
                                              : (m_lastErrLine.isEmpty() ? tr("the run exited with status %1").arg(code) : m_lastErrLine);
      emit output("error", m_error);
    }
    emit finished(ok, ok ? tr("%1 finished").arg(m_command == "profile" ? tr("profile") : tr("run")) : m_error);
  });
  // Compile events (with each cache miss and its reason) go to the console.
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("TESSERA_LOG_COMPILES", "1");
  m_process->setProcessEnvironment(env);
  emit started(bin + " " + args.join(' '));
  m_process->start(bin, args);
}

void RunController::stop() {
  if (!running()) return;
  m_stopping = true;
  // SIGINT: tessera train checkpoints and exits; kill it if it has not after a while.
  ::kill(static_cast<pid_t>(m_process->processId()), SIGINT);
  QProcess* p = m_process;
  QTimer::singleShot(15000, p, [p] {
    if (p->state() != QProcess::NotRunning) p->kill();
  });
}

void RunController::readLines(QProcess::ProcessChannel channel) {
  if (!m_process) return;
  m_process->setReadChannel(channel);
  int c = channel == QProcess::StandardOutput ? 0 : 1;
  m_buffer[c] += m_process->readAll();
  static const QRegularExpression kStep(R"(step\s+(\d+)/(\d+))");
  int nl;
  // Progress lines may end in '\r' (a terminal's in-place update) or '\n'.
  while ((nl = static_cast<int>(m_buffer[c].indexOf('\n'))) >= 0 || (nl = static_cast<int>(m_buffer[c].indexOf('\r'))) >= 0) {
    QString line = QString::fromUtf8(m_buffer[c].left(nl)).trimmed();
    m_buffer[c].remove(0, nl + 1);
    if (line.isEmpty()) continue;
    auto m = kStep.match(line);
    if (m.hasMatch()) emit progress(m.captured(1).toInt(), m.captured(2).toInt());
    bool compileEvent = line.startsWith("[tessera]");
    bool err = c == 1 && !compileEvent && (line.contains("error", Qt::CaseInsensitive) || line.startsWith("tessera"));
    if (c == 1 && !compileEvent) m_lastErrLine = line;
    emit output(err ? "error" : compileEvent && line.contains("miss") ? "warning" : "info", line);
  }
}

}  // namespace tsr::studio
