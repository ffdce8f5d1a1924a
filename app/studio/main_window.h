#pragma once
// The Tessera Studio window: the graph in the middle, the other panels in docks whose layout is saved and
// restored, menus and shortcuts for every action, the command palette, recent projects, light and dark
// themes, projects opened from the menu, the command line or a folder dropped on the window.
#include <functional>
#include <optional>
#include <vector>

#include <QMainWindow>
#include <QMap>
#include <QSet>

#include "engine/inspect/plugins.h"
#include "engine/inspect/run_configuration.h"

class QAction;
class QComboBox;
class QDockWidget;
class QLabel;
class QMenu;
class QProgressBar;

namespace tsr::studio {

class Session;
class GraphPanel;
class IrPanel;
class InspectorPanel;
class ProjectPanel;
class MetricsPanel;
class RunsPanel;
class ConsolePanel;
class RunController;
class TimelinePanel;
class ShardingPanel;
class MemoryPanel;
class RooflinePanel;
class SourcePanel;
class PluginPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void openProject(const QString& path);
  void newProjectFromTemplate(const QString& templateDir, const QString& targetDir);
  void setTheme(const QString& name);  // "light" | "dark"
  QString theme() const { return m_theme; }

  Session* session() const { return m_session; }
  GraphPanel* graphPanel() const { return m_graph; }
  IrPanel* irPanel() const { return m_ir; }
  InspectorPanel* inspectorPanel() const { return m_inspector; }
  ProjectPanel* projectPanel() const { return m_project; }
  MetricsPanel* metricsPanel() const { return m_metrics; }
  RunsPanel* runsPanel() const { return m_runs; }
  ConsolePanel* consolePanel() const { return m_console; }
  TimelinePanel* timelinePanel() const { return m_timeline; }
  ShardingPanel* shardingPanel() const { return m_sharding; }
  MemoryPanel* memoryPanel() const { return m_memory; }
  RooflinePanel* rooflinePanel() const { return m_roofline; }
  SourcePanel* sourcePanel() const { return m_source; }
  RunController* runController() const { return m_runner; }

  // Every action, with the menu it lives in as its "menuPath" property (the command palette lists these).
  QList<QAction*> allActions() const;
  QAction* action(const QString& objectName) const;
  // Panel name ("graph", "ir", ...) -> the widget; for --screenshot.
  QMap<QString, QWidget*> panels() const;
  QStringList recentProjects() const;

  // Run ▶ Train, Resume, Profile and Eval launch the selected run configuration (engine/inspect/
  // run_configuration.h). Resume and Eval take the run selected in the Runs panel, else the latest one.
  void startRun();
  void startResume();
  // Profile ▶: `tessera profile PROJECT --steps 3`; the time overlay and the timeline show the new profile when
  // it is done.
  void startProfile();
  void startEval();
  // Run › Edit Configurations…; the list is saved in <project>/.tessera/run_configurations.json.
  void editConfigurations();
  const std::vector<inspect::RunConfiguration>& runConfigurations() const { return m_configs; }
  QComboBox* configurationBox() const { return m_configBox; }
  void stopRun();
  void showCommandPalette();
  // File › Preferences…: the IDE's own settings (views/preferences_dialog.h), applied when it is accepted.
  void showPreferences();
  // How long the IDE and the runs it starts wait for a run store another process holds locked, in seconds: the
  // preference saved in QSettings, applied as the window opens; none: TESSERA_STORE_LOCK_WAIT's, else 30. Setting
  // it saves it and applies it at once, to the IDE's own stores (engine/store/lock_wait.h) and, as --lock-wait,
  // to the runs started from then on.
  std::optional<double> storeLockWait() const;
  void setStoreLockWait(std::optional<double> seconds);
  void showAbout();
  QString aboutText() const;
  // Help › Plugins: every plugin tried, what it registers or why it was skipped, and the passes' reports.
  void showPlugins();
  // Asked before the native plugins of a project that is not trusted (or whose plugins changed since) load:
  // true loads them and remembers the trust (plugin::rememberTrust); false keeps them out, and the project is
  // not asked about again while the IDE runs. By default a question box; tests answer it themselves.
  using PluginTrustPrompt = std::function<bool(const plugin::TrustRequest&)>;
  void setPluginTrustPrompt(PluginTrustPrompt prompt) { m_trustPrompt = std::move(prompt); }

 protected:
  void closeEvent(QCloseEvent* e) override;
  void dragEnterEvent(QDragEnterEvent* e) override;
  void dropEvent(QDropEvent* e) override;

 private:
  void createPanels();
  void createActions();
  QDockWidget* addPanel(const QString& name, const QString& title, QWidget* w, Qt::DockWidgetArea area);
  void addRecent(const QString& path);
  void rebuildRecentMenu();
  void restoreLayout();
  void saveLayout();
  void applyStoreLockWait(std::optional<double> seconds);
  void onOpenAction();
  void onNewAction();
  void onNewProjectAction();
  void onOpenTraceAction();
  // Loads the plugins of the search order (with PROJECT/plugins when a project is given), logs the skipped
  // ones, and puts each new plugin panel in a dock.
  void loadPlugins(const QString& projectDir);
  void loadConfigurations();
  void launch(inspect::RunAction action);
  // Run ▶ Train, Resume, Profile and Eval are on only while a project is open and nothing runs; their
  // tooltips say why not.
  void updateRunActions();

  Session* m_session;
  GraphPanel* m_graph;
  IrPanel* m_ir;
  InspectorPanel* m_inspector;
  ProjectPanel* m_project;
  MetricsPanel* m_metrics;
  RunsPanel* m_runs;
  ConsolePanel* m_console;
  TimelinePanel* m_timeline;
  ShardingPanel* m_sharding;
  MemoryPanel* m_memory;
  RooflinePanel* m_roofline;
  SourcePanel* m_source;
  RunController* m_runner;
  QMap<QString, QDockWidget*> m_docks;
  QMenu* m_recentMenu = nullptr;
  QMenu* m_viewMenu = nullptr;
  QAction* m_runAction = nullptr;
  QAction* m_stopAction = nullptr;
  QAction* m_profileAction = nullptr;
  QAction* m_resumeAction = nullptr;
  QAction* m_evalAction = nullptr;
  QComboBox* m_configBox = nullptr;
  std::vector<inspect::RunConfiguration> m_configs;
  QProgressBar* m_runProgress;
  QLabel* m_runLabel;
  QString m_theme = "light";
  QByteArray m_defaultState;
  QMap<QString, PluginPanel*> m_pluginPanels;  // by panel name; widgets owned by their docks
  PluginTrustPrompt m_trustPrompt;
  QSet<QString> m_untrustedProjects;  // answered No in this session
};

}  // namespace tsr::studio
