// tessera-studio [PROJECT] [--screenshot DIR | --screenshot FILE --panel NAME] [--theme light|dark] [--stage N] [--compare N]
//                [--expand GROUP]... [--select NODE] [--zoom SCALE] [--straggler] [--profile-diff RUN_A,RUN_B]
//                [--then PROJECT]
// Opens the IDE, optionally on a project. --screenshot waits until the project is open, compiled and laid
// out, renders each panel (or the one named) to PNG, and exits: for the README and for checks without a person.
#include <memory>

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QDockWidget>
#include <QFileInfo>
#include <QTimer>
#include <QUndoStack>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "app/studio/main_window.h"
#include "engine/backends/backends.h"
#include "engine/backends/cpu/thread_pool.h"
#include "engine/version.h"
#include "views/graph_panel.h"
#include "views/sharding_panel.h"
#include "views/session.h"
#include "views/timeline_panel.h"

using tsr::studio::MainWindow;

namespace {

// The sharding panel has planned (or failed to) and applied the --mesh and --drop edits, where it is rendered.
bool shardingReady(MainWindow* w, const QString& panel) {
  if (!panel.isEmpty() && panel != "sharding" && panel != "window") return true;
  auto* s = w->shardingPanel();
  return !s->planning() && !s->property("editsPending").toBool();
}

// Renders panels once the window is idle: project open, stages compiled, graph laid out.
void scheduleScreenshots(MainWindow* w, const QString& target, const QString& panel, bool hasProject, double zoom,
                         std::shared_ptr<bool> thenPending) {
  auto* timer = new QTimer(w);
  auto* waited = new int(0);
  QObject::connect(timer, &QTimer::timeout, w, [=] {
    ++*waited;
    if (*thenPending && *waited < 600) return;  // the second project is not asked for yet
    bool ready = !hasProject || (w->session()->project() && !w->session()->busy() && !w->graphPanel()->layoutRunning() &&
                                 w->graphPanel()->visibleGroups().size() + w->graphPanel()->visibleNodeCount() > 0 &&
                                 !w->timelinePanel()->loading() && shardingReady(w, panel));
    bool failed = hasProject && !w->session()->busy() && !w->session()->project();
    if (!ready && !failed && *waited < 600) return;  // at most a minute
    timer->stop();
    if (zoom > 0) {
      w->graphPanel()->setZoom(zoom);
    } else {
      w->graphPanel()->fitToView();
    }
    if (w->timelinePanel()->property("focusStraggler").toBool()) w->timelinePanel()->focusWorstCollective();
    QApplication::processEvents();
    int status = 0;
    auto panels = w->panels();
    panels.insert("window", w);
    for (auto it = panels.begin(); it != panels.end(); ++it) {
      if (!panel.isEmpty() && it.key() != panel) continue;
      QString file = panel.isEmpty() ? QDir(target).filePath(it.key() + ".png") : target;
      QWidget* widget = it.value();
      // A docked panel may sit behind a tab or be small: float its dock at a readable size to render it.
      auto* dock = qobject_cast<QDockWidget*>(widget->parentWidget());
      if (dock) {
        dock->setFloating(true);
        dock->resize(1100, 680);
        dock->show();
        dock->raise();
        QApplication::processEvents();
      }
      bool saved = widget->grab().save(file);
      if (dock) dock->setFloating(false);
      if (!saved) {
        std::fprintf(stderr, "tessera-studio: cannot write %s\n", qPrintable(file));
        status = 1;
      } else {
        std::printf("%s\n", qPrintable(file));
      }
    }
    if (!panel.isEmpty() && !panels.contains(panel)) {
      std::fprintf(stderr, "tessera-studio: no panel '%s' (%s)\n", qPrintable(panel), qPrintable(panels.keys().join(", ")));
      status = 2;
    }
    if (failed) status = 1;
    QApplication::exit(status);
  });
  timer->start(100);
}

// Prints the exception being handled (call it inside a catch block).
void reportEscapedException() {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "tessera-studio: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera-studio: internal error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "tessera-studio: internal error: an unknown exception\n");
  }
}

// Exceptions must not cross Qt's event loop (Qt does not support it): one escaping an event handler is printed
// and the IDE exits with status 1, instead of aborting.
class StudioApplication : public QApplication {
 public:
  using QApplication::QApplication;
  bool notify(QObject* receiver, QEvent* event) override {
    try {
      return QApplication::notify(receiver, event);
    } catch (...) {
      reportEscapedException();
    }
    QApplication::exit(1);
    return false;
  }
};

int run(int argc, char** argv) {
  // The backends this build has: the engine's compile sequence finds them in the runtime's registry.
  tsr::registerBackends();
  StudioApplication app(argc, argv);
  QApplication::setOrganizationName("Tessera");
  QApplication::setApplicationName("Tessera Studio");
  QApplication::setApplicationVersion(tsr::kVersion);
  QCommandLineParser parser;
  parser.setApplicationDescription("Tessera Studio: the IDE of the Tessera compile/train engine");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("project", "A project folder (holding project.toml) or the file itself");
  QCommandLineOption shot("screenshot", "Render each panel to PNG in DIR (or one panel to FILE with --panel) and exit", "DIR|FILE");
  QCommandLineOption panel("panel", "The panel --screenshot renders: graph, ir, inspector, project, metrics, runs, console, timeline, sharding, "
                                    "memory, roofline, source, window", "NAME");
  QCommandLineOption theme("theme", "light or dark (default: the last used)", "NAME");
  QCommandLineOption select("select", "Select this node of the graph once open (for screenshots of the inspector)", "NODE");
  QCommandLineOption stage("stage", "Show this pipeline stage (0: traced; -1: the last)", "N");
  QCommandLineOption compare("compare", "Show this stage side by side with the current one", "N");
  QCommandLineOption profileDiff("profile-diff", "Show run A's profile against run B's on the Timeline (Compare…)",
                                 "RUN_A,RUN_B");
  QCommandLineOption expand("expand", "Expand this module group of the graph (repeatable), e.g. h.0.mlp", "GROUP");
  QCommandLineOption zoom("zoom", "Graph scale for --screenshot, centred on the --select node (default: fit the window)", "SCALE");
  QCommandLineOption mesh("mesh", "Plan the sharding panel on this mesh (not applied), e.g. 2x2:data,model", "SHAPE:AXES");
  QCommandLineOption drop("drop", "Drop this PartitionSpec on an argument in the sharding panel (repeatable), e.g. "
                                  "'None,model@h.0.mlp.c_fc.weight'", "SPEC@ARG");
  QCommandLineOption straggler("straggler", "Show the timeline's collective call with the longest wait, its straggler marked");
  QCommandLineOption then("then", "Once the project is open and compiled, open this one (for screenshots of a switch, "
                                  "e.g. to a project that does not open)", "PROJECT");
  parser.addOptions({shot, panel, theme, select, stage, compare, expand, zoom, mesh, drop, straggler, profileDiff, then});
  parser.process(app);

  MainWindow w;
  if (parser.isSet(theme)) w.setTheme(parser.value(theme));
  QString project = parser.positionalArguments().value(0);
  if (!project.isEmpty()) w.openProject(project);
  if (parser.isSet(expand)) {
    QStringList groups = parser.values(expand);
    QObject::connect(w.session(), &tsr::studio::Session::stagesReady, &w, [&w, groups] {
      for (const QString& g : groups) w.graphPanel()->setExpanded(g, true);
    });
  }
  if (parser.isSet(stage) || parser.isSet(compare)) {
    // Once the pipeline has run (the second stagesReady: the first carries the traced graph alone).
    QObject::connect(w.session(), &tsr::studio::Session::stagesReady, &w, [&w, &parser, stage, compare] {
      int n = static_cast<int>(w.session()->stages()->size());
      if (n < 2) return;
      if (parser.isSet(stage)) {
        int s = parser.value(stage).toInt();
        w.session()->setCurrentStage(s < 0 ? n + s : s);
      }
      if (parser.isSet(compare)) w.graphPanel()->setCompareStage(parser.value(compare).toInt());
    });
  }
  if (parser.isSet(mesh) || parser.isSet(drop)) {
    // As a user would make them: the mesh once the project is planned, the drops once that mesh is (so the
    // panel shows what the drops changed).
    auto* panel = w.shardingPanel();
    panel->setProperty("editsPending", true);
    auto meshText = std::make_shared<QString>(parser.value(mesh));
    QStringList drops = parser.values(drop);
    QObject::connect(panel, &tsr::studio::ShardingPanel::planReady, &w, [panel, meshText, drops] {
      if (!panel->property("editsPending").toBool()) return;
      if (!meshText->isEmpty()) {
        QString m = *meshText;
        meshText->clear();
        const int edits = panel->undoStack()->count();
        if (panel->setMesh(m.section(':', 0, 0), m.section(':', 1)) && panel->undoStack()->count() > edits) return;
      }
      panel->setProperty("editsPending", false);
      for (const QString& d : drops) panel->dropSpec(d.section('@', -1), d.section('@', 0, -2));
    });
  }
  if (parser.isSet(straggler)) {
    auto* timeline = w.timelinePanel();
    timeline->setProperty("focusStraggler", true);
    QObject::connect(timeline, &tsr::studio::TimelinePanel::loaded, timeline, [timeline] { timeline->focusWorstCollective(); });
  }
  if (parser.isSet(profileDiff)) {
    // Once the project's own profile has loaded (which says where its store is), as Compare… would.
    auto* timeline = w.timelinePanel();
    const QStringList runs = parser.value(profileDiff).split(',');
    auto pending = std::make_shared<bool>(runs.size() == 2);
    if (!*pending) std::fprintf(stderr, "--profile-diff takes two run ids, RUN_A,RUN_B\n");
    QObject::connect(timeline, &tsr::studio::TimelinePanel::loaded, timeline, [&w, timeline, runs, pending] {
      if (!*pending) return;
      *pending = false;
      timeline->compareRuns(w.session()->runsDbPath(), runs[0].toLongLong(), runs[1].toLongLong());
    });
  }
  auto thenPending = std::make_shared<bool>(parser.isSet(then) && !project.isEmpty());
  if (*thenPending) {
    const QString next = parser.value(then);
    QObject::connect(w.session(), &tsr::studio::Session::stagesReady, &w, [&w, next, thenPending] {
      if (!*thenPending || !w.session()->stages() || w.session()->stages()->size() < 2) return;
      QTimer::singleShot(0, &w, [&w, next, thenPending] {
        w.openProject(next);
        *thenPending = false;
      });
    });
  }
  if (parser.isSet(select)) {
    int node = parser.value(select).toInt();
    QObject::connect(w.session(), &tsr::studio::Session::stagesReady, &w, [&w, node] { w.session()->selectNode(node); });
  }
  if (parser.isSet(shot)) {
    QString target = parser.value(shot);
    QDir().mkpath(parser.isSet(panel) ? QFileInfo(target).absolutePath() : target);
    w.show();
    scheduleScreenshots(&w, target, parser.value(panel), !project.isEmpty(), parser.value(zoom).toDouble(), thenPending);
  } else {
    w.show();
  }
  return app.exec();
}

}  // namespace

int main(int argc, char** argv) {
  tsr::cpu::ensureThreadLibrarySettings(argv);
  // What escapes outside the event loop (the command line, building the window): printed, status 1.
  try {
    return run(argc, argv);
  } catch (...) {
    reportEscapedException();
  }
  return 1;
}
