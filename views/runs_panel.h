#pragma once
// The Runs panel: every run in the project's runs.db with its status, tags, hyperparameters and latest/min/max
// of each metric, refreshed while runs write; sorted by any column (a metric by its latest value), filtered by a
// tag (a sweep's runs) with archived runs hidden unless asked for; selecting runs overlays them in the metrics
// panel, and Compare lists the selected runs side by side with the differences marked. Rename, Tags, Notes,
// Archive and Delete (with its checkpoints, after a confirmation) act on the selected run. The store is read on
// a thread of its own (views/runs_poller.h): the table only when something was written since the last read, and
// the two profiles Compare sets side by side when it is pressed. The edits are made on that thread too, one at a
// time: a training process that holds the store's lock keeps an edit waiting there, never the UI; the panel says
// which edit is under way, then why it failed or, once made, reads the table again. The table keeps its
// selection, scroll position and sort order across reads.
#include <functional>
#include <optional>
#include <vector>

#include <QAbstractTableModel>
#include <QWidget>

#include "engine/inspect/runs_reader.h"
#include "views/runs_poller.h"
#include "views/session.h"

class QCheckBox;
class QComboBox;
class QTableView;
class QTextBrowser;
class QTimer;
class QLabel;

namespace tsr::studio {

class RunsTableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit RunsTableModel(QObject* parent = nullptr);
  void setRuns(std::vector<inspect::RunRow> runs);
  const std::vector<inspect::RunRow>& runs() const { return m_runs; }
  QStringList metricKeys() const { return m_metricKeys; }
  // Which runs show: those with `tag` (empty: all), archived ones only when asked.
  void setFilter(const QString& tag, bool showArchived);
  // Every tag of every run (for the filter's list).
  QStringList allTags() const { return m_allTags; }
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  static constexpr int kFixed = 6;  // id, name, tags, status, started, duration
  void applySort();
  std::vector<inspect::RunRow> m_runs;
  QString m_tag;
  bool m_showArchived = false;
  QStringList m_allTags;
  int m_sortColumn = 0;
  Qt::SortOrder m_sortOrder = Qt::AscendingOrder;
  QStringList m_metricKeys;
  QStringList m_paramKeys;
};

class RunsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit RunsPanel(Session* session, QWidget* parent = nullptr);

  RunsTableModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  QList<qint64> selectedRuns() const;
  void selectRuns(const QList<qint64>& ids);
  // Asks for the store to be read (the panel also polls every two seconds) and returns at once: the read runs on
  // the poller's thread, and refreshed() follows once its answer is on screen. Asked while a read is under way,
  // one more read follows that one.
  void refresh();
  // How often the panel asks on its own (2 s; 0: only when refresh() is called).
  void setPollInterval(int msec);
  // A read asked for has not been answered yet.
  bool reading() const { return m_reads.busy(); }
  // The thread the store is read on.
  QThread* readerThread() const { return m_pollerThread.thread(); }
  // Lists the selected runs side by side at once; with two, their profiles follow from the reader thread
  // (compared() says when the comparison is complete).
  void compareSelected();
  bool comparing() const { return m_comparing; }
  QString comparisonText() const;
  void setDatabase(const QString& path);
  // Edits of the selected run (one), sent to the reader thread: true once sent, and edited() follows with the
  // answer. False, with the reason in lastError(), when not one run is selected or another edit is under way.
  bool renameSelected(const QString& name);
  bool setTagsOfSelected(const QStringList& tags);
  bool setNotesOfSelected(const QString& notes);
  bool archiveSelected(bool archived);
  // Reads what the deletion would remove (on the reader thread), asks (tests answer through setConfirm), then
  // deletes; a question answered no is an edit not made, with lastError() "kept".
  bool deleteSelected();
  // An edit was sent and is not answered yet (the context menu's edits are off meanwhile).
  bool editing() const { return m_editing; }
  // The panel's line about edits: the one under way, or why the last one failed; empty otherwise.
  QString editStatus() const;
  // Why the last edit was not made (empty: it was).
  QString lastError() const { return m_error; }
  void setConfirm(std::function<bool(const QString&)> confirm) { m_confirm = std::move(confirm); }
  QComboBox* tagFilter() const { return m_tagFilter; }
  QCheckBox* archivedBox() const { return m_showArchived; }

 signals:
  void selectedRunsChanged(const QList<qint64>& runs);
  // A read of the store is on screen; `changed` is false when nothing had been written since the last one
  // (the table was left as it was).
  void refreshed(bool changed);
  // The comparison asked last is on screen, profiles included.
  void compared();
  // The edit sent last is answered: made (the table is being read again), or not, the reason in lastError().
  // An edit sent before the store changed (setDatabase) is not answered.
  void edited(bool ok);

 private:
  Session* m_session;
  QLabel* m_info;
  QLabel* m_editLine;  // editStatus()
  QTableView* m_table;
  RunsTableModel* m_model;
  QTextBrowser* m_compare;
  QTimer* m_timer;
  QString m_dbPath;
  PollGate m_reads;      // a generation per setDatabase: answers for another store are dropped
  RunsPoller* m_poller;  // lives on m_pollerThread's thread
  PollerThread m_pollerThread;
  quint64 m_editRequest = 0;  // one per edit sent: the answer to an edit before setDatabase is dropped
  bool m_editing = false;
  quint64 m_compareRequest = 0;  // one per Compare: a profile diff for an older one is dropped
  bool m_comparing = false;
  QString m_compareHtml;  // the runs side by side, which the profiles' diff follows
  std::vector<inspect::RunRow> m_allRuns;  // the last read, before the filter
  QComboBox* m_tagFilter;
  QCheckBox* m_showArchived;
  QString m_error;
  std::function<bool(const QString&)> m_confirm;
  // The selected run when an edit may be sent (0, with the reason in m_error, when not).
  qint64 editableRun();
  bool sendEdit(RunEdit edit);
  void onEdited(const RunEditDonePtr& done);
  void confirmDeletion(const RunEdit& describe, const QString& what);
  void editFailed(const RunEdit& edit, const QString& error);
  void onRead(const RunsReadPtr& read);
  void onProfilesDiffed(const ProfileDiffReadPtr& diff);
  // Two runs' profiles by kernel and by graph node, for the comparison (a line saying why when there are none).
  static QString profileDiffHtml(qint64 runA, qint64 runB, const Result<train::ProfileDiff>& d);
  // Shows m_allRuns under the filter, keeping the selection, the current run and the scroll position.
  void showRuns();
  void showMenu(const QPoint& pos);
};

}  // namespace tsr::studio
