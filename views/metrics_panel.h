#pragma once
// The Metrics panel: metric series tailed live from runs.db (read-only polling; WAL lets the training process
// write meanwhile), several runs and several metrics in one chart, smoothing over the full-resolution data, x by
// step, wall time or tokens, linear or log y (Qt Charts).
//
// Dense metrics (a point every step: millions per series) are held at full resolution as columns
// (inspect::MetricColumns) and drawn by level of detail: on every resize, zoom and new data each curve is reduced
// to the minimum and maximum of each pixel column of the plot (inspect::minMaxPerColumn), so a series gives Qt
// at most 2 points per pixel column and a one-step spike is drawn at every zoom. Smoothing runs over the full
// data first. Drawing is raster: Qt Charts' OpenGL series are drawn on a separate GL widget, which the offscreen
// platform lacks and which rendering the chart into an image leaves out, and a few thousand points per series
// draw in a few milliseconds without it (tests/bench/bench_metrics).
//
// Zoom: drag across the chart (x only), the wheel around the cursor; right-click zooms out, double-click shows
// everything. The reduction follows the visible x range and the y axis fits what is visible.
//
// The store is read on a thread of its own (views/metrics_poller.h): a poll asks for what is new and returns at
// once, and the answer is drawn when it arrives. A poll when nothing was committed since the last read asks no
// metric; a run read after it ended is not read again.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <QPointF>
#include <QWidget>

#include "engine/inspect/metric_lod.h"
#include "engine/inspect/runs_reader.h"
#include "views/metrics_poller.h"
#include "views/session.h"

class QAbstractAxis;
class QChart;
class QChartView;
class QCheckBox;
class QComboBox;
class QLabel;
class QLineSeries;
class QListWidget;
class QListWidgetItem;
class QSlider;
class QTimer;
class QValueAxis;

namespace tsr::studio {

class MetricsPanel : public QWidget {
  Q_OBJECT
 public:
  enum class XAxis { Step, WallTime, Tokens };

  explicit MetricsPanel(Session* session, QWidget* parent = nullptr);

  void setDatabase(const QString& path);
  // Runs to overlay; empty: the latest three.
  void setRuns(const QList<qint64>& runs);
  // The metrics drawn (checked in the list; keys not seen yet are added to it).
  void setMetrics(const QStringList& keys);
  void setSmoothing(double weight);  // [0, 0.99]
  // Tokens: step * train.batch_size * train.seq_len (* train.accumulate) of each run; when a run has no such
  // figure (not a language model) the axis falls back to steps and its title says why.
  void setXAxis(XAxis x);
  void setLogY(bool logY);
  // The visible x range, in the x axis' unit (what dragging and the wheel set); resetZoom shows every point.
  void setXRange(double x0, double x1);
  void resetZoom();
  // Asks for new points now (the panel also polls every second) and returns at once: the read runs on the
  // reader thread, and updated() follows once its answer is drawn. Asked while a read is under way, one more
  // read follows that one.
  void poll();
  // A read asked for has not been answered yet.
  bool reading() const { return m_reads.busy(); }
  // The thread the store is read on.
  QThread* readerThread() const { return m_pollerThread.thread(); }

  QStringList metrics() const;
  QList<qint64> shownRuns() const;
  XAxis xAxis() const { return m_xMode; }
  QString xAxisTitle() const;
  std::pair<double, double> xRange() const;
  // Full-resolution points held for a run and key.
  const inspect::MetricColumns& points(qint64 run, const QString& key) const;
  // What the chart draws for a run's metric after the level-of-detail reduction: the curve (smoothed when
  // smoothing is on) and the faint raw values under it (empty when smoothing is off).
  QList<QPointF> curve(qint64 run, const QString& key) const;
  QList<QPointF> rawCurve(qint64 run, const QString& key) const;
  // Pixel columns the last reduction was for (the plot area's width in device pixels).
  int plotColumns() const { return m_columns; }
  QChartView* chartView() const { return m_view; }

 signals:
  void updated();
  // A read of the store is taken in; `changed` is false when nothing had been committed since the last one (no
  // metric was read).
  void polled(bool changed);

 protected:
  void showEvent(QShowEvent* e) override;
  void changeEvent(QEvent* e) override;
  bool eventFilter(QObject* watched, QEvent* e) override;

 private:
  // One metric of one run as drawn: its x at full resolution in the axis' unit (non-decreasing), the smoothed
  // values, and the chart's series for them.
  struct Curve {
    qint64 run = 0;
    std::string key;
    const inspect::MetricColumns* data = nullptr;  // in m_points, whose nodes do not move
    std::vector<double> x;
    std::vector<double> smoothed;  // empty when smoothing is off: the line draws data->values
    inspect::MinMaxBlocks lineBlocks, rawBlocks;  // block summaries of the line's values and of the raw values
    QLineSeries* line = nullptr;
    QLineSeries* raw = nullptr;    // the values under the smoothed line; null when smoothing is off
  };

  // Rebuilds the series and axes from the held points (metrics, runs, x unit, smoothing or log changed, or new
  // points arrived), then reduces.
  void rebuild();
  // Reduces every curve to the visible x range and the plot's pixel columns and hands Qt the result; fits y.
  void reduce();
  int columnsNow() const;
  // The list's item for a metric key, added unchecked when it is new (the caller blocks the list's signals).
  QListWidgetItem* metricItem(const QString& key);
  // The x of each point of a run's series in the current unit (tokensPerStep: for XAxis::Tokens).
  std::vector<double> xOf(qint64 run, const inspect::MetricColumns& data, XAxis unit, double tokensPerStep) const;
  const Curve* findCurve(qint64 run, const QString& key) const;
  // The runs, metrics or store shown changed: answers asked before are dropped, and the next read reads.
  void selectionChanged();
  void onRead(const MetricsReadPtr& read);
  // Takes in a current answer; true when the curves are to be built again.
  bool apply(MetricsRead& read);

  Session* m_session;
  QListWidget* m_metricList;
  QComboBox* m_xAxis;
  QCheckBox* m_logY;
  QSlider* m_smoothing;
  QLabel* m_smoothingLabel;
  QLabel* m_info;
  QChartView* m_view;
  QChart* m_chart;
  QTimer* m_timer;
  QTimer* m_reduceTimer;  // coalesces the plot area's resizes into one reduction

  QString m_dbPath;
  PollGate m_reads;          // a generation per store and selection: answers asked before are dropped
  MetricsPoller* m_poller;   // lives on m_pollerThread's thread
  PollerThread m_pollerThread;
  bool m_opened = false;     // the last answer found a run store
  QList<qint64> m_selected;
  std::map<qint64, store::RunInfo> m_runs;
  std::set<qint64> m_settled;  // runs read after they ended: nothing new will come
  std::map<SeriesKey, inspect::MetricColumns> m_points;
  std::map<qint64, RunTokens> m_tokens;  // each run's tokens per step, as last read

  XAxis m_xMode = XAxis::Step;
  QString m_xTitle;
  std::vector<Curve> m_curves;
  QStringList m_builtKeys;  // the metrics checked when the curves were built
  QValueAxis* m_x = nullptr;
  QAbstractAxis* m_y = nullptr;
  std::pair<double, double> m_extent{0, 1};     // every point's x
  std::optional<std::pair<double, double>> m_zoom;
  int m_columns = 0;
  bool m_applyingRange = false;  // the panel itself sets the axes: not a zoom
};

}  // namespace tsr::studio
