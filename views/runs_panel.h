#pragma once
// The Runs panel: every run in the project's runs.db with its status, hyperparameters and latest/min/max of
// each metric, refreshed while runs write; selecting runs overlays them in the metrics panel, and Compare
// lists the selected runs side by side with the differences marked.
#include <optional>
#include <vector>

#include <QAbstractTableModel>
#include <QWidget>

#include "engine/inspect/runs_reader.h"
#include "views/session.h"

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

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  static constexpr int kFixed = 5;  // id, name, status, started, duration
  std::vector<inspect::RunRow> m_runs;
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
  // Reads the store now (the panel also polls every two seconds).
  void refresh();
  void compareSelected();
  QString comparisonText() const;
  void setDatabase(const QString& path);

 signals:
  void selectedRunsChanged(const QList<qint64>& runs);

 private:
  Session* m_session;
  QLabel* m_info;
  QTableView* m_table;
  RunsTableModel* m_model;
  QTextBrowser* m_compare;
  QTimer* m_timer;
  QString m_dbPath;
  std::optional<inspect::RunsReader> m_reader;
};

}  // namespace tsr::studio
