// Save-to-updated-graph in the IDE for a Python model project (sample_projects/py_gpt): model.py is saved and the
// window re-traces it (the Source panel's file watcher, then a child `python3 -m tessera.project_trace`), compiles
// the stages and lays out the graph. Times R rounds from the write to the laid-out graph, and each phase:
//
//   wait_s      the Source panel's quiet period after a write (an editor's save is often several writes)
//   open_s      inspect::openProject: the project, the child Python trace of model.py, the traced step
//   stages_s    inspect::compileStages: the compile passes shown as stages
//   layout_s    the graph panel's layout of the new stage, to the first frame with it
//
// with the warm tracer (engine/project/trace_server.h: a child forked from an interpreter that has imported
// tessera) and, as the peer in the same run, with a new interpreter per trace (TESSERA_TRACE_SERVER=0); beside
// them, the engine's open and stages alone and what a new Python costs before it traces anything
// (`python3 -c "import tessera"`). The target is the 1 s a save-to-graph round may take. Offscreen; prints JSON; exits 77 without the Python front end.
//
//   QT_QPA_PLATFORM=offscreen build/tests/bench/bench_save_to_graph [--rounds 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include "app/studio/main_window.h"
#include "engine/backends/backends.h"
#include "engine/core/env_options.h"
#include "engine/inspect/graph_stages.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/project/python_family.h"
#include "engine/python_paths.h"
#include "views/graph_panel.h"
#include "views/session.h"

using namespace tsr;
using studio::MainWindow;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double minOf(const std::vector<double>& v) { return v.empty() ? 0 : *std::min_element(v.begin(), v.end()); }
double maxOf(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

bool copyProject(const QString& from, const QString& to) {
  QDir().mkpath(to + "/data");
  for (const char* f : {"project.toml", "model.py", "data/corpus.txt"})
    if (!QFile::copy(from + "/" + f, to + "/" + f)) return false;
  return true;
}

bool graphReady(MainWindow& w) {
  return !w.session()->busy() && !w.graphPanel()->layoutRunning() && w.session()->stages() &&
         w.session()->stages()->size() > 1 && !w.graphPanel()->visibleGroups().isEmpty();
}

struct Series {
  std::vector<double> v;
  void add(double x) { v.push_back(x); }
  QString json() const {
    return QString("{\"median\": %1, \"min\": %2, \"max\": %3}").arg(median(v)).arg(minOf(v)).arg(maxOf(v));
  }
};

}  // namespace

int main(int argc, char** argv) {
  tsr::registerBackends();
  QApplication app(argc, argv);
  QCommandLineParser cli;
  cli.addOption({"rounds", "Saves to time.", "N", "5"});
  cli.addOption({"project", "The Python model project.", "DIR", QString(TSR_SOURCE_DIR) + "/sample_projects/py_gpt"});
  cli.addHelpOption();
  cli.process(app);
  const int rounds = cli.value("rounds").toInt();
  if (auto fe = project::pythonFrontEnd(); !fe.ok()) {
    std::fprintf(stderr, "skipped: %s\n", fe.error().message.c_str());
    return 77;
  }
  QTemporaryDir tmp;
  const QString dir = tmp.filePath("project");
  if (!copyProject(cli.value("project"), dir)) {
    std::fprintf(stderr, "cannot copy %s\n", qPrintable(cli.value("project")));
    return 1;
  }
  const QString model = dir + "/model.py";
  QFile f(model);
  f.open(QIODevice::ReadOnly);
  const QByteArray source = f.readAll();
  f.close();

  MainWindow w;
  w.resize(1600, 1000);
  w.show();
  QSignalSpy opened(w.session(), &studio::Session::projectOpened);
  QSignalSpy failed(w.session(), &studio::Session::projectFailed);
  w.openProject(dir);
  if (!QTest::qWaitFor([&] { return !opened.isEmpty() && graphReady(w); }, 120000)) {
    std::fprintf(stderr, "the project did not open: %s\n",
                 failed.isEmpty() ? "timeout" : qPrintable(failed.last().first().toString()));
    return 1;
  }

  // The rounds with the warm tracer (a child forked per trace), then the peer: a new interpreter per trace.
  struct Rounds {
    Series total, wait, open, stages, layout;
    QString json() const {
      return QString("{\"save_to_graph_s\": %1, \"phases_s\": {\"wait\": %2, \"open\": %3, \"stages\": %4, "
                     "\"layout\": %5}}")
          .arg(total.json(), wait.json(), open.json(), stages.json(), layout.json());
    }
  };
  int edits = 0;
  auto measure = [&](Rounds& into) -> bool {
    for (int r = 0; r < rounds; ++r) {
      const int before = static_cast<int>(opened.size());
      // A comment added: the file's contents change, so the trace cache misses and model.py is traced again.
      QByteArray edited = source + QByteArray("\n# saved ") + QByteArray::number(edits++) + "\n";
      QSignalSpy opening(w.session(), &studio::Session::projectOpening);
      QElapsedTimer clock;
      clock.start();
      QFile file(model);
      file.open(QIODevice::WriteOnly | QIODevice::Truncate);
      file.write(edited);
      file.close();
      if (!QTest::qWaitFor([&] { return !opening.isEmpty(); }, 60000)) return false;
      const double tOpening = clock.nsecsElapsed() * 1e-9;
      if (!QTest::qWaitFor([&] { return opened.size() > before; }, 120000)) {
        std::fprintf(stderr, "no re-trace: %s\n",
                     failed.isEmpty() ? "timeout" : qPrintable(failed.last().first().toString()));
        return false;
      }
      const double tOpened = clock.nsecsElapsed() * 1e-9;
      if (!QTest::qWaitFor([&] { return !w.session()->busy() && w.session()->stages()->size() > 1; }, 120000))
        return false;
      const double tStages = clock.nsecsElapsed() * 1e-9;
      QTest::qWait(1);
      if (!QTest::qWaitFor([&] { return graphReady(w); }, 120000)) return false;
      const double tLaid = clock.nsecsElapsed() * 1e-9;
      into.total.add(tLaid);
      into.wait.add(tOpening);
      into.open.add(tOpened - tOpening);
      into.stages.add(tStages - tOpened);
      into.layout.add(tLaid - tStages);
    }
    return true;
  };
  Rounds warm, fresh;
  if (!measure(warm)) return 1;
  qputenv("TESSERA_TRACE_SERVER", "0");
  reloadEnvOptions();
  if (!measure(fresh)) return 1;
  qunsetenv("TESSERA_TRACE_SERVER");
  reloadEnvOptions();

  // The engine's phases alone, on this thread (with the warm tracer): the open, with its trace, and the stages.
  Series engineOpen, engineStages;
  for (int r = 0; r < rounds; ++r) {
    QFile out(model);
    out.open(QIODevice::WriteOnly | QIODevice::Truncate);
    out.write(source + QByteArray("\n# engine ") + QByteArray::number(r) + "\n");
    out.close();
    auto t0 = std::chrono::steady_clock::now();
    auto snap = inspect::openProject(dir.toStdString());
    auto t1 = std::chrono::steady_clock::now();
    if (!snap.ok()) return 1;
    auto st = inspect::compileStages(snap->traced);
    auto t2 = std::chrono::steady_clock::now();
    if (!st.ok()) return 1;
    engineOpen.add(std::chrono::duration<double>(t1 - t0).count());
    engineStages.add(std::chrono::duration<double>(t2 - t1).count());
  }

  // A child Python that only imports the package: the floor under any re-trace in a new process.
  Series pythonImport;
  for (int r = 0; r < rounds; ++r) {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("PYTHONPATH", QString::fromUtf8(kPythonPackageDir));
    p.setProcessEnvironment(env);
    QElapsedTimer clock;
    clock.start();
    p.start(QString::fromUtf8(kPythonExecutable), {"-c", "import tessera"});
    if (!p.waitForFinished(60000) || p.exitCode() != 0) return 1;
    pythonImport.add(clock.nsecsElapsed() * 1e-9);
  }

  std::printf("{\"project\": \"%s\", \"rounds\": %d,\n \"warm_tracer\": %s,\n \"new_interpreter\": %s,\n "
              "\"engine_s\": {\"open\": %s, \"stages\": %s},\n \"python_import_s\": %s,\n \"target_s\": 1.0, "
              "\"within_target\": %s, \"ratio_new_over_warm\": %g}\n",
              qPrintable(cli.value("project")), rounds, qPrintable(warm.json()), qPrintable(fresh.json()),
              qPrintable(engineOpen.json()), qPrintable(engineStages.json()), qPrintable(pythonImport.json()),
              median(warm.total.v) <= 1.0 ? "true" : "false", median(fresh.total.v) / median(warm.total.v));
  return 0;
}
