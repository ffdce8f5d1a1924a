#pragma once
// The Timeline panel: a profile's kernels per device and stream on one time axis (the ImGui canvas of
// timeline_canvas.h), the statistics of a selected time range per kernel (count, total, mean, share), and the
// link to the graph: clicking a kernel selects its nodes in the graph and IR panels, and a node selected there
// marks its kernel's launches here. Opens the run store's profiles (the project's latest when it opens, and
// each new one after Profile ▶) and Chrome/Perfetto trace JSON files, loaded off the UI thread. A profile opens
// fitted, with the statistics of its first step.
// A profile that no longer shows the project as it is (project.toml edited since, or the step compiled to other
// kernels) is stale: a banner says why and offers to profile again (Run ▶ Profile).
// A profile of more than inspect::kWholeProfileLaunches launches is read a window at a time (ProfileWindows):
// the canvas asks for the window it shows, the query runs on a worker thread, and the canvas draws the last
// answer until the next arrives; range statistics are summed by SQLite on a worker too.
// Compare… puts another run's profile beside the one shown (inspect::compareProfiles): one step of each, A's
// rows above B's, launches coloured by how their kernel's time changed, and the table lists the kernels A vs B
// (paired through the graph nodes they ran) by change.
// Without OpenGL (the offscreen platform) the panel still loads, links and computes; it shows why there is no
// canvas instead of one.
#include <array>
#include <functional>
#include <memory>
#include <optional>

#include <QFutureWatcher>
#include <QWidget>

#include "engine/inspect/timeline.h"
#include "engine/inspect/timeline_compare.h"
#include "engine/inspect/timeline_window.h"
#include "views/session.h"

class QComboBox;
class QFrame;
class QLabel;
class QPushButton;
class QTableWidget;

namespace tsr::studio {

class TimelineCanvas;

using TimelinePtr = std::shared_ptr<const inspect::Timeline>;

class TimelinePanel : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePanel(Session* session, QWidget* parent = nullptr);
  ~TimelinePanel() override;

  // A profile of the store at dbPath (0: the latest); loaded() or failed() follows (quiet: a failure is not
  // logged to the console).
  void openProfile(const QString& dbPath, qint64 profileId = 0, bool quiet = false);
  // A Chrome/Perfetto trace JSON file; loaded() or failed() follows.
  void openTrace(const QString& path);
  // Shows a timeline built elsewhere (tests, the frame-time benchmark).
  void setTimeline(TimelinePtr timeline);
  bool loading() const;
  // The profile shown a window at a time (nullptr: held whole), and its window shown now.
  const inspect::ProfileWindows* windows() const { return m_windows.get(); }
  const inspect::TimelineWindow* windowData() const { return m_window.get(); }
  // As the canvas asks when the view moves: the window [fromNs, toNs] at nsPerPx, fetched off the UI thread.
  void requestWindow(double fromNs, double toNs, double nsPerPx);
  // Whether a window query or range statistics are being computed.
  bool fetching() const;
  // Profiles with more launches than this are read a window at a time (inspect::kWholeProfileLaunches).
  void setWholeProfileLimit(qint64 launches) { m_wholeLimit = launches; }

  TimelinePtr timeline() const { return m_timeline; }
  // The canvas, or nullptr without OpenGL; canvasError() says why.
  TimelineCanvas* canvas() const { return m_canvas; }
  QString canvasError() const { return m_canvasError; }
  // Whether the timeline's kernels name the nodes of the session's fusion stage (so clicks select there).
  bool linked() const { return m_linked; }
  QString linkError() const { return m_linkError; }
  // Why the profile shown is stale ("" when it is not, or when there is nothing to compare it with yet).
  QString staleReason() const { return m_stale; }
  // While a run or profile is going, the banner's Re-profile waits for it (as Run ▶ Profile does).
  void setRunning(bool running);

  // As a click on event `e` would: selects it, and its kernel's nodes in the session when linked.
  void selectEvent(qint64 event);
  // Shows the collective call with the longest wait: its span in view, the member that waited longest selected.
  void focusWorstCollective();
  // Statistics of [fromNs, toNs) (from == to: none), as a range selected with the mouse.
  void setRange(qint64 fromNs, qint64 toNs);
  const std::optional<inspect::RangeStats>& rangeStats() const { return m_stats; }
  QTableWidget* statsTable() const { return m_table; }
  // "kind", "family" or (comparing two profiles) "change".
  void setColourBy(const QString& mode);
  // Run A's latest profile against run B's, of the store at dbPath; loaded() or failed() follows.
  void compareRuns(const QString& dbPath, qint64 runA, qint64 runB);
  // The comparison shown, or nullptr.
  const train::ProfileDiff* comparison() const { return m_diff ? &*m_diff : nullptr; }
  // The runs with profiles that Compare… offers against the profile shown: (run, label).
  std::vector<std::pair<qint64, QString>> compareCandidates() const;

 signals:
  void loaded();
  void failed(const QString& message);
  // The banner's Re-profile: profile the project again.
  void reprofileRequested();

 private:
  using LoadResult = std::shared_ptr<Result<inspect::OpenedProfile>>;
  using WindowResult = std::shared_ptr<Result<inspect::TimelineWindow>>;
  using StatsResult = std::shared_ptr<Result<inspect::RangeStats>>;
  void startLoad(std::function<Result<inspect::OpenedProfile>()> load, const QString& what, bool quiet);
  void showProfile(TimelinePtr timeline, std::shared_ptr<inspect::ProfileWindows> windows,
            std::shared_ptr<const inspect::TimelineWindow> first);
  void onWindow();
  void startWindow(double fromNs, double toNs, double nsPerPx);
  void onEventClicked(qint64 event);
  void onNodeSelected(int node);
  void relink();
  void showStats();
  void updateInfo();
  void updateStale();
  void showDiff();
  void setStatsHeaders(bool diff);

  Session* m_session;
  TimelineCanvas* m_canvas = nullptr;
  QString m_canvasError;
  QFrame* m_staleBanner;
  QLabel* m_staleText;
  QPushButton* m_reprofile;
  QString m_stale;
  QLabel* m_source;
  QLabel* m_info;
  QComboBox* m_colour;
  QPushButton* m_compare;
  QLabel* m_rangeInfo;
  QTableWidget* m_table;
  QFutureWatcher<LoadResult>* m_watcher;
  QFutureWatcher<WindowResult>* m_windowWatcher;
  QFutureWatcher<StatsResult>* m_statsWatcher;
  std::shared_ptr<inspect::ProfileWindows> m_windows;
  std::shared_ptr<const inspect::TimelineWindow> m_window;
  std::optional<std::array<double, 3>> m_pendingWindow;  // asked for while a query ran: from, to, nsPerPx
  std::optional<std::pair<int64_t, int64_t>> m_pendingStats;
  const inspect::ProfileWindows* m_statsOf = nullptr;  // the profile the statistics in flight are of
  // The selected launch, to find it again in the next window: row, start, duration.
  std::optional<std::array<int64_t, 3>> m_selectedKey;
  bool m_quiet = false;
  qint64 m_wholeLimit = inspect::kWholeProfileLaunches;

  TimelinePtr m_timeline;
  const void* m_linkedGraph = nullptr;
  bool m_linked = false;
  QString m_linkError;
  qint64 m_selected = -1;
  std::optional<inspect::RangeStats> m_stats;
  // A comparison: the diff of the load in flight (set by its worker), and of the timeline shown.
  std::shared_ptr<std::optional<train::ProfileDiff>> m_loadingDiff;
  std::optional<train::ProfileDiff> m_diff;
  QString m_dbPath;     // the store of the profile shown ("" for a trace file)
  qint64 m_runA = 0;    // the run of the profile shown (A of a comparison)
};

}  // namespace tsr::studio
