#pragma once
// The Graph panel: the training step at any pipeline stage, nodes grouped by module path and collapsible,
// and at the fusion stage each multi-node kernel drawn as a cluster around its nodes inside its module group
// (views read through, with no kernel of their own, dashed);
// laid out by Graphviz on a worker thread (progress and cancel), drawn with QGraphicsView. Regex search over
// op, value name, shape and module path, stepped through match by match (views/graph_search.h); overlays as
// colour scales: flops and bytes from the ops' cost rules, and measured time from the project's latest profile
// (at the stages whose graph the profile ran: the fusion stage and those with its graph); the selection follows
// the session both ways. Everything drawn over the boxes belongs to the stage they were laid out for: while
// another stage is being laid out, the boxes on screen carry no overlay, match or comparison colours.
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include <QElapsedTimer>
#include <QFutureWatcher>
#include <QHash>
#include <QMap>
#include <QWidget>

#include "engine/inspect/graph_layout.h"
#include "engine/inspect/stage_diff.h"
#include "views/session.h"

class QComboBox;
class QGraphicsScene;
class QGraphicsView;
class QLabel;
class QProgressBar;
class QPushButton;
class QSplitter;

namespace tsr::studio {

class GraphBoxItem;
class GraphSearch;

class GraphPanel : public QWidget {
  Q_OBJECT
 public:
  // A secondary panel shows a stage of its own choosing (the left side of a comparison) and leaves the
  // session's stage and selection alone.
  explicit GraphPanel(Session* session, QWidget* parent = nullptr, bool secondary = false);
  ~GraphPanel() override;

  // What is on screen, for the shell and the tests.
  QStringList visibleGroups() const;   // module paths of the group boxes shown (collapsed or expanded)
  QStringList expandedGroups() const;
  int visibleNodeCount() const;        // op boxes shown
  QStringList visibleClusters() const; // kernel clusters shown, "fusion.12 (loop)" (at the fusion stage)
  QVector<int> selectedNodes() const;  // node ids of the op boxes selected, ascending
  // Selects the boxes of these nodes (those on screen), as clicks and Ctrl+clicks do: one node selects it, two
  // compare them (Session::selectPair). Returns how many boxes were found.
  int selectNodeBoxes(const QVector<int>& nodes);
  bool layoutRunning() const;
  QStringList lastLaidOut() const;     // group levels the last layout computed (the rest came from the cache)
  // The status line: what is on screen and how the last layout got it ("12 boxes, 31 edges; all 3 levels from
  // the layout cache; 0.01 s"), or why there is none.
  QString statusText() const;
  static QString layoutSummary(const inspect::ViewLayout& layout, double seconds);
  double lastLayoutSeconds() const { return m_layoutSeconds; }
  QVector<int> searchHits() const { return m_hits; }
  QString searchError() const { return m_searchError; }
  // "3 of 17" (the match shown), "17 matches" (none shown yet), "no match", "invalid regex"; "" with no pattern.
  QString searchStatus() const;
  GraphSearch* searchBar() const { return m_search; }

  // Side by side: the stage shown on the left (-1: no comparison); nodes are coloured added / removed / changed.
  void setCompareStage(int index);
  int compareStage() const;
  GraphPanel* comparePanel() const { return m_other; }
  const inspect::StageDiff* diff() const { return m_diffResult ? &*m_diffResult : nullptr; }
  const inspect::Stage* currentStage() const;

  void setExpanded(const QString& path, bool expanded);
  void expandAll(bool expanded);
  void search(const QString& pattern);
  // The next / previous match of the search (wrapping around): selected, its group opened, the view centred on it.
  void findNext();
  void findPrevious();
  void focusSearch();
  void fitToView();
  // The overlay: "none", "flops", "bytes" or "time"; its legend names the scale (or why there is none).
  void setOverlay(const QString& name);
  QString overlay() const;
  QString overlayLegend() const;
  // The overlay's value of each box it colours, by box key ("n:42", "g:h.0"); empty when it colours none.
  QMap<QString, double> overlayValues() const { return m_overlayValues; }
  // Sharding: a PartitionSpec dropped on graph input `inputIndex` (as a drag onto its box does), and the nodes
  // marked as conflicts of the sharding panel's plan.
  void dropSpecOnInput(int inputIndex, const QString& spec);
  // ... and on an op's box (false when it is not on screen or takes no drop at this stage).
  bool dropSpecOnNode(int node, const QString& spec);
  QVector<int> conflictNodes() const;
  // Shows the scene at this scale (1: a point per pixel), centred on the selected box if there is one.
  void setZoom(double scale);

 signals:
  void layoutFinished();
  void pinnedStageChanged(int index);
  void searchFinished(int hits);

 private:
  struct StageState {
    std::shared_ptr<const inspect::ModuleTree> tree;
    std::shared_ptr<inspect::LayoutCache> cache;
    std::shared_ptr<const std::vector<ir::Cost>> costs;
  };
  using LayoutResult = std::shared_ptr<Result<inspect::ViewLayout>>;

  void onStagesReady();
  void onStageChanged();
  // The session holds no project (the one asked for did not open): nothing of the last one stays.
  void onProjectClosed();
  StageState& stateFor(const inspect::Stage& stage);
  void startLayout();
  void onLayoutDone();
  void buildScene();
  void applyDecorations();
  void updateLegend(double maxLog);
  void applySharding();
  QString inputPath(ir::ValueId v) const;
  void onNodeSelected(int node);
  void onSceneSelection();
  void setPinnedStage(int index);
  void setDiff(std::vector<inspect::DiffStatus> statuses);
  void updateDiff();
  // Whether the boxes on screen were laid out for the stage shown (false while another stage is laid out).
  bool sceneIsCurrent() const;
  void clearDecorations();
  void showMatch(int node);

  Session* m_session;
  bool m_secondary;
  int m_pinned = 0;
  GraphPanel* m_other = nullptr;
  QComboBox* m_compareBox = nullptr;
  QLabel* m_diffInfo = nullptr;
  std::vector<inspect::DiffStatus> m_diff;
  std::optional<inspect::StageDiff> m_diffResult;
  QComboBox* m_stageBox;
  GraphSearch* m_search;
  QComboBox* m_overlay;
  QLabel* m_legend = nullptr;
  QProgressBar* m_progress;
  QPushButton* m_cancel;
  QLabel* m_status;
  QGraphicsView* m_view;
  QGraphicsScene* m_scene;
  QSplitter* m_column;  // the graph (or the two of a comparison) over the list of matches

  StagesPtr m_stages;  // keeps the graphs alive while a layout runs
  std::map<const ir::Graph*, StageState> m_states;
  std::set<std::string> m_expanded;
  std::shared_ptr<std::atomic<bool>> m_cancelFlag;
  QFutureWatcher<LayoutResult>* m_watcher;
  bool m_relayout = false;
  bool m_busy = false;  // from startLayout until its result is on screen
  QElapsedTimer m_clock;
  double m_layoutSeconds = 0;
  // The layout on screen and the graph (and module tree) it was made for; the graph a running layout is for.
  std::optional<inspect::ViewLayout> m_layout;
  std::shared_ptr<const ir::Graph> m_layoutGraph;
  std::shared_ptr<const inspect::ModuleTree> m_layoutTree;
  std::shared_ptr<const ir::Graph> m_pendingGraph;
  std::shared_ptr<const inspect::ModuleTree> m_pendingTree;
  QHash<QString, GraphBoxItem*> m_items;
  QMap<QString, double> m_overlayValues;
  QVector<int> m_hits;
  QString m_searchError;
  int m_localNode = -1;  // a secondary panel's own selection (a search match), not the session's
  bool m_syncing = false;
};

}  // namespace tsr::studio
