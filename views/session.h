#pragma once
// The state the panels share: the open project (an immutable snapshot), the graph at every pipeline stage,
// the stage on screen and the selected node. Opening and compiling run on worker threads; the session tells
// the panels through signals, on the UI thread.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <QFutureWatcher>
#include <QObject>
#include <QString>

#include "engine/inspect/graph_stages.h"
#include "engine/inspect/profile_times.h"
#include "engine/inspect/project_snapshot.h"
#include "engine/inspect/sharding_view.h"

namespace tsr::studio {

using ProjectPtr = std::shared_ptr<const inspect::ProjectSnapshot>;
using StagesPtr = std::shared_ptr<const std::vector<inspect::Stage>>;
using ProfilePtr = std::shared_ptr<const inspect::ProfileTimes>;
using ShardingPtr = std::shared_ptr<const inspect::ShardingSnapshot>;
struct ProfileRead;

// The drag-and-drop type of a PartitionSpec ("None, model"), from the sharding panel's palette.
inline constexpr char kPartitionSpecMime[] = "application/x-tessera-partition-spec";

class Session : public QObject {
  Q_OBJECT
 public:
  explicit Session(QObject* parent = nullptr);
  ~Session() override;

  // Loads and traces the project off the UI thread; projectOpened or projectFailed follows. Opening the open
  // project again (its model file changed) keeps the selected node, once compiled, where a node of the same op
  // at the same source line still exists (also across a failed open of it in between). Asked while an open is
  // running, it opens once that one is done. A project that fails to open replaces the one that was open: the
  // session then holds none (projectClosed, then projectFailed), so nothing of the last project stays on screen
  // as if it were the new one, and nothing runs until a project opens.
  void openProject(const QString& path);
  // An open, a compile or a profile read is under way.
  bool busy() const;
  // An open is under way (from projectOpening to projectOpened or projectFailed).
  bool opening() const;

  ProjectPtr project() const { return m_project; }
  // The project.toml of the last project that failed to open, where its error points (empty once one opens).
  QString failedProjectFile() const { return m_failedFile; }
  // The folder of the last project that failed to open (empty once one opens).
  QString failedProjectDir() const { return m_failedDir; }
  StagesPtr stages() const { return m_stages; }
  QString projectDir() const;
  QString projectFile() const;
  QString runsDbPath() const;

  int currentStage() const { return m_stage; }
  const inspect::Stage* stage() const;
  void setCurrentStage(int index);

  int selectedNode() const { return m_node; }
  // Selects node `node` of the current stage (-1: none) and tells every panel.
  void selectNode(int node);
  // A kernel picked in the timeline: shows the fusion stage (whose node ids a profile names) and selects the
  // kernel's first node; the panels mark all of `nodes` (selectedKernelNodes) until another selection.
  void selectKernelNodes(const std::vector<int>& nodes);
  const std::vector<int>& selectedKernelNodes() const { return m_kernelNodes; }
  // Two nodes of the current stage compared (Ctrl+click a second node in the graph): are they fused, and if
  // not, why. Any other selection ends it.
  void selectPair(int a, int b);
  std::pair<int, int> selectedPair() const { return m_pair; }

  // The project's latest profile mapped onto the fusion stage (whose graph the profiled executable ran), or
  // why there is none ("no profile yet", "profile 3 is for another graph: ..."). Read again after each
  // compile and on reloadProfile() (after a profile run), on a worker thread: profileChanged follows, and
  // meanwhile there is none ("reading the profile") and busy() holds.
  ProfilePtr profile() const { return m_profile; }
  QString profileError() const { return m_profileError; }
  // The stage the profile's node ids refer to (the fusion stage); -1 before the compile is done.
  int profileStage() const;
  // Whether the profile's node ids name this stage's nodes: the fusion stage, and the stages with its graph.
  bool profileMapsTo(const inspect::Stage& stage) const;
  // The indices of those stages (none before the compile).
  std::vector<int> profileStages() const;
  void reloadProfile();

  // Sharding: a PartitionSpec dropped on an argument of the step ("params.layers.0.weight", "inputs") in any
  // panel; the sharding panel re-plans and publishes the plan it shows (null before the first).
  void dropSpec(const QString& argumentPath, const QString& spec) { emit specDropped(argumentPath, spec); }
  // ... or on a value of the compile's last stage (the graph the sharding panel plans): a sharding constraint.
  void dropSpecOnValue(int value, const QString& spec) { emit specDroppedOnValue(value, spec); }
  ShardingPtr sharding() const { return m_sharding; }
  void setSharding(ShardingPtr sharding) {
    m_sharding = std::move(sharding);
    emit shardingChanged();
  }

  // A line for the console: level is "info", "warning" or "error".
  void log(const QString& level, const QString& text);

 signals:
  void projectOpening(const QString& path);
  void projectOpened();
  void projectFailed(const QString& message);
  // The session no longer holds a project (the one asked for failed to open): panels drop what they show of
  // the last one. Sent before projectFailed.
  void projectClosed();
  void stagesReady();
  void stageChanged(int index);
  void nodeSelected(int node);
  void pairSelected(int a, int b);
  void message(const QString& level, const QString& text);
  void profileChanged();
  void specDropped(const QString& argumentPath, const QString& spec);
  void specDroppedOnValue(int value, const QString& spec);
  void shardingChanged();

 private:
  void compile();
  void restoreSelection();
  void closeFailedProject(const QString& message);
  // Forgets a profile read under way: its answer is for a project or graph that has gone.
  void dropProfileRead();

  // The selection to find again after re-opening: the stage's name and the node's op, provenance and
  // how many nodes with both come before it.
  struct KeptSelection {
    QString dir;  // the project's folder
    std::string stage;
    ir::OpCode op{};
    ir::Provenance prov;
    int ordinal = 0;
  };

  ProjectPtr m_project;
  ProjectPtr m_compiling;  // the project the running compile is for
  StagesPtr m_stages;
  int m_stage = 0;
  int m_node = -1;
  std::vector<int> m_kernelNodes;
  std::pair<int, int> m_pair{-1, -1};
  QString m_opening;     // the path openProject was given
  QString m_pendingOpen;  // asked while an open was running
  bool m_openRunning = false;  // from projectOpening until the open's result is handled
  std::optional<KeptSelection> m_keep;
  QString m_failedFile;
  QString m_failedDir;
  ProfilePtr m_profile;
  QString m_profileError;
  quint64 m_profileRequest = 0;  // one per profile read asked: the answer to an older one is dropped
  bool m_profileReading = false;
  ShardingPtr m_sharding;
  QFutureWatcher<std::shared_ptr<Result<inspect::ProjectSnapshot>>>* m_openWatcher;
  QFutureWatcher<std::shared_ptr<Result<std::vector<inspect::Stage>>>>* m_compileWatcher;
  QFutureWatcher<std::shared_ptr<ProfileRead>>* m_profileWatcher;
};

}  // namespace tsr::studio
