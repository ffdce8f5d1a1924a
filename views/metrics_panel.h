#pragma once
// The Metrics panel: metric series tailed live from runs.db (read-only polling; WAL lets the training process
// write meanwhile), several runs overlaid, smoothing over the full-resolution data, step or wall-time x axis,
// linear or log y (Qt Charts).
#include <map>
#include <optional>
#include <vector>

#include <QPointF>
#include <QWidget>

#include "engine/inspect/runs_reader.h"
#include "views/session.h"

class QChart;
class QChartView;
class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QTimer;

namespace tsr::studio {

class MetricsPanel : public QWidget {
  Q_OBJECT
 public:
  explicit MetricsPanel(Session* session, QWidget* parent = nullptr);

  void setDatabase(const QString& path);
  // Runs to overlay; empty: the latest three.
  void setRuns(const QList<qint64>& runs);
  void setMetric(const QString& key);
  void setSmoothing(double weight);  // [0, 0.99]
  void setWallTime(bool wallTime);
  void setLogY(bool logY);
  // Reads new points now (the panel also polls every second).
  void poll();

  QString metric() const;
  QList<qint64> shownRuns() const;
  // Full-resolution points held for a run and key, and the curve drawn for a run (smoothed).
  const std::vector<store::MetricPoint>& points(qint64 run, const QString& key) const;
  QList<QPointF> curve(qint64 run) const;
  QChartView* chartView() const { return m_view; }

 signals:
  void updated();

 protected:
  void changeEvent(QEvent* e) override;

 private:
  void render();

  Session* m_session;
  QComboBox* m_metric;
  QComboBox* m_xAxis;
  QCheckBox* m_logY;
  QSlider* m_smoothing;
  QLabel* m_smoothingLabel;
  QLabel* m_info;
  QChartView* m_view;
  QChart* m_chart;
  QTimer* m_timer;

  QString m_dbPath;
  std::optional<inspect::RunsReader> m_reader;
  QList<qint64> m_selected;
  std::map<qint64, store::RunInfo> m_runs;
  std::map<std::pair<qint64, std::string>, std::vector<store::MetricPoint>> m_points;
  std::map<qint64, QList<QPointF>> m_curves;
};

}  // namespace tsr::studio
