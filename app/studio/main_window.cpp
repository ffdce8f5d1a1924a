#include "app/studio/main_window.h"

#include <chrono>
#include <cmath>

#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QInputDialog>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QStatusBar>
#include <QStyle>
#include <QStyleFactory>
#include <QToolBar>
#include <QTreeView>
#include <QUndoStack>

#include "app/studio/command_palette.h"
#include "engine/inspect/environment.h"
#include "engine/inspect/new_project.h"
#include "engine/inspect/plugins.h"
#include "engine/inspect/versions.h"
#include "views/console_panel.h"
#include "views/graph_panel.h"
#include "views/inspector_panel.h"
#include "views/ir_panel.h"
#include "views/metrics_panel.h"
#include "views/new_project_dialog.h"
#include "views/plugin_dialog.h"
#include "views/plugin_panel.h"
#include "views/preferences_dialog.h"
#include "views/project_panel.h"
#include "views/run_configurations_dialog.h"
#include "views/run_controller.h"
#include "views/runs_panel.h"
#include "views/session.h"
#include "views/param_tree_model.h"
#include "views/memory_panel.h"
#include "views/roofline_panel.h"
#include "views/code_edit.h"
#include "views/source_panel.h"
#include "views/sharding_panel.h"
#include "views/timeline_panel.h"

// The themes are compiled into this static library; its resources must be registered by hand.
static void initStudioResources() { Q_INIT_RESOURCE(studio); }

namespace tsr::studio {

namespace {

constexpr int kMaxRecent = 8;
constexpr int kLayoutVersion = 2;  // 2: the Source panel

QString sampleProjectsDir() {
  QDir here(QCoreApplication::applicationDirPath());
  for (const char* rel : {"sample_projects", "../sample_projects", "../../sample_projects", "../../../sample_projects",
                             "../share/tessera/sample_projects"}) {
    QDir d(here.filePath(rel));
    if (d.exists()) return d.canonicalPath();
  }
  return QString(TSR_SOURCE_DIR) + "/sample_projects";
}

}  // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent),
      m_session(new Session(this)),
      m_runner(new RunController(this)),
      m_runProgress(new QProgressBar),
      m_runLabel(new QLabel) {
  initStudioResources();
  setObjectName("mainWindow");
  setWindowTitle("Tessera Studio");
  setAcceptDrops(true);
  setDockNestingEnabled(true);
  resize(1500, 950);
  createPanels();
  loadPlugins(QString());
  createActions();
  m_runProgress->setMaximumWidth(220);
  m_runProgress->setVisible(false);
  statusBar()->addPermanentWidget(m_runLabel);
  statusBar()->addPermanentWidget(m_runProgress);
  m_defaultState = saveState(kLayoutVersion);
  restoreLayout();
  if (const std::optional<double> wait = storeLockWait()) applyStoreLockWait(wait);

  connect(m_session, &Session::projectOpened, this, [this] {
    setWindowTitle(QString("%1 — Tessera Studio").arg(QString::fromStdString(m_session->project()->project.name)));
    addRecent(m_session->projectDir());
    loadConfigurations();
    updateRunActions();
    statusBar()->showMessage(tr("Opened %1").arg(m_session->projectDir()), 5000);
  });
  // While a project opens, and when it does not, nothing runs: Run would train what is on disk, which is not
  // what the window shows (Qt Creator, too, disables Run while a project parses and when it failed to).
  connect(m_session, &Session::projectOpening, this, [this] { updateRunActions(); });
  connect(m_session, &Session::projectClosed, this, [this] {
    const QString name = QFileInfo(m_session->failedProjectDir()).fileName();
    setWindowTitle(tr("%1 (did not open) — Tessera Studio").arg(name));
    m_configs.clear();
    {
      QSignalBlocker block(m_configBox);
      m_configBox->clear();
    }
    for (PluginPanel* p : std::as_const(m_pluginPanels)) p->setStages({});
    updateRunActions();
  });
  connect(m_session, &Session::stagesReady, this, [this] {
    if (!m_session->stages()) return;
    for (PluginPanel* p : std::as_const(m_pluginPanels)) p->setStages(*m_session->stages());
  });
  connect(m_session, &Session::stageChanged, this, [this](int index) {
    for (PluginPanel* p : std::as_const(m_pluginPanels)) p->setCurrentStage(index);
  });
  connect(m_session, &Session::projectFailed, this, [this](const QString& msg) {
    statusBar()->showMessage(
        tr("Could not open the project: %1").arg(ProjectPanel::failureSummary(msg, m_session->failedProjectFile())));
    m_docks["console"]->raise();
    // The error and its "Open project.toml" are in the project panel.
    m_docks["project"]->show();
  });
  connect(m_console, &ConsolePanel::fileLocationActivated, this, [this](const QString& file, int line) {
    if (!m_source->file().isEmpty() && QFileInfo(file).absoluteFilePath() == m_source->file()) {
      m_docks["source"]->show();
      m_docks["source"]->raise();
      m_source->editor()->goToLine(line);
      return;
    }
    m_docks["project"]->raise();
    m_project->showFileLine(file, line);
  });
  // A Python model's file changed (saved here or elsewhere): trace it again.
  connect(m_source, &SourcePanel::reopenRequested, this, [this](const QString& dir) { openProject(dir); });
  connect(m_session, &Session::projectOpening, this, [this] {
    if (!m_source->file().isEmpty()) m_docks["source"]->raise();
  });
  connect(m_project, &ProjectPanel::saved, this, [this] { openProject(m_session->projectDir()); });
  connect(m_project, &ProjectPanel::reopenRequested, this, [this](const QString& dir) { openProject(dir); });
  // A stale timeline's Re-profile is Run ▶ Profile.
  connect(m_timeline, &TimelinePanel::reprofileRequested, this, [this] {
    if (m_profileAction->isEnabled()) m_profileAction->trigger();
  });
  connect(m_runs, &RunsPanel::selectedRunsChanged, m_metrics, &MetricsPanel::setRuns);
  connect(m_runner, &RunController::output, m_session, &Session::log);
  connect(m_runner, &RunController::started, this, [this](const QString& cmd) {
    m_session->log("info", "$ " + cmd);
    m_runProgress->setRange(0, 0);
    m_runProgress->setVisible(true);
    m_runLabel->setText(m_runner->command() == "profile" ? tr("Profiling…")
                        : m_runner->command() == "eval"  ? tr("Evaluating…")
                                                         : tr("Training…"));
    updateRunActions();
    m_timeline->setRunning(true);
    m_stopAction->setEnabled(true);
    m_docks["metrics"]->raise();
  });
  connect(m_runner, &RunController::progress, this, [this](int step, int total) {
    m_runProgress->setRange(0, total);
    m_runProgress->setValue(step);
    m_runLabel->setText(tr("step %1/%2").arg(step).arg(total));
  });
  connect(m_runner, &RunController::finished, this, [this](bool ok, const QString& message) {
    m_runProgress->setVisible(false);
    bool profile = m_runner->command() == "profile";
    m_runLabel->setText(ok ? (profile ? tr("Profile finished") : tr("Run finished")) : (profile ? tr("Profile failed") : tr("Run failed")));
    updateRunActions();
    m_timeline->setRunning(false);
    m_stopAction->setEnabled(false);
    statusBar()->showMessage(message, 10000);
    if (!ok) m_docks["console"]->raise();
    m_runs->refresh();
    m_metrics->poll();
    if (profile && ok) {
      m_session->reloadProfile();
      m_graph->setOverlay("time");
      m_timeline->openProfile(m_session->runsDbPath());
      m_docks["timeline"]->raise();
    }
  });
}

MainWindow::~MainWindow() { qDeleteAll(m_pluginPanels); }

void MainWindow::createPanels() {
  m_graph = new GraphPanel(m_session);
  m_ir = new IrPanel(m_session);
  m_inspector = new InspectorPanel(m_session);
  m_project = new ProjectPanel(m_session);
  m_metrics = new MetricsPanel(m_session);
  m_runs = new RunsPanel(m_session);
  m_console = new ConsolePanel(m_session);
  m_timeline = new TimelinePanel(m_session);
  m_sharding = new ShardingPanel(m_session);
  m_memory = new MemoryPanel(m_session);
  m_roofline = new RooflinePanel(m_session);
  m_source = new SourcePanel(m_session);
  setCentralWidget(m_graph);
  addPanel("project", tr("Project"), m_project, Qt::LeftDockWidgetArea);
  addPanel("ir", tr("IR"), m_ir, Qt::RightDockWidgetArea);
  addPanel("inspector", tr("Inspector"), m_inspector, Qt::RightDockWidgetArea);
  addPanel("source", tr("Source"), m_source, Qt::RightDockWidgetArea);
  tabifyDockWidget(m_docks["ir"], m_docks["source"]);
  m_docks["ir"]->raise();
  addPanel("metrics", tr("Metrics"), m_metrics, Qt::BottomDockWidgetArea);
  addPanel("runs", tr("Runs"), m_runs, Qt::BottomDockWidgetArea);
  addPanel("console", tr("Console"), m_console, Qt::BottomDockWidgetArea);
  tabifyDockWidget(m_docks["metrics"], m_docks["runs"]);
  tabifyDockWidget(m_docks["runs"], m_docks["console"]);
  addPanel("timeline", tr("Timeline"), m_timeline, Qt::BottomDockWidgetArea);
  tabifyDockWidget(m_docks["console"], m_docks["timeline"]);
  addPanel("sharding", tr("Sharding"), m_sharding, Qt::BottomDockWidgetArea);
  tabifyDockWidget(m_docks["timeline"], m_docks["sharding"]);
  addPanel("memory", tr("Memory"), m_memory, Qt::BottomDockWidgetArea);
  tabifyDockWidget(m_docks["sharding"], m_docks["memory"]);
  addPanel("roofline", tr("Roofline"), m_roofline, Qt::BottomDockWidgetArea);
  tabifyDockWidget(m_docks["memory"], m_docks["roofline"]);
  // PartitionSpecs dragged from the sharding panel drop on the parameter tree; its Sharding column follows
  // the plan.
  m_project->paramView()->setAcceptDrops(true);
  m_project->paramView()->setDragDropMode(QAbstractItemView::DropOnly);
  m_project->paramView()->setDropIndicatorShown(true);
  connect(m_project->paramModel(), &ParamTreeModel::specDropped, m_session, &Session::dropSpec);
  connect(m_session, &Session::shardingChanged, this, [this] {
    std::map<std::string, std::string> specs;
    if (ShardingPtr s = m_session->sharding(); s && s->plan)
      for (const auto& a : s->plan->arguments)
        if (const auto* param = a.path.as<inspect::ArgumentPath::Param>())
          specs[param->path] = a.sharding.toString(s->plan->mesh) + "  " + inspect::formatBytes(a.bytes);
    m_project->paramModel()->setShardings(std::move(specs));
  });
  m_docks["metrics"]->raise();
  resizeDocks({m_docks["project"]}, {330}, Qt::Horizontal);
  resizeDocks({m_docks["ir"]}, {480}, Qt::Horizontal);
  resizeDocks({m_docks["metrics"]}, {280}, Qt::Vertical);
}

QDockWidget* MainWindow::addPanel(const QString& name, const QString& title, QWidget* w, Qt::DockWidgetArea area) {
  auto* dock = new QDockWidget(title, this);
  dock->setObjectName(name + "Dock");
  dock->setWidget(w);
  addDockWidget(area, dock);
  m_docks[name] = dock;
  return dock;
}

void MainWindow::createActions() {
  auto make = [this](QMenu* menu, const QString& name, const QString& text, const QKeySequence& key, auto slot) {
    auto* a = new QAction(text, this);
    a->setObjectName(name);
    if (!key.isEmpty()) a->setShortcut(key);
    QString path = menu->title();
    path.remove('&');
    a->setProperty("menuPath", path);
    connect(a, &QAction::triggered, this, slot);
    menu->addAction(a);
    addAction(a);
    return a;
  };
  QMenu* file = menuBar()->addMenu(tr("&File"));
  make(file, "openProject", tr("&Open Project…"), QKeySequence::Open, [this] { onOpenAction(); });
  make(file, "newProject", tr("&New Project…"), QKeySequence::New, [this] { onNewProjectAction(); });
  make(file, "newProjectFromTemplate", tr("New Project from &Template…"), QKeySequence(), [this] { onNewAction(); });
  m_recentMenu = file->addMenu(tr("Open &Recent"));
  make(file, "reloadProject", tr("Re&load Project"), QKeySequence(Qt::CTRL | Qt::Key_R), [this] {
    // The open project, or the one that did not open (fixed since, perhaps by another editor).
    const QString dir = m_session->project() ? m_session->projectDir() : m_session->failedProjectDir();
    if (!dir.isEmpty()) openProject(dir);
  });
  make(file, "openTrace", tr("Open &Trace…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_O), [this] { onOpenTraceAction(); });
  make(file, "saveSettings", tr("&Save Project Settings"), QKeySequence::Save, [this] { m_project->save(); });
  file->addSeparator();
  make(file, "preferences", tr("&Preferences…"), QKeySequence::Preferences, [this] { showPreferences(); })
      ->setMenuRole(QAction::PreferencesRole);
  make(file, "quit", tr("&Quit"), QKeySequence::Quit, [this] { close(); });

  QMenu* view = menuBar()->addMenu(tr("&View"));
  m_viewMenu = view;
  make(view, "commandPalette", tr("Command &Palette…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P), [this] { showCommandPalette(); });
  make(view, "findInGraph", tr("&Find in Graph"), QKeySequence::Find, [this] { m_graph->focusSearch(); });
  make(view, "findNext", tr("Find &Next"), QKeySequence(Qt::Key_F3), [this] { m_graph->findNext(); });
  make(view, "findPrevious", tr("Find Pre&vious"), QKeySequence(Qt::SHIFT | Qt::Key_F3), [this] { m_graph->findPrevious(); });
  make(view, "fitGraph", tr("Fit Graph to &Window"), QKeySequence(Qt::CTRL | Qt::Key_0), [this] { m_graph->fitToView(); });
  make(view, "expandAll", tr("&Expand All Groups"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), [this] { m_graph->expandAll(true); });
  make(view, "collapseAll", tr("&Collapse All Groups"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C), [this] { m_graph->expandAll(false); });
  view->addSeparator();
  int n = 1;
  // Every panel can be reached from the keyboard: Alt+1 to Alt+9, the rest through the command palette.
  for (const char* name : {"project", "ir", "inspector", "metrics", "runs", "console", "timeline", "sharding", "memory",
                           "roofline", "source"}) {
    QDockWidget* d = m_docks[name];
    const QKeySequence key = n <= 9 ? QKeySequence(Qt::ALT | (Qt::Key_0 + n)) : QKeySequence();
    ++n;
    QAction* a = make(view, QStringLiteral("show_") + name, tr("Show %1").arg(d->windowTitle()), key,
                      [d] {
                        d->show();
                        d->raise();
                        if (d->widget()) d->widget()->setFocus();
                      });
    Q_UNUSED(a);
  }
  view->addSeparator();
  make(view, "themeLight", tr("&Light Theme"), QKeySequence(), [this] { setTheme("light"); });
  make(view, "themeDark", tr("&Dark Theme"), QKeySequence(), [this] { setTheme("dark"); });
  make(view, "resetLayout", tr("&Reset Layout"), QKeySequence(), [this] {
    restoreState(m_defaultState, kLayoutVersion);
    for (QDockWidget* d : std::as_const(m_docks)) d->show();
  });

  QMenu* run = menuBar()->addMenu(tr("&Run"));
  m_runAction = make(run, "run", tr("&Run ▶ Train"), QKeySequence(Qt::Key_F5), [this] { startRun(); });
  m_resumeAction = make(run, "resume", tr("R&esume ▶"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_F5), [this] { startResume(); });
  m_profileAction = make(run, "profile", tr("&Profile ▶ (3 steps)"), QKeySequence(Qt::CTRL | Qt::Key_F5), [this] { startProfile(); });
  m_evalAction = make(run, "eval", tr("E&valuate ▶"), QKeySequence(), [this] { startEval(); });
  m_stopAction = make(run, "stop", tr("&Stop"), QKeySequence(Qt::SHIFT | Qt::Key_F5), [this] { stopRun(); });
  make(run, "editConfigurations", tr("Edit &Configurations…"), QKeySequence(), [this] { editConfigurations(); });
  make(run, "compareRuns", tr("&Compare Selected Runs"), QKeySequence(), [this] {
    m_docks["runs"]->raise();
    m_runs->compareSelected();
  });
  for (QAction* a : {m_runAction, m_profileAction, m_resumeAction, m_evalAction, m_stopAction}) a->setEnabled(false);

  QMenu* shard = menuBar()->addMenu(tr("&Sharding"));
  auto showSharding = [this] {
    m_docks["sharding"]->show();
    m_docks["sharding"]->raise();
  };
  make(shard, "shardingUndo", tr("&Undo Sharding Edit"), QKeySequence(Qt::CTRL | Qt::ALT | Qt::Key_Z), [this, showSharding] {
    showSharding();
    m_sharding->undoStack()->undo();
  });
  make(shard, "shardingRedo", tr("&Redo Sharding Edit"), QKeySequence(Qt::CTRL | Qt::ALT | Qt::SHIFT | Qt::Key_Z),
       [this, showSharding] {
         showSharding();
         m_sharding->undoStack()->redo();
       });
  make(shard, "shardingApply", tr("&Apply to project.toml"), QKeySequence(), [this, showSharding] {
    showSharding();
    QString error;
    if (!m_sharding->apply(&error)) statusBar()->showMessage(tr("Sharding not applied: %1").arg(error), 8000);
  });

  QMenu* help = menuBar()->addMenu(tr("&Help"));
  make(help, "plugins", tr("&Plugins…"), QKeySequence(), [this] { showPlugins(); });
  make(help, "about", tr("&About Tessera Studio"), QKeySequence(), [this] { showAbout(); });

  auto* tb = addToolBar(tr("Main"));
  tb->setObjectName("mainToolBar");
  tb->addAction(action("openProject"));
  m_configBox = new QComboBox;
  m_configBox->setObjectName("runConfigurationBox");
  m_configBox->setToolTip(tr("The run configuration Run ▶ uses (Run › Edit Configurations…)"));
  m_configBox->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  tb->addWidget(m_configBox);
  tb->addAction(m_runAction);
  tb->addAction(m_resumeAction);
  tb->addAction(m_profileAction);
  tb->addAction(m_stopAction);
  tb->addAction(action("commandPalette"));
  rebuildRecentMenu();
}

QList<QAction*> MainWindow::allActions() const {
  QList<QAction*> out;
  for (QAction* a : actions())
    if (!a->objectName().isEmpty()) out << a;
  return out;
}

QAction* MainWindow::action(const QString& objectName) const {
  for (QAction* a : actions())
    if (a->objectName() == objectName) return a;
  return nullptr;
}

QMap<QString, QWidget*> MainWindow::panels() const {
  QMap<QString, QWidget*> out{{"graph", m_graph},     {"ir", m_ir},     {"inspector", m_inspector},
                              {"project", m_project}, {"metrics", m_metrics}, {"runs", m_runs},
                              {"console", m_console}, {"timeline", m_timeline}, {"sharding", m_sharding},
                              {"memory", m_memory},   {"roofline", m_roofline}, {"source", m_source}};
  for (auto it = m_pluginPanels.begin(); it != m_pluginPanels.end(); ++it) out.insert(it.key(), it.value()->widget());
  return out;
}

void MainWindow::openProject(const QString& path) {
  QFileInfo info(path);
  QString dir = info.isDir() ? info.absoluteFilePath() : info.absolutePath();
  // The project's own plugins (its model family, its ops) load before it is parsed and traced.
  if (!m_session->busy()) loadPlugins(dir);
  m_session->openProject(dir);
}

void MainWindow::loadPlugins(const QString& projectDir) {
  // Asked once per project: a Yes is remembered in the trust list, a No for as long as the IDE runs.
  auto ask = [this](const plugin::TrustRequest& request) {
    QString project = QString::fromStdString(plugin::trustFolderName(request.projectDir));
    if (m_untrustedProjects.contains(project)) return false;
    bool yes = false;
    if (m_trustPrompt) {
      yes = m_trustPrompt(request);
    } else if (QGuiApplication::platformName() == "offscreen") {
      yes = false;  // no one to answer (screenshots, tests): untrusted code stays out
    } else {
      QStringList files;
      for (const auto& f : request.files)
        files << QString("%1  (SHA-256 %2)").arg(QString::fromStdString(f.name), QString::fromStdString(f.sha256.substr(0, 16)) + "…");
      QMessageBox box(QMessageBox::Warning, tr("Trust this project's plugins?"),
                      tr("The project %1 brings native plugins in its plugins/ folder:\n\n%2\n\nThey would run with your "
                         "rights. Load them only if you trust where the project comes from. (%3)")
                          .arg(project, files.join("\n"), QString::fromStdString(request.reason)),
                      QMessageBox::NoButton, this);
      QPushButton* trust = box.addButton(tr("Trust and Load"), QMessageBox::AcceptRole);
      box.addButton(tr("Don't Load"), QMessageBox::RejectRole);
      box.exec();
      yes = box.clickedButton() == trust;
    }
    if (!yes) {
      m_untrustedProjects.insert(project);
      m_session->log("warning", QString("the plugins of %1 are not loaded: the project is not trusted").arg(project));
      return false;
    }
    if (Status st = plugin::rememberTrust(request); !st.ok())
      m_session->log("warning", QString("cannot remember the trust: %1").arg(QString::fromStdString(st.error().message)));
    return true;
  };
  for (const auto& r : inspect::loadPlugins(projectDir.toStdString(), ask)) {
    if (r.loaded) m_session->log("info", QString("plugin %1 %2 loaded from %3").arg(QString::fromStdString(r.name),
                                                                                     QString::fromStdString(r.version),
                                                                                     QString::fromStdString(r.path)));
    else m_session->log("warning", QString("plugin %1 skipped: %2").arg(QString::fromStdString(r.path),
                                                                      QString::fromStdString(r.error)));
  }
  for (const auto& reg : inspect::pluginPanels()) {
    QString name = QString::fromStdString(reg.name);
    if (m_pluginPanels.contains(name) || m_docks.contains(name)) continue;
    auto* dock = new QDockWidget(QString::fromStdString(reg.title), this);
    PluginPanel* panel = nullptr;
    try {
      panel = static_cast<PluginPanel*>(reg.create(dock));
    } catch (const std::exception& e) {
      m_session->log("warning", QString("plugin panel %1 failed: %2").arg(name, e.what()));
    }
    if (!panel || !panel->widget()) {
      delete dock;
      continue;
    }
    dock->setObjectName(name + "Dock");
    dock->setWidget(panel->widget());
    addDockWidget(Qt::RightDockWidgetArea, dock);
    if (m_docks.contains("inspector")) tabifyDockWidget(m_docks["inspector"], dock);
    m_docks[name] = dock;
    m_pluginPanels[name] = panel;
    if (m_session->stages()) panel->setStages(*m_session->stages());
  }
}

void MainWindow::showPlugins() {
  std::vector<passes::PassContext::Report> reports;
  if (m_session->stages() && !m_session->stages()->empty()) reports = m_session->stages()->back().reports;
  auto* dialog = new PluginDialog(inspect::pluginRecords(), std::move(reports), this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  dialog->show();
}

void MainWindow::onOpenAction() {
  QString dir = QFileDialog::getExistingDirectory(this, tr("Open a project folder (with project.toml)"),
                                                  m_session->project() ? m_session->projectDir() : sampleProjectsDir());
  if (!dir.isEmpty()) openProject(dir);
}

void MainWindow::onNewProjectAction() {
  auto* dialog = new NewProjectDialog(QDir::home().filePath("tessera-project"), this);
  dialog->setAttribute(Qt::WA_DeleteOnClose);
  connect(dialog, &QDialog::accepted, this, [this, dialog] {
    m_session->log("info", "new project " + dialog->createdFolder());
    openProject(dialog->createdFolder());
  });
  dialog->show();
}

void MainWindow::onNewAction() {
  QDir samples(sampleProjectsDir());
  QStringList names = samples.entryList(QDir::Dirs | QDir::NoDotAndDotDot);
  names.erase(std::remove_if(names.begin(), names.end(),
                             [&](const QString& n) { return !QFileInfo::exists(samples.filePath(n + "/project.toml")); }),
              names.end());
  bool ok = false;
  QString name = QInputDialog::getItem(this, tr("New project"), tr("Template"), names, 0, false, &ok);
  if (!ok || name.isEmpty()) return;
  // A folder that does not exist yet is what a new project usually wants: it is created.
  QString target = QFileDialog::getSaveFileName(this, tr("The new project's folder (created if missing)"),
                                                QDir::home().filePath(name), QString(), nullptr,
                                                QFileDialog::ShowDirsOnly);
  if (!target.isEmpty()) newProjectFromTemplate(samples.filePath(name), target);
}

void MainWindow::onOpenTraceAction() {
  QString path = QFileDialog::getOpenFileName(this, tr("Open a Chrome/Perfetto trace"),
                                              m_session->project() ? m_session->projectDir() : QDir::homePath(),
                                              tr("Trace JSON (*.json);;All files (*)"));
  if (path.isEmpty()) return;
  m_timeline->openTrace(path);
  m_docks["timeline"]->show();
  m_docks["timeline"]->raise();
}

void MainWindow::newProjectFromTemplate(const QString& templateDir, const QString& targetDir) {
  auto created = inspect::newProjectFromTemplate(templateDir.toStdString(), targetDir.toStdString());
  if (!created.ok()) {
    m_session->log("error", "new project: " + QString::fromStdString(created.error().message));
    return;
  }
  m_session->log("info", "new project " + QString::fromStdString(*created) + " from " + templateDir);
  openProject(QString::fromStdString(*created));
}

void MainWindow::setTheme(const QString& name) {
  m_theme = name == "dark" ? "dark" : "light";
  qApp->setStyle(QStyleFactory::create("Fusion"));
  QPalette pal;
  if (m_theme == "dark") {
    pal.setColor(QPalette::Window, QColor(37, 40, 46));
    pal.setColor(QPalette::WindowText, QColor(220, 223, 228));
    pal.setColor(QPalette::Base, QColor(28, 30, 35));
    pal.setColor(QPalette::AlternateBase, QColor(44, 48, 55));
    pal.setColor(QPalette::Text, QColor(220, 223, 228));
    pal.setColor(QPalette::Button, QColor(48, 52, 60));
    pal.setColor(QPalette::ButtonText, QColor(220, 223, 228));
    pal.setColor(QPalette::Highlight, QColor(64, 128, 210));
    pal.setColor(QPalette::HighlightedText, Qt::white);
    pal.setColor(QPalette::ToolTipBase, QColor(48, 52, 60));
    pal.setColor(QPalette::ToolTipText, QColor(220, 223, 228));
    pal.setColor(QPalette::PlaceholderText, QColor(130, 135, 145));
    pal.setColor(QPalette::Link, QColor(110, 170, 255));
    for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
      pal.setColor(QPalette::Disabled, role, QColor(110, 115, 125));
  } else {
    pal = qApp->style()->standardPalette();
    pal.setColor(QPalette::Highlight, QColor(48, 112, 200));
  }
  qApp->setPalette(pal);
  QFile qss(QString(":/themes/%1.qss").arg(m_theme));
  qApp->setStyleSheet(qss.open(QIODevice::ReadOnly) ? QString::fromUtf8(qss.readAll()) : QString());
  QSettings().setValue("theme", m_theme);
  for (QWidget* w : panels()) w->update();
}

void MainWindow::addRecent(const QString& path) {
  QSettings s;
  QStringList recent = s.value("recentProjects").toStringList();
  recent.removeAll(path);
  recent.prepend(path);
  while (recent.size() > kMaxRecent) recent.removeLast();
  s.setValue("recentProjects", recent);
  rebuildRecentMenu();
}

QStringList MainWindow::recentProjects() const { return QSettings().value("recentProjects").toStringList(); }

void MainWindow::rebuildRecentMenu() {
  // Recent projects are actions too, so the palette lists them.
  for (QAction* a : m_recentMenu->actions()) {
    removeAction(a);
    a->deleteLater();
  }
  m_recentMenu->clear();
  for (const QString& p : recentProjects()) {
    auto* a = new QAction(p, this);
    a->setObjectName("recent:" + p);
    a->setProperty("menuPath", "Open Recent");
    connect(a, &QAction::triggered, this, [this, p] { openProject(p); });
    m_recentMenu->addAction(a);
    addAction(a);
  }
  m_recentMenu->setEnabled(!m_recentMenu->isEmpty());
}

void MainWindow::restoreLayout() {
  QSettings s;
  restoreGeometry(s.value("window/geometry").toByteArray());
  restoreState(s.value("window/state").toByteArray(), kLayoutVersion);
  setTheme(s.value("theme", "light").toString());
}

void MainWindow::saveLayout() {
  QSettings s;
  s.setValue("window/geometry", saveGeometry());
  s.setValue("window/state", saveState(kLayoutVersion));
}

void MainWindow::showPreferences() {
  PreferencesDialog dialog(storeLockWait(), this);
  if (dialog.exec() == QDialog::Accepted) setStoreLockWait(dialog.lockWait());
}

std::optional<double> MainWindow::storeLockWait() const {
  // What --lock-wait takes: above 0, at most a day.
  bool ok = false;
  const double seconds = QSettings().value("store/lockWait").toDouble(&ok);
  if (!ok || !(seconds > 0) || seconds > 86400) return std::nullopt;
  return seconds;
}

void MainWindow::setStoreLockWait(std::optional<double> seconds) {
  QSettings s;
  if (seconds) s.setValue("store/lockWait", *seconds);
  else s.remove("store/lockWait");
  applyStoreLockWait(storeLockWait());
}

void MainWindow::applyStoreLockWait(std::optional<double> seconds) {
  using Ms = std::chrono::milliseconds;
  inspect::setLockWaitLimit(seconds ? std::optional<Ms>(Ms(std::llround(*seconds * 1000))) : std::nullopt);
  m_runner->setLockWait(seconds);
}

void MainWindow::closeEvent(QCloseEvent* e) {
  saveLayout();
  if (m_runner->running()) m_runner->stop();
  QMainWindow::closeEvent(e);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
  if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
  for (const QUrl& url : e->mimeData()->urls()) {
    QFileInfo info(url.toLocalFile());
    QString dir = info.isDir() ? info.absoluteFilePath() : info.absolutePath();
    if (QFileInfo::exists(QDir(dir).filePath("project.toml"))) {
      openProject(dir);
      e->acceptProposedAction();
      return;
    }
  }
  m_session->log("warning", tr("Drop a folder that holds a project.toml."));
}

void MainWindow::loadConfigurations() {
  m_configs.clear();
  if (const ProjectPtr snapshot = m_session->project()) {
    auto loaded = inspect::loadConfigurations(snapshot->project);
    if (loaded.ok()) {
      m_configs = std::move(*loaded);
    } else {
      m_session->log("warning", QString::fromStdString(loaded.error().message));
      m_configs = inspect::defaultConfigurations(snapshot->project);
    }
  }
  const QString selected = m_configBox->currentText();
  QSignalBlocker block(m_configBox);
  m_configBox->clear();
  for (const auto& c : m_configs) m_configBox->addItem(QString::fromStdString(c.name));
  const int keep = m_configBox->findText(selected);
  m_configBox->setCurrentIndex(keep >= 0 ? keep : 0);
}

void MainWindow::launch(inspect::RunAction action) {
  // Only a project that is open runs (the actions are off otherwise; a shortcut or the palette may still ask).
  if (!m_session->project() || m_session->opening() || m_configs.empty()) return;
  const int index = std::clamp(m_configBox->currentIndex(), 0, static_cast<int>(m_configs.size()) - 1);
  // Resume and Eval act on the run selected in the Runs panel; none (or several): the latest run.
  const QList<qint64> selected = m_runs->selectedRuns();
  const int64_t run = selected.size() == 1 ? selected.front() : 0;
  auto cmd = inspect::launchCommand(m_configs[static_cast<size_t>(index)], action, m_session->projectDir().toStdString(),
                                    RunController::findTessera().toStdString(), run);
  if (!cmd.ok()) {
    const QString m = QString::fromStdString(cmd.error().message);
    m_session->log("error", m);
    statusBar()->showMessage(m, 10000);
    m_docks["console"]->raise();
    return;
  }
  const bool profile = action == inspect::RunAction::Profile ||
                       (action == inspect::RunAction::Train && m_configs[static_cast<size_t>(index)].profile);
  const QString label = profile ? "profile" : action == inspect::RunAction::Eval ? "eval"
                                            : action == inspect::RunAction::Resume ? "resume" : "train";
  m_runner->start(*cmd, label, m_session->runsDbPath());
}

void MainWindow::updateRunActions() {
  // Why the actions are off, in their tooltips (the toolbar's buttons show them).
  QString why;
  if (m_runner->running()) why = tr("A run is under way (Run › Stop ends it)");
  else if (m_session->opening()) why = tr("The project is opening");
  else if (!m_session->project() && !m_session->failedProjectDir().isEmpty())
    why = tr("%1 did not open: fix the error the Console and the Project panel show")
              .arg(QFileInfo(m_session->failedProjectDir()).fileName());
  else if (!m_session->project()) why = tr("Open a project first");
  for (QAction* a : {m_runAction, m_profileAction, m_resumeAction, m_evalAction}) {
    a->setEnabled(why.isEmpty());
    QString tip = a->text().remove('&');
    if (!why.isEmpty()) tip += " — " + why;
    a->setToolTip(tip);
  }
}

void MainWindow::startRun() { launch(inspect::RunAction::Train); }
void MainWindow::startResume() { launch(inspect::RunAction::Resume); }
void MainWindow::startProfile() { launch(inspect::RunAction::Profile); }
void MainWindow::startEval() { launch(inspect::RunAction::Eval); }

void MainWindow::editConfigurations() {
  if (!m_session->project()) {
    statusBar()->showMessage(tr("Open a project first: run configurations belong to a project"), 5000);
    return;
  }
  RunConfigurationsDialog dialog(m_configs, m_session->projectDir(), RunController::findTessera(),
                                 m_configBox->currentIndex(), this);
  if (dialog.exec() != QDialog::Accepted) return;
  m_configs = dialog.configurations();
  if (auto st = inspect::saveConfigurations(m_session->projectDir().toStdString(), m_configs); !st.ok())
    m_session->log("error", QString::fromStdString(st.error().message));
  QSignalBlocker block(m_configBox);
  m_configBox->clear();
  for (const auto& c : m_configs) m_configBox->addItem(QString::fromStdString(c.name));
  m_configBox->setCurrentIndex(dialog.currentIndex());
}

void MainWindow::stopRun() { m_runner->stop(); }

void MainWindow::showCommandPalette() {
  auto* palette = new CommandPalette(allActions(), this);
  palette->setAttribute(Qt::WA_DeleteOnClose);
  palette->move(mapToGlobal(QPoint((width() - palette->width()) / 2, 60)));
  palette->show();
}

QString MainWindow::aboutText() const {
  QString s = tr("<h3>Tessera Studio</h3><p>The IDE of the Tessera compile/train engine.</p><table>");
  for (const auto& [name, version] : inspect::libraryVersions())
    s += QString("<tr><td>%1</td><td>%2</td></tr>").arg(QString::fromStdString(name), QString::fromStdString(version));
  s += QString("<tr><td>Qt</td><td>%1 (built with %2)</td></tr>").arg(qVersion(), QT_VERSION_STR);
  return s + "</table>";
}

void MainWindow::showAbout() { QMessageBox::about(this, tr("About Tessera Studio"), aboutText()); }

}  // namespace tsr::studio
