#include "views/metrics_panel.h"

#include <algorithm>
#include <cmath>
#include <span>

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QListWidget>
#include <QLogValueAxis>
#include <QScopedValueRollback>
#include <QSlider>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWheelEvent>

#include "views/chart_util.h"
namespace tsr::studio {

namespace {

const QColor kColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40),
                          QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194), QColor(127, 127, 127)};
const Qt::PenStyle kStyles[] = {Qt::SolidLine, Qt::DashLine, Qt::DotLine, Qt::DashDotLine};
// Pixel columns to reduce for while the chart is hidden (or not laid out yet).
constexpr int kHiddenColumns = 1000;

// The kept points of one series as the chart's points; widens [ymin, ymax] by those inside [x0, x1].
QList<QPointF> keptPoints(const std::vector<size_t>& kept, std::span<const double> x, std::span<const double> y,
                          double x0, double x1, double& ymin, double& ymax) {
  QList<QPointF> out;
  out.reserve(static_cast<qsizetype>(kept.size()));
  for (size_t i : kept) {
    out.append(QPointF(x[i], y[i]));
    if (x[i] >= x0 && x[i] <= x1) {
      ymin = std::min(ymin, y[i]);
      ymax = std::max(ymax, y[i]);
    }
  }
  return out;
}

std::pair<double, double> axisRange(const QAbstractAxis* axis) {
  if (auto* v = qobject_cast<const QValueAxis*>(axis)) return {v->min(), v->max()};
  if (auto* l = qobject_cast<const QLogValueAxis*>(axis)) return {l->min(), l->max()};
  return {0, 0};
}

// Ticks at round values (1, 2 or 5 times a power of ten, about six across) labelled with as many decimals as
// their spacing needs; Qt's default splits the range evenly, into labels such as 249999.8.
void setRoundTicks(QValueAxis* axis, double lo, double hi) {
  const double span = hi - lo;
  if (!(span > 0) || !std::isfinite(span)) return;
  const double rough = span / 6, decade = std::pow(10.0, std::floor(std::log10(rough)));
  const double f = rough / decade;
  const double step = decade * (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10);
  axis->setTickType(QValueAxis::TicksDynamic);
  axis->setTickAnchor(0);
  axis->setTickInterval(step);
  const double magnitude = std::max(std::abs(lo), std::abs(hi));
  if (magnitude >= 1e7) {  // token counts: 1.25e+09
    int digits = static_cast<int>(std::ceil(std::log10(magnitude)) - std::floor(std::log10(step))) + 1;
    axis->setLabelFormat(QString("%.%1g").arg(std::clamp(digits, 2, 15)));
  } else {
    int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    axis->setLabelFormat(QString("%.%1f").arg(decimals));
  }
}

}  // namespace

MetricsPanel::MetricsPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_metricList(new QListWidget),
      m_xAxis(new QComboBox),
      m_logY(new QCheckBox(tr("log y"))),
      m_smoothing(new QSlider(Qt::Horizontal)),
      m_smoothingLabel(new QLabel),
      m_info(new QLabel),
      m_view(new QChartView),
      m_chart(new QChart),
      m_timer(new QTimer(this)),
      m_reduceTimer(new QTimer(this)),
      m_poller(new MetricsPoller),
      m_pollerThread(m_poller, "metricsReader") {
  setObjectName("metricsPanel");
  m_metricList->setObjectName("metricList");
  m_metricList->setToolTip(tr("The metrics drawn: check several to overlay them"));
  m_metricList->setMaximumWidth(150);
  metricItem("loss")->setCheckState(Qt::Checked);
  m_xAxis->addItems({tr("step"), tr("wall time (s)"), tr("tokens")});
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(60);
  m_smoothing->setMaximumWidth(160);
  m_smoothingLabel->setText("0.60");
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("x")));
  bar->addWidget(m_xAxis);
  bar->addWidget(m_logY);
  bar->addWidget(new QLabel(tr("Smoothing")));
  bar->addWidget(m_smoothing);
  bar->addWidget(m_smoothingLabel);
  bar->addStretch(1);
  m_chart->legend()->setAlignment(Qt::AlignBottom);
  m_chart->setMargins(QMargins(4, 4, 4, 4));
  m_view->setChart(m_chart);
  m_view->setRenderHint(QPainter::Antialiasing);
  // Axes are rebuilt when the metrics or the scale change: repaint the whole view, or the old labels linger.
  m_view->setViewportUpdateMode(QGraphicsView::FullViewportUpdate);
  m_view->setRubberBand(QChartView::HorizontalRubberBand);
  m_view->setToolTip(tr("Drag to zoom on x, wheel to zoom around the cursor, right-click to zoom out, "
                        "double-click to show everything"));
  m_view->viewport()->installEventFilter(this);
  auto* body = new QHBoxLayout;
  body->addWidget(m_metricList);
  body->addWidget(m_view, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(bar);
  layout->addLayout(body, 1);
  layout->addWidget(m_info);
  m_reduceTimer->setSingleShot(true);
  m_reduceTimer->setInterval(0);
  connect(m_reduceTimer, &QTimer::timeout, this, &MetricsPanel::reduce);
  // A wider or narrower plot has other pixel columns: reduce again (once, after the layout settles).
  connect(m_chart, &QChart::plotAreaChanged, this, [this] {
    if (columnsNow() != m_columns) m_reduceTimer->start();
  });
  connect(m_poller, &MetricsPoller::done, this, &MetricsPanel::onRead);
  connect(m_metricList, &QListWidget::itemChanged, this, &MetricsPanel::selectionChanged);
  connect(m_xAxis, &QComboBox::currentIndexChanged, this, [this](int i) {
    m_xMode = static_cast<XAxis>(i);
    m_zoom.reset();  // another unit
    rebuild();
  });
  connect(m_logY, &QCheckBox::toggled, this, &MetricsPanel::rebuild);
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
    m_smoothingLabel->setText(QString::number(v / 100.0, 'f', 2));
    rebuild();
  });
  connect(m_session, &Session::projectOpened, this, [this] { setDatabase(m_session->runsDbPath()); });
  connect(m_session, &Session::projectClosed, this, [this] {
    setDatabase(QString());
    m_info->setText(tr("No project: the project did not open."));
  });
  connect(m_timer, &QTimer::timeout, this, &MetricsPanel::poll);
  m_timer->start(1000);
}

void MetricsPanel::setDatabase(const QString& path) {
  m_dbPath = path;
  m_opened = false;
  m_runs.clear();
  m_settled.clear();
  m_curves.clear();  // they point into m_points
  m_points.clear();
  m_tokens.clear();
  m_zoom.reset();
  rebuild();
  selectionChanged();
}

void MetricsPanel::setRuns(const QList<qint64>& runs) {
  m_selected = runs;
  selectionChanged();
}

void MetricsPanel::setMetrics(const QStringList& keys) {
  {
    QSignalBlocker block(m_metricList);
    for (const QString& key : keys) metricItem(key);
    for (int i = 0; i < m_metricList->count(); ++i) {
      QListWidgetItem* item = m_metricList->item(i);
      item->setCheckState(keys.contains(item->text()) ? Qt::Checked : Qt::Unchecked);
    }
  }
  selectionChanged();
}

void MetricsPanel::setSmoothing(double weight) { m_smoothing->setValue(static_cast<int>(std::lround(weight * 100))); }
void MetricsPanel::setXAxis(XAxis x) { m_xAxis->setCurrentIndex(static_cast<int>(x)); }
void MetricsPanel::setLogY(bool logY) { m_logY->setChecked(logY); }

void MetricsPanel::setXRange(double x0, double x1) {
  if (!(x1 > x0)) return;
  m_zoom = {x0, x1};
  reduce();
}

void MetricsPanel::resetZoom() {
  m_zoom.reset();
  reduce();
}

QListWidgetItem* MetricsPanel::metricItem(const QString& key) {
  QList<QListWidgetItem*> found = m_metricList->findItems(key, Qt::MatchExactly);
  if (!found.isEmpty()) return found.front();
  auto* item = new QListWidgetItem(key);
  item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable);
  item->setCheckState(Qt::Unchecked);
  m_metricList->addItem(item);
  return item;
}

QStringList MetricsPanel::metrics() const {
  QStringList keys;
  for (int i = 0; i < m_metricList->count(); ++i)
    if (m_metricList->item(i)->checkState() == Qt::Checked) keys << m_metricList->item(i)->text();
  return keys;
}

QList<qint64> MetricsPanel::shownRuns() const {
  if (!m_selected.isEmpty()) return m_selected;
  QList<qint64> latest;
  for (auto it = m_runs.rbegin(); it != m_runs.rend() && latest.size() < 3; ++it) latest.prepend(it->first);
  return latest;
}

QString MetricsPanel::xAxisTitle() const { return m_xTitle; }
std::pair<double, double> MetricsPanel::xRange() const { return m_zoom.value_or(m_extent); }

const inspect::MetricColumns& MetricsPanel::points(qint64 run, const QString& key) const {
  static const inspect::MetricColumns kNone;
  auto it = m_points.find({run, key.toStdString()});
  return it == m_points.end() ? kNone : it->second;
}

const MetricsPanel::Curve* MetricsPanel::findCurve(qint64 run, const QString& key) const {
  for (const Curve& c : m_curves)
    if (c.run == run && c.key == key.toStdString()) return &c;
  return nullptr;
}

QList<QPointF> MetricsPanel::curve(qint64 run, const QString& key) const {
  const Curve* c = findCurve(run, key);
  return c ? c->line->points() : QList<QPointF>();
}

QList<QPointF> MetricsPanel::rawCurve(qint64 run, const QString& key) const {
  const Curve* c = findCurve(run, key);
  return c && c->raw ? c->raw->points() : QList<QPointF>();
}

void MetricsPanel::selectionChanged() {
  m_reads.nextGeneration();
  poll();
}

void MetricsPanel::poll() {
  if (m_dbPath.isEmpty() || !m_reads.ask()) return;
  auto q = std::make_shared<MetricsQuery>();
  q->path = m_dbPath;
  q->generation = m_reads.generation();
  q->selected = m_selected;
  for (const QString& key : metrics()) q->keys.push_back(key.toStdString());
  for (const auto& [series, held] : m_points) q->held[series] = held.empty() ? -1 : held.steps.back();
  q->settled = m_settled;
  for (const auto& [run, tokens] : m_tokens)
    if (tokens.error.isEmpty()) q->withTokens.insert(run);
  QMetaObject::invokeMethod(m_poller, [poller = m_poller, q = MetricsQueryPtr(std::move(q))] { poller->read(q); });
}

void MetricsPanel::onRead(const MetricsReadPtr& read) {
  bool current = false;
  const bool again = m_reads.answered(read->generation, current);
  if (current && apply(*read)) rebuild();
  if (again) {
    poll();
    return;
  }
  emit polled(read->changed);
}

bool MetricsPanel::apply(MetricsRead& read) {
  m_opened = read.opened;
  if (!read.opened) {
    m_info->setText(tr("No runs yet."));
    return false;
  }
  if (!read.error.isEmpty()) {
    m_info->setText(read.error);
    return false;
  }
  if (!read.changed) return false;
  for (const store::RunInfo& r : read.runs) m_runs[r.id] = r;
  {
    QSignalBlocker block(m_metricList);
    for (const std::string& key : read.keys) metricItem(QString::fromStdString(key));
  }
  bool changed = false;
  for (auto& [series, points] : read.points) {
    inspect::MetricColumns& held = m_points[series];
    if (points.empty()) continue;
    held.append(points);
    changed = true;
  }
  for (auto& [run, tokens] : read.tokens) m_tokens[run] = std::move(tokens);
  for (qint64 run : read.shown)
    if (m_runs[run].status != store::RunStatus::Running) m_settled.insert(run);
  // Draw again when points arrived or the curves wanted are not those drawn.
  const QStringList keys = metrics();
  std::vector<SeriesKey> wanted, drawn;
  for (qint64 run : shownRuns()) {
    for (const QString& qk : keys) {
      auto it = m_points.find({run, qk.toStdString()});
      if (it != m_points.end() && !it->second.empty()) wanted.emplace_back(run, qk.toStdString());
    }
  }
  for (const Curve& c : m_curves) drawn.emplace_back(c.run, c.key);
  return changed || wanted != drawn || keys != m_builtKeys;
}

void MetricsPanel::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  if (columnsNow() != m_columns) m_reduceTimer->start();
}

void MetricsPanel::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) rebuild();
}

bool MetricsPanel::eventFilter(QObject* watched, QEvent* e) {
  if (watched == m_view->viewport() && !m_curves.empty()) {
    if (e->type() == QEvent::Wheel) {
      // Zoom x around the value under the cursor; a notch is 20 %.
      auto* w = static_cast<QWheelEvent*>(e);
      if (w->angleDelta().y() == 0) return false;
      QPointF at = m_chart->mapFromScene(m_view->mapToScene(w->position().toPoint()));
      double cx = m_chart->mapToValue(at, m_curves.front().line).x();
      auto [x0, x1] = xRange();
      double f = std::pow(0.8, w->angleDelta().y() / 120.0);
      double n0 = cx - (cx - x0) * f, n1 = cx + (x1 - cx) * f;
      if (n0 <= m_extent.first && n1 >= m_extent.second) {
        resetZoom();
      } else if (n1 - n0 > 1e-9 * (m_extent.second - m_extent.first)) {
        setXRange(n0, n1);
      }
      return true;
    }
    if (e->type() == QEvent::MouseButtonDblClick) {
      resetZoom();
      return true;
    }
  }
  return QWidget::eventFilter(watched, e);
}

std::vector<double> MetricsPanel::xOf(qint64 run, const inspect::MetricColumns& data, XAxis unit,
                                      double tokensPerStep) const {
  std::vector<double> x(data.size());
  if (unit == XAxis::WallTime) {
    // Seconds since the run started; a clock that steps back is drawn flat, so x stays sorted.
    auto info = m_runs.find(run);
    double t0 = info != m_runs.end() && info->second.startTime > 0 ? info->second.startTime : data.times.front();
    double last = -INFINITY;
    for (size_t i = 0; i < x.size(); ++i) x[i] = last = std::max(last, data.times[i] - t0);
  } else {
    double scale = unit == XAxis::Tokens ? tokensPerStep : 1.0;
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(data.steps[i]) * scale;
  }
  return x;
}

void MetricsPanel::rebuild() {
  // Attaching series makes Qt Charts set the axes' ranges: not a zoom.
  QScopedValueRollback<bool> ownRange(m_applyingRange, true);
  QChart::ChartTheme theme = palette().color(QPalette::Window).lightness() < 128 ? QChart::ChartThemeDark : QChart::ChartThemeLight;
  if (m_chart->theme() != theme) m_chart->setTheme(theme);
  clearChart(m_chart);
  m_curves.clear();
  const QStringList keys = metrics();
  m_builtKeys = keys;
  const bool logY = m_logY->isChecked();
  const double weight = m_smoothing->value() / 100.0;

  // The curves there are points for, runs first.
  QList<qint64> runs;
  std::vector<std::pair<qint64, const inspect::MetricColumns*>> found;
  std::vector<int> keyIndex;
  for (qint64 run : shownRuns()) {
    for (int k = 0; k < keys.size(); ++k) {
      auto it = m_points.find({run, keys[k].toStdString()});
      if (it == m_points.end() || it->second.empty()) continue;
      found.emplace_back(run, &it->second);
      keyIndex.push_back(k);
      if (!runs.contains(run)) runs << run;
    }
  }

  // The x unit: tokens when every run drawn has a tokens-per-step figure, steps otherwise (the title says why).
  XAxis unit = m_xMode;
  std::map<qint64, double> tokens;
  m_xTitle = m_xMode == XAxis::WallTime ? tr("wall time (s)") : m_xMode == XAxis::Tokens ? tr("tokens") : tr("step");
  if (m_xMode == XAxis::Tokens) {
    for (qint64 run : runs) {
      // Read with the run's points: a run drawn has its figure, or the reason it has none.
      auto t = m_tokens.find(run);
      const QString error = t == m_tokens.end() ? tr("not read yet") : t->second.error;
      if (!error.isEmpty()) {
        unit = XAxis::Step;
        m_xTitle = tr("step (no tokens for run %1: %2)").arg(run).arg(error);
        break;
      }
      tokens[run] = t->second.perStep;
    }
  }

  m_x = new QValueAxis;
  m_x->setTitleText(m_xTitle);
  m_y = logY ? static_cast<QAbstractAxis*>(new QLogValueAxis) : new QValueAxis;
  m_y->setTitleText(keys.join(", "));
  m_chart->addAxis(m_x, Qt::AlignBottom);
  m_chart->addAxis(m_y, Qt::AlignLeft);
  connect(m_x, &QValueAxis::rangeChanged, this, [this](qreal lo, qreal hi) {
    if (m_applyingRange || !(hi > lo)) return;
    m_zoom = {lo, hi};  // dragged or zoomed out by Qt Charts: reduce for it once the chart is done
    m_reduceTimer->start();
  });

  // Colour by run (by metric when there is one run); with several of both, a dash pattern per metric.
  m_extent = {INFINITY, -INFINITY};
  m_curves.reserve(found.size());
  for (size_t f = 0; f < found.size(); ++f) {
    const auto& [run, data] = found[f];
    const int k = keyIndex[f];
    const int r = static_cast<int>(runs.indexOf(run));
    Curve c;
    c.run = run;
    c.key = keys[k].toStdString();
    c.data = data;
    c.x = xOf(run, *data, unit, tokens.count(run) ? tokens[run] : 1.0);
    if (weight > 0) {
      c.smoothed = inspect::smooth(data->values, weight);
      c.lineBlocks = inspect::minMaxBlocks(c.smoothed, logY);
      c.rawBlocks = inspect::minMaxBlocks(data->values, logY);
    } else {
      c.lineBlocks = inspect::minMaxBlocks(data->values, logY);
    }
    m_extent.first = std::min(m_extent.first, c.x.front());
    m_extent.second = std::max(m_extent.second, c.x.back());
    QColor color = kColors[(runs.size() > 1 ? r : k) % 8];
    Qt::PenStyle style = runs.size() > 1 && keys.size() > 1 ? kStyles[k % 4] : Qt::SolidLine;
    QStringList name;
    if (runs.size() > 1 || keys.size() == 1) {
      name << QString("run %1").arg(run);
      if (m_runs.count(run)) name.back() += " " + QString::fromStdString(m_runs[run].name);
    }
    if (keys.size() > 1) name << keys[k];
    if (weight > 0) {
      c.raw = new QLineSeries;
      QColor faint = color;
      faint.setAlpha(70);
      c.raw->setPen(QPen(faint, 1));
      m_chart->addSeries(c.raw);
      c.raw->attachAxis(m_x);
      c.raw->attachAxis(m_y);
      m_chart->legend()->markers(c.raw).value(0)->setVisible(false);
    }
    c.line = new QLineSeries;
    c.line->setName(name.join(" · "));
    c.line->setPen(QPen(QBrush(color), 2, style));
    m_chart->addSeries(c.line);
    c.line->attachAxis(m_x);
    c.line->attachAxis(m_y);
    m_curves.push_back(std::move(c));
  }
  if (m_curves.empty()) m_extent = {0, 1};
  if (!(m_extent.second > m_extent.first)) m_extent.second = m_extent.first + 1;
  reduce();
}

int MetricsPanel::columnsNow() const {
  const double width = m_chart->plotArea().width();
  if (!m_view->isVisible() || width < 2) return kHiddenColumns;
  return std::max(1, static_cast<int>(std::lround(width * m_view->devicePixelRatioF())));
}

void MetricsPanel::reduce() {
  QScopedValueRollback<bool> ownRange(m_applyingRange, true);
  m_reduceTimer->stop();
  m_columns = columnsNow();
  const QString keys = metrics().join(", ");
  if (m_curves.empty()) {
    m_info->setText(m_dbPath.isEmpty() || !m_opened ? tr("No runs yet.") : tr("%1 — no points").arg(keys));
    emit updated();
    return;
  }
  const auto [x0, x1] = xRange();
  const bool logY = m_logY->isChecked();
  double ymin = INFINITY, ymax = -INFINITY;
  qsizetype drawn = 0;
  size_t total = 0;
  std::vector<QList<QPointF>> lines(m_curves.size()), raws(m_curves.size());
  for (size_t i = 0; i < m_curves.size(); ++i) {
    const Curve& c = m_curves[i];
    std::span<const double> values = c.data->values;
    std::span<const double> line = c.smoothed.empty() ? values : std::span<const double>(c.smoothed);
    lines[i] = keptPoints(inspect::minMaxPerColumn(c.x, line, c.lineBlocks, x0, x1, m_columns, logY), c.x, line, x0, x1,
                          ymin, ymax);
    if (c.raw) {
      raws[i] = keptPoints(inspect::minMaxPerColumn(c.x, values, c.rawBlocks, x0, x1, m_columns, logY), c.x, values,
                           x0, x1, ymin, ymax);
    }
    drawn += lines[i].size() + raws[i].size();
    total += c.data->size();
  }
  // y fits what is drawn in the visible range.
  std::pair<double, double> y = axisRange(m_y);
  if (ymin <= ymax && logY) {
    y = {ymin * 0.9, ymax * 1.1};
  } else if (ymin <= ymax) {
    double pad = (ymax - ymin) * 0.05;
    y = {ymin - pad, ymax > ymin ? ymax + pad : ymin + 1};
  }
  // Qt Charts recomputes a series' geometry (its path, and a stroked outline of it) whenever its points change
  // and whenever an axis' range does. When the ranges change, the series are emptied first: the range changes
  // then cost nothing and each series' geometry is computed once, for its new points.
  if (axisRange(m_x) != std::make_pair(x0, x1) || axisRange(m_y) != y) {
    for (Curve& c : m_curves) {
      c.line->clear();
      if (c.raw) c.raw->clear();
    }
    m_x->setRange(x0, x1);
    m_y->setRange(y.first, y.second);
    setRoundTicks(m_x, x0, x1);
    if (auto* linear = qobject_cast<QValueAxis*>(m_y)) setRoundTicks(linear, y.first, y.second);
  }
  for (size_t i = 0; i < m_curves.size(); ++i) {
    m_curves[i].line->replace(lines[i]);
    if (m_curves[i].raw) m_curves[i].raw->replace(raws[i]);
  }
  m_info->setText(tr("%1 — %2 curve(s), %3 points, %4 drawn for %5 px")
                      .arg(keys)
                      .arg(m_curves.size())
                      .arg(QLocale().toString(static_cast<qulonglong>(total)))
                      .arg(QLocale().toString(static_cast<qlonglong>(drawn)))
                      .arg(m_columns));
  emit updated();
}

}  // namespace tsr::studio
