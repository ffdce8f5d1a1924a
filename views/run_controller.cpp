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
  for (const char* rel : {"tessera", "../cli/tessera", "../app/cli/tessera", "../../app/cli/tessera"}) {
    QFileInfo f(here.filePath(rel));
    if (f.isFile() && f.isExecutable()) return f.canonicalFilePath();
  }
  return QStandardPaths::findExecutable("tessera");
}

bool RunController::running() const { return m_process && m_process->state() != QProcess::NotRunning; }

void RunController::start(const QString& projectDir, const QStringList& extraArgs, const QString& command) {
  inspect::LaunchCommand c;
  c.program = findTessera().toStdString();
  c.args = {command.toStdString(), projectDir.toStdString()};
  for (const QString& a : extraArgs) c.args.push_back(a.toStdString());
  start(c, command, QDir(projectDir).filePath("runs.db"));
}

void RunController::start(const inspect::LaunchCommand& launch, const QString& label, const QString& dbPath) {
  if (running()) return;
  // Every command the IDE starts (train, profile, eval) takes --lock-wait; after a launcher's (mpirun's) own
  // arguments, tessera's come last.
  inspect::LaunchCommand command = launch;
  if (m_lockWait) command.args.insert(command.args.end(), {"--lock-wait", QString::number(*m_lockWait).toStdString()});
  m_command = label;
  m_dbPath = dbPath;
  m_runId = 0;
  m_error.clear();
  m_lastErrLine.clear();
  m_lastErrLines.clear();
  m_exitCode = 0;
  m_stopping = false;
  m_buffer[0].clear();
  m_buffer[1].clear();
  // A run another process trains (here, in a terminal, on another machine sharing the store) is not resumed.
  if (label == "resume")
    if (auto st = inspect::checkResumable(command, dbPath.toStdString()); !st.ok()) {
      m_error = tr("Not resumed: %1").arg(QString::fromStdString(st.error().message));
      emit output("error", m_error);
      emit finished(false, m_error);
      return;
    }
  const QString bin = QString::fromStdString(command.program);
  if (bin.isEmpty()) {
    m_error = tr("cannot find the tessera program (set TESSERA_BIN)");
    emit output("error", m_error);
    emit finished(false, m_error);
    return;
  }
  delete m_process;
  m_process = new QProcess(this);
  QStringList args;
  for (const std::string& a : command.args) args << QString::fromStdString(a);
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
      emit finished(true, tr("run %1 stopped (checkpointed; Run ▶ Resume continues it)").arg(m_runId));
      return;
    }
    // tessera exits with 1 after reporting an error (the run records it); anything else is a crash: a signal,
    // or a launcher (mpirun, srun) passing a rank's death on. The store learns it from here.
    const bool crashed = !ok && (status == QProcess::CrashExit || code > 1);
    if (crashed) {
      const QString how = status == QProcess::CrashExit ? tr("the run crashed (%1)").arg(m_process->errorString())
                                                        : tr("the run crashed (exit status %1)").arg(code);
      m_error = m_lastErrLines.isEmpty() ? how : how + ": " + m_lastErrLines.join(" | ");
      if (m_runId > 0 && !m_dbPath.isEmpty()) {
        auto st = inspect::markRunCrashed(m_dbPath.toStdString(), m_runId, m_error.toStdString());
        if (!st.ok()) emit output("warning", QString::fromStdString(st.error().message));
      }
    } else if (!ok) {
      m_error = m_lastErrLine.isEmpty() ? tr("the run exited with status %1").arg(code) : m_lastErrLine;
    }
    if (!ok) emit output("error", m_error);
    const QString what = m_command == "profile" ? tr("profile") : m_command == "eval" ? tr("evaluation") : tr("run");
    emit finished(ok, ok ? tr("%1 finished").arg(what) : m_error);
  });
  // Compile events (with each cache miss and its reason) go to the console.
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("TESSERA_LOG_COMPILES", "1");
  for (const auto& [k, v] : command.env) env.insert(QString::fromStdString(k), QString::fromStdString(v));
  m_process->setProcessEnvironment(env);
  emit started(QString::fromStdString(command.display()));
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
  static const QRegularExpression kRun(R"(^(?:run (\d+): checkpoints in|resumed run (\d+) at step))");
  int nl;
  // Progress lines may end in '\r' (a terminal's in-place update) or '\n'.
  while ((nl = static_cast<int>(m_buffer[c].indexOf('\n'))) >= 0 || (nl = static_cast<int>(m_buffer[c].indexOf('\r'))) >= 0) {
    QString line = QString::fromUtf8(m_buffer[c].left(nl)).trimmed();
    m_buffer[c].remove(0, nl + 1);
    if (line.isEmpty()) continue;
    auto m = kStep.match(line);
    if (m.hasMatch()) emit progress(m.captured(1).toInt(), m.captured(2).toInt());
    if (auto r = kRun.match(line); r.hasMatch()) m_runId = (r.captured(1).isEmpty() ? r.captured(2) : r.captured(1)).toLongLong();
    bool compileEvent = line.startsWith("[tessera]");
    bool err = c == 1 && !compileEvent && (line.contains("error", Qt::CaseInsensitive) || line.startsWith("tessera"));
    if (c == 1 && !compileEvent) {
      m_lastErrLine = line;
      m_lastErrLines << line;
      if (m_lastErrLines.size() > 5) m_lastErrLines.removeFirst();
    }
    emit output(err ? "error" : compileEvent && line.contains("miss") ? "warning" : "info", line);
  }
}

}  // namespace tsr::studio
