#pragma once
// The Sharding panel: the training step planned on a mesh, edited by drag and drop.
//   - the mesh editor (sizes, axis names, device order);
//   - a palette of PartitionSpecs built from the mesh axes, plus the user's own, dragged (kPartitionSpecMime)
//     onto an argument here, a parameter of the project tree, or an input of the graph;
//   - each drop or mesh change is an undoable command; the plan is re-propagated on a worker thread (a newer
//     edit discards the result of an older one) while the panel shows it is busy;
//   - the chosen tensor's blocks per device (ShardGridWidget); for the whole step the collectives added and
//     removed by the last edit, the bytes per device (parameters, gradients, optimizer state, batch,
//     activations) before and after, and the estimated communication time; every value with its sharding and
//     where it came from; conflicts between explicit shardings (also marked on the graph);
//   - Apply writes the rules and the mesh into project.toml (comments kept) and reopens the project.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <QFutureWatcher>
#include <QWidget>

#include "engine/inspect/sharding_view.h"
#include "views/session.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QListWidget;
class QMimeData;
class QProgressBar;
class QPushButton;
class QTabWidget;
class QTreeWidget;
class QUndoStack;

namespace tsr::studio {

class ShardGridWidget;
class ArgumentTree;

class ShardingPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ShardingPanel(Session* session, QWidget* parent = nullptr);
  ~ShardingPanel() override;

  // What the user edits: the mesh and the specs set on arguments (parameter path, or "inputs" / "targets").
  struct Edit {
    std::optional<sharding::Mesh> mesh;  // none: the project's
    std::map<std::string, std::string> overrides;
    std::map<int, std::string> constraints;  // by value of the planned step: withShardingConstraint there
    bool operator==(const Edit&) const = default;
  };

  // The palette's specs as dragged ("None, model"; "" is replicated), and what a drag of one carries.
  QStringList paletteSpecs() const;
  static QMimeData* specMimeData(const QString& spec);
  // A drop, as the project tree, the graph and this panel's argument list make it: the spec on an argument
  // ("params.layers.0.weight", "layers.0.weight" or "inputs"). An undoable command; false with a message in
  // the panel's status line and the console when the spec does not parse or the argument is unknown.
  bool dropSpec(const QString& argument, const QString& spec);
  // A drop on a value inside the step (an op's result in the graph): a sharding constraint there, as
  // withShardingConstraint in the model would make it. Not written by Apply (it belongs in the model's code).
  bool dropSpecOnValue(int value, const QString& spec);
  // The mesh editor's Set: an undoable command; false (with the reason in the panel) when the mesh is wrong.
  bool setMesh(const QString& shape, const QString& axes, const QString& devices = {});
  // Shows an argument's blocks on the grid; rowDim / colDim pick the dims laid out (-1: the first two split).
  void showArgument(const QString& path, int rowDim = -1, int colDim = -1);
  QString shownArgument() const { return m_shown; }
  // Writes the rules and the mesh into project.toml and reopens the project; false with the reason.
  bool apply(QString* error = nullptr);

  bool planning() const;
  const inspect::StepShardingPlan* plan() const { return m_plan.get(); }
  // The last edit's effect: the plan before it against the plan now (null until a second plan).
  const inspect::PlanDiff* diff() const { return m_diff ? &*m_diff : nullptr; }
  const std::vector<inspect::ShardingConflict>& conflicts() const { return m_conflicts; }
  QString planError() const { return m_error; }
  const Edit& edit() const { return m_edit; }
  QUndoStack* undoStack() const { return m_undo; }
  ShardGridWidget* grid() const { return m_grid; }
  // The rows of the collectives list: "+ all_reduce over 'model' 8.0 MiB ..." (added), "− ..." (removed),
  // "  ..." (kept).
  QStringList collectiveRows() const;

  // The undo commands' way in: sets the edit and re-plans.
  void setEdit(const Edit& edit);

 signals:
  void planReady();

 private:
  struct Outcome;
  using OutcomePtr = std::shared_ptr<Outcome>;

  void onProjectOpened();
  void onStagesReady();
  void requestPlan();
  void startPlan();
  void onPlanDone();
  void showPlan();
  void fillPalette();
  void fillMeshEditor();
  void fillArguments();
  void fillValues();
  void fillSummary();
  sharding::Mesh currentMesh() const;
  // The step's argument named "params.x.y" (or "x.y", as the project tree names a parameter), "opt.1.mu.x.y" or
  // "inputs"; null if the step has none.
  const inspect::ArgumentPath* findArgument(const QString& name) const;
  void refuseDrop(const QString& why);

  Session* m_session;
  QLineEdit* m_meshShape;
  QLineEdit* m_meshAxes;
  QLineEdit* m_meshDevices;
  QLabel* m_meshInfo;
  QListWidget* m_palette;
  QLineEdit* m_custom;
  QPushButton* m_applyButton;
  QProgressBar* m_busy;
  QLabel* m_status;
  QTabWidget* m_tabs;
  ArgumentTree* m_arguments;
  QTreeWidget* m_values;
  ShardGridWidget* m_grid;
  QComboBox* m_rowDim;
  QComboBox* m_colDim;
  QLabel* m_summary;
  QTreeWidget* m_collectives;
  QUndoStack* m_undo;

  std::shared_ptr<const inspect::PlannableStep> m_step;
  Edit m_edit;
  int m_generation = 0;   // bumped by every edit; a result for an older one is dropped
  bool m_running = false; // from startPlan until its result is handled (the watcher ends before that)
  bool m_pending = false; // an edit arrived while a plan was running
  QFutureWatcher<OutcomePtr>* m_watcher;
  std::shared_ptr<const inspect::StepShardingPlan> m_plan, m_before;
  std::optional<inspect::PlanDiff> m_diff;
  std::vector<inspect::ShardingConflict> m_conflicts;
  QString m_error;
  QString m_shown;
};

}  // namespace tsr::studio
