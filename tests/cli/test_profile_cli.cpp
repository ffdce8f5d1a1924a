// tessera profile and the profile parts of tessera runs, run as a user runs them: the trace is read with Qt's
// JSON parser (not the one that wrote it) and checked against the Trace Event Format.
#include <QtTest>

#include <sys/resource.h>

#include <csignal>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <map>

#include "tests/cli/cli_test_util.h"

using namespace tsr::test;

namespace {

struct TraceCheck {
  QString error;  // empty: valid
  int kernels = 0, marks = 0, memorySamples = 0, flows = 0;
  QStringList markNames;
};

TraceCheck invalid(const QString& why) {
  TraceCheck c;
  c.error = why;
  return c;
}

// The Trace Event Format as Perfetto reads it: an object with "traceEvents"; complete events ("X") with
// name, pid, tid, ts >= 0 and dur >= 0; counter events ("C") of the live buffer bytes; every process and
// thread with events named by metadata ("M");
// kernel events on one thread never overlap; each kernel event's args link it to its fusion and nodes.
TraceCheck checkTrace(const QString& path) {
  TraceCheck c;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return invalid("cannot open " + path);
  QJsonParseError perr;
  QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &perr);
  if (doc.isNull()) return invalid("not JSON: " + perr.errorString());
  if (!doc.isObject() || !doc.object()["traceEvents"].isArray()) return invalid("no traceEvents array");
  QSet<int> processes;
  QSet<QPair<int, int>> threads;
  std::map<QPair<int, int>, std::vector<std::pair<double, double>>> spans;
  std::map<int, int> flowEnds;  // flow id -> 1 per start + 10 per finish
  const QJsonArray events = doc.object()["traceEvents"].toArray();
  for (const QJsonValue& v : events) {
    QJsonObject e = v.toObject();
    if (e["ph"] != "M") continue;
    if (e["name"] == "process_name") processes.insert(e["pid"].toInt(-1));
    if (e["name"] == "thread_name") threads.insert({e["pid"].toInt(-1), e["tid"].toInt(-1)});
  }
  for (const QJsonValue& v : events) {
    QJsonObject e = v.toObject();
    QString ph = e["ph"].toString();
    int pid = e["pid"].toInt(-1), tid = e["tid"].toInt(-1);
    if (ph == "M") continue;
    // Counter events: the live buffer bytes, a track of the host process.
    if (ph == "C") {
      if (e["name"] != "memory" || !e["ts"].isDouble() || e["ts"].toDouble() < 0 || !processes.contains(pid) ||
          !e["args"].toObject()["bytes"].isDouble() || e["args"].toObject()["bytes"].toDouble() < 0)
        return invalid("malformed counter event");
      ++c.memorySamples;
      continue;
    }
    // Flow events: a collective's waiting member ("s") linked to its straggler ("f", bound to the enclosing slice).
    if (ph == "s" || ph == "f") {
      if (!e["id"].isDouble() || !e["ts"].isDouble() || e["cat"] != "collective" || !processes.contains(pid) ||
          !threads.contains({pid, tid}) || (ph == "f" && e["bp"] != "e") ||
          (ph == "s" && !e["args"].toObject()["wait_ns"].isDouble()))
        return invalid("malformed flow event");
      flowEnds[e["id"].toInt()] += ph == "s" ? 1 : 10;
      continue;
    }
    if (ph != "X") return invalid("unexpected phase " + ph);
    if (!e["ts"].isDouble() || !e["dur"].isDouble() || e["name"].toString().isEmpty() || pid < 0 || tid < 0)
      return invalid("incomplete X event");
    double ts = e["ts"].toDouble(), dur = e["dur"].toDouble();
    if (ts < 0 || dur < 0) return invalid("negative time");
    if (!processes.contains(pid) || !threads.contains({pid, tid})) return invalid("event on an unnamed process or thread");
    if (e["cat"] == "mark") {
      ++c.marks;
      c.markNames << e["name"].toString();
      continue;
    }
    ++c.kernels;
    QJsonObject args = e["args"].toObject();
    if (args["fusion"].toInt(-1) < 0 || args["nodes"].toArray().isEmpty() ||
        args["nodes"].toArray().size() != args["ops"].toArray().size() || !args["flops"].isDouble() ||
        !args["bytes"].isDouble() || !args.contains("GFLOP/s") || !args.contains("GB/s") || args["kind"].toString().isEmpty())
      return invalid("kernel event without its kernel: " + e["name"].toString());
    spans[{pid, tid}].push_back({ts, ts + dur});
  }
  for (const auto& [id, ends] : flowEnds) {
    if (ends != 11) return invalid("a flow without its start or its finish");
    ++c.flows;
  }
  for (auto& [thread, s] : spans) {
    std::sort(s.begin(), s.end());
    // Microsecond floats: allow for the rounding of the last printed digit.
    for (size_t i = 1; i < s.size(); ++i)
      if (s[i].first < s[i - 1].second - 1e-6) return invalid("overlapping kernels on one thread");
  }
  return c;
}

}  // namespace

class TestProfileCli : public QObject {
  Q_OBJECT
 private slots:
  void profileWritesATraceAndAProfile() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyGpt2);
    QByteArray corpus;
    for (int i = 0; i < 40; ++i) corpus += "the quick brown fox jumps over the lazy dog. a stitch in time saves nine.\n";
    writeFile(dir.filePath("corpus.txt"), corpus);
    QString trace = dir.filePath("out.json"), db = dir.filePath("store.db");
    Run r = tessera({"profile", dir.path(), "--steps", "2", "--warmup", "1", "--trace", trace, "--db", db, "--top", "1000"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    // The table: top kernels, then one line per profiled step (1 warm-up, so steps 2 and 3).
    QVERIFY2(r.out.contains(QRegularExpression("kernel +kind +count +total ms +mean us +share +GFLOP/s +GB/s")),
             qPrintable(r.out));
    // Every kernel is listed (--top 1000): the GEMMs are there, alone or with their epilogue.
    QVERIFY2(r.out.contains(QRegularExpression("\\n(dot_general f32\\[|fusion\\.[0-9]+ gemm\\[dot_general)")), qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression("\\nstep 2 +[0-9.]+ ms")), qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression("\\nstep 3 +[0-9.]+ ms")), qPrintable(r.out));
    QVERIFY(r.out.contains("run 1, profile 1 in"));

    TraceCheck c = checkTrace(trace);
    QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
    QCOMPARE(c.marks, 2);
    QVERIFY(c.memorySamples > 0);
    QCOMPARE(c.markNames, (QStringList{"step 2", "step 3"}));
    QVERIFY(c.kernels > 20);

    Run show = tessera({"runs", "--db", db, "show", "1"});
    QCOMPARE(show.exitCode, 0);
    QVERIFY2(show.out.contains(QRegularExpression("\\nprofiles\\n.*\\n +1  steps 2-3 +2-3 +\\d+ +\\d+  ")),
             qPrintable(show.out));
    QVERIFY(show.out.contains(QRegularExpression("profile\\.steps +2\\n")));
    QVERIFY(show.out.contains("step_time"));

    // The trace again, from the store: the same events.
    QString again = dir.filePath("again.json");
    Run ex = tessera({"runs", "--db", db, "export-trace", "1", "-o", again});
    QVERIFY2(ex.exitCode == 0, qPrintable(ex.err));
    TraceCheck d = checkTrace(again);
    QVERIFY2(d.error.isEmpty(), qPrintable(d.error));
    QCOMPARE(d.kernels, c.kernels);
    QCOMPARE(d.markNames, c.markNames);
    QCOMPARE(tessera({"runs", "--db", db, "export-trace", "1", "--profile", "9", "-o", again}).exitCode, 1);
    QCOMPARE(tessera({"runs", "--db", db, "export-trace", "7", "-o", again}).exitCode, 1);
  }

  void profileASampleProjectAtASmallerBatch() {
    QTemporaryDir dir;
    QString trace = dir.filePath("mlp.json"), db = dir.filePath("store.db");
    Run r = tessera({"profile", QString(TSR_SAMPLES) + "/mlp_sharding", "--batch", "64", "--steps", "2", "--trace",
                     trace, "--db", db, "--quiet"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    TraceCheck c = checkTrace(trace);
    QVERIFY2(c.error.isEmpty(), qPrintable(c.error));
    QCOMPARE(c.marks, 2);
    QVERIFY2(c.flows > 0, "the mesh's collective calls are linked to their stragglers");
    Run show = tessera({"runs", "--db", db, "show", "1"});
    QVERIFY(show.out.contains(QRegularExpression("train\\.batch_size +64\\n")));
  }

  // Ctrl-C during a long profile stops the engine between kernels: the run is marked stopped (it was left
  // "running", then listed as crashed, when the process died by the signal), nothing half-profiled is stored and
  // the command exits 130.
  void interruptingAProfileStopsItsRun() {
    QTemporaryDir dir;
    const QString db = dir.filePath("s.db");
    QProcess p;
    p.start(TESSERA_BIN, {"profile", QString(TSR_SAMPLES) + "/gpt2_mini", "--steps", "5000", "--db", db});
    QVERIFY(p.waitForStarted());
    QElapsedTimer waited;
    waited.start();
    QByteArray out;
    while (!out.contains("profiled step") && waited.elapsed() < 60000) {
      p.waitForReadyRead(200);
      out += p.readAllStandardOutput();
    }
    QVERIFY2(out.contains("profiled step"), out.constData());
    ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(60000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 130, qPrintable(err));
    QVERIFY2(err.contains("tessera profile: interrupted: run 1 is marked stopped, with no profile stored"),
             qPrintable(err));
    Run list = tessera({"runs", "--db", db, "list"});
    QVERIFY2(list.out.contains("1 runs in") && list.out.contains("stopped"), qPrintable(list.out));
    Run show = tessera({"runs", "--db", db, "show", "1"});
    QVERIFY2(show.exitCode == 0 && show.out.contains("stopped") && !show.out.contains("\nprofiles\n"),
             qPrintable(show.out + show.err));
  }

  // The profiled steps' batches are read as training reads them, each just before its step: --steps far beyond
  // what memory holds (10^9 batches of 256 KiB, under a 2 GiB address space) profiles its first steps, and Ctrl-C
  // stops it. Reading every batch before the first step ran out of memory and never profiled one.
  void profiledBatchesAreReadAsTheStepsRun() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("TESSERA_CPU_DEVICES");
    env.insert("TESSERA_NUM_THREADS", "2");  // each GEMM thread maps 128 MiB: a many-core machine would not fit
    p.setProcessEnvironment(env);
    p.setChildProcessModifier([] {
      const rlimit r{rlim_t(2) << 30, rlim_t(2) << 30};
      ::setrlimit(RLIMIT_AS, &r);
    });
    p.start(TESSERA_BIN, {"profile", dir.path(), "--steps", "1000000000", "--warmup", "1", "--batch", "4096", "--db",
                          dir.filePath("s.db")});
    QVERIFY(p.waitForStarted());
    QElapsedTimer waited;
    waited.start();
    QByteArray out;
    while (!out.contains("profiled step 4:") && p.state() == QProcess::Running && waited.elapsed() < 120000) {
      p.waitForReadyRead(200);
      out += p.readAllStandardOutput();
    }
    if (p.state() == QProcess::Running) ::kill(static_cast<pid_t>(p.processId()), SIGINT);
    if (p.state() != QProcess::NotRunning) QVERIFY(p.waitForFinished(60000));
    out += p.readAllStandardOutput();
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(out.contains("profiled step 2:") && out.contains("profiled step 4:"), qPrintable(out + err));
    QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 130, qPrintable(err));
    QVERIFY2(err.contains("run 1 is marked stopped, with no profile stored"), qPrintable(err));
  }

  void badArgumentsAreMessages() {
    QTemporaryDir dir;
    Run missing = tessera({"profile", dir.filePath("nope")});
    QCOMPARE(missing.exitCode, 1);
    QVERIFY(missing.err.startsWith("tessera profile: "));
    Run zero = tessera({"profile", QString(TSR_SAMPLES) + "/mlp_sharding", "--steps", "0", "--db", dir.filePath("s.db")});
    QVERIFY(zero.exitCode != 0);
    QVERIFY2(zero.err.startsWith("--steps: 0 is not a positive number"), qPrintable(zero.err));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestProfileCli)
#include "test_profile_cli.moc"
