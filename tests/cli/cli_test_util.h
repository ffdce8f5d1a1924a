#pragma once
// What the CLI tests share: running the tessera binary as a user does, writing project files, and two tiny
// projects that train in seconds. TESSERA_BIN comes from the test's compile definitions.
#include <QtTest>

#include <QElapsedTimer>
#include <QProcess>
#include <QThread>

#include <functional>

namespace tsr::test {

struct Run {
  int exitCode = -1;
  bool crashed = true;
  QString out, err;
};

// Waits (up to 5 minutes) for a started process and collects how it ended and what it printed.
Run finished(QProcess& p) {
  p.waitForFinished(300000);
  Run r;
  r.crashed = p.exitStatus() != QProcess::NormalExit;
  r.exitCode = p.exitCode();
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

Run tessera(const QStringList& args, const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment()) {
  QProcess p;
  p.setProcessEnvironment(env);
  p.start(TESSERA_BIN, args);
  return finished(p);
}

// Polls `runs list` (list()) until a run is listed running, for up to a minute; whether one was.
bool untilListedRunning(const std::function<QString()>& list) {
  QElapsedTimer waited;
  waited.start();
  while (!list().contains("running") && waited.elapsed() < 60000) QThread::msleep(200);
  return list().contains("running");
}

// `tessera runs --project PROJECT list`.
QString runsList(const QString& project) { return tessera({"runs", "--project", project, "list"}).out; }

// Starts `tessera train PROJECT --quiet --steps 10000000 ARGS` in `trainer` (a run that trains until it is stopped;
// ARGS: --resume 1) and waits until `runs list` shows it running: the trainer then holds the run's lease. Whether
// it does (the list is runsList(project)).
bool startTrainer(QProcess& trainer, const QString& project, const QStringList& args = {}) {
  trainer.start(TESSERA_BIN, QStringList{"train", project, "--quiet", "--steps", "10000000"} + args);
  if (!trainer.waitForStarted()) return false;
  return untilListedRunning([&] { return runsList(project); });
}

void writeFile(const QString& path, const QByteArray& bytes) {
  QFile f(path);
  QVERIFY(f.open(QIODevice::WriteOnly));
  f.write(bytes);
}

// A tiny MLP project on synthetic digits: trains in a second or two.
const char* kTinyMlp = R"([project]
name = "tiny_mlp"
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 6
batch_size = 8
optimizer = "adam"
lr = 1e-2
warmup_steps = 0
eval_every = 3
eval_steps = 2
log_every = 1
)";

// A tiny GPT-2 on a small repeated corpus, with a trained 300-token BPE.
const char* kTinyGpt2 = R"([project]
name = "tiny_gpt2"
[model]
family = "gpt2"
block_size = 16
n_layer = 1
n_head = 2
n_embd = 16
[data]
kind = "text"
path = "corpus.txt"
vocab_size = 300
val_fraction = 0.2
[train]
steps = 4
batch_size = 4
seq_len = 16
eval_every = 0
eval_steps = 2
log_every = 1
)";

}  // namespace tsr::test
