#include "views/metrics_panel.h"

#include <cmath>

#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QEvent>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QSlider>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>

namespace tsr::studio {

namespace {

const QColor kRunColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44), QColor(214, 39, 40),
                             QColor(148, 103, 189), QColor(140, 86, 75), QColor(227, 119, 194), QColor(127, 127, 127)};

}  // namespace

MetricsPanel::MetricsPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_metric(new QComboBox),
      m_xAxis(new QComboBox),
      m_logY(new QCheckBox(tr("log y"))),
      m_smoothing(new QSlider(Qt::Horizontal)),
      m_smoothingLabel(new QLabel),
      m_info(new QLabel),
      m_view(new QChartView),
      m_chart(new QChart),
      m_timer(new QTimer(this)) {
  setObjectName("metricsPanel");
  m_metric->addItem("loss");
  m_metric->setMinimumContentsLength(10);
  m_xAxis->addItems({tr("step"), tr("wall time (s)")});
  m_smoothing->setRange(0, 99);
  m_smoothing->setValue(60);
  m_smoothing->setMaximumWidth(160);
  m_smoothingLabel->setText("0.60");
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Metric")));
  bar->addWidget(m_metric);
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
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(bar);
  layout->addWidget(m_view, 1);
  layout->addWidget(m_info);
  connect(m_metric, &QComboBox::currentTextChanged, this, &MetricsPanel::render);
  connect(m_xAxis, &QComboBox::currentIndexChanged, this, &MetricsPanel::render);
  connect(m_logY, &QCheckBox::toggled, this, &MetricsPanel::render);
  connect(m_smoothing, &QSlider::valueChanged, this, [this](int v) {
    m_smoothingLabel->setText(QString::number(v / 100.0, 'f', 2));
    render();
  });
  connect(m_session, &Session::projectOpened, this, [this] { setDatabase(m_session->runsDbPath()); });
  connect(m_timer, &QTimer::timeout, this, &MetricsPanel::poll);
  m_timer->start(1000);
}

void MetricsPanel::setDatabase(const QString& path) {
  m_dbPath = path;
  m_reader.reset();
  m_runs.clear();
  m_points.clear();
  poll();
}

void MetricsPanel::setRuns(const QList<qint64>& runs) {
  m_selected = runs;
  poll();
}

void MetricsPanel::setMetric(const QString& key) {
  if (m_metric->findText(key) < 0) m_metric->addItem(key);
  m_metric->setCurrentText(key);
}

void MetricsPanel::setSmoothing(double weight) { m_smoothing->setValue(static_cast<int>(std::lround(weight * 100))); }
void MetricsPanel::setWallTime(bool wallTime) { m_xAxis->setCurrentIndex(wallTime ? 1 : 0); }
void MetricsPanel::setLogY(bool logY) { m_logY->setChecked(logY); }
QString MetricsPanel::metric() const { return m_metric->currentText(); }

QList<qint64> MetricsPanel::shownRuns() const {
  if (!m_selected.isEmpty()) return m_selected;
  QList<qint64> latest;
  for (auto it = m_runs.rbegin(); it != m_runs.rend() && latest.size() < 3; ++it) latest.prepend(it->first);
  return latest;
}

const std::vector<store::MetricPoint>& MetricsPanel::points(qint64 run, const QString& key) const {
  static const std::vector<store::MetricPoint> kNone;
  auto it = m_points.find({run, key.toStdString()});
  return it == m_points.end() ? kNone : it->second;
}

QList<QPointF> MetricsPanel::curve(qint64 run) const {
  auto it = m_curves.find(run);
  return it == m_curves.end() ? QList<QPointF>() : it->second;
}

void MetricsPanel::poll() {
  if (m_dbPath.isEmpty()) return;
  if (!m_reader) {
    auto r = inspect::RunsReader::open(m_dbPath.toStdString());
    if (!r.ok()) {
      m_info->setText(tr("No runs yet."));
      return;
    }
    m_reader.emplace(std::move(r).value());
  }
  auto infos = m_reader->runInfos();
  if (!infos.ok()) {
    m_info->setText(QString::fromStdString(infos.error().message));
    return;
  }
  for (const auto& r : *infos) m_runs[r.id] = r;
  // Keys of every shown run; new points of the shown runs for every key (cheap: only what is new).
  QStringList keys;
  for (int i = 0; i < m_metric->count(); ++i) keys << m_metric->itemText(i);
  bool changed = false;
  for (qint64 run : shownRuns()) {
    auto k = m_reader->keys(run);
    if (!k.ok()) continue;
    for (const std::string& key : *k) {
      QString qk = QString::fromStdString(key);
      if (!keys.contains(qk)) {
        keys << qk;
        m_metric->addItem(qk);
      }
      auto& pts = m_points[{run, key}];
      auto fresh = m_reader->points(run, key, pts.empty() ? -1 : pts.back().step);
      if (!fresh.ok() || fresh->empty()) continue;
      pts.insert(pts.end(), fresh->begin(), fresh->end());
      changed = true;
    }
  }
  if (changed || m_curves.size() != static_cast<size_t>(shownRuns().size())) render();
}

void MetricsPanel::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) render();
}

void MetricsPanel::render() {
  QChart::ChartTheme theme = palette().color(QPalette::Window).lightness() < 128 ? QChart::ChartThemeDark : QChart::ChartThemeLight;
  if (m_chart->theme() != theme) m_chart->setTheme(theme);
  m_chart->removeAllSeries();
  for (QAbstractAxis* a : m_chart->axes()) {
    m_chart->removeAxis(a);
    delete a;
  }
  m_curves.clear();
  std::string key = m_metric->currentText().toStdString();
  bool wall = m_xAxis->currentIndex() == 1;
  bool logY = m_logY->isChecked();
  double weight = m_smoothing->value() / 100.0;
  auto* xAxis = new QValueAxis;
  xAxis->setTitleText(wall ? tr("wall time (s)") : tr("step"));
  QAbstractAxis* yAxis = logY ? static_cast<QAbstractAxis*>(new QLogValueAxis) : new QValueAxis;
  yAxis->setTitleText(QString::fromStdString(key));
  m_chart->addAxis(xAxis, Qt::AlignBottom);
  m_chart->addAxis(yAxis, Qt::AlignLeft);
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  int colorIndex = 0;
  int total = 0;
  for (qint64 run : shownRuns()) {
    QColor color = kRunColors[colorIndex++ % 8];
    auto it = m_points.find({run, key});
    if (it == m_points.end() || it->second.empty()) continue;
    const auto& pts = it->second;
    std::vector<double> values;
    values.reserve(pts.size());
    for (const auto& p : pts) values.push_back(p.value);
    std::vector<double> smoothed = inspect::smooth(values, weight);
    double t0 = m_runs.count(run) ? m_runs[run].startTime : pts.front().time;
    QList<QPointF> raw, curve;
    for (size_t i = 0; i < pts.size(); ++i) {
      double x = wall ? pts[i].time - t0 : static_cast<double>(pts[i].step);
      if (logY && (values[i] <= 0 || smoothed[i] <= 0)) continue;
      raw << QPointF(x, values[i]);
      curve << QPointF(x, smoothed[i]);
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min({ymin, values[i], smoothed[i]});
      ymax = std::max({ymax, values[i], smoothed[i]});
    }
    total += static_cast<int>(pts.size());
    QString name = QString("run %1").arg(run);
    if (m_runs.count(run)) name += " " + QString::fromStdString(m_runs[run].name);
    if (weight > 0) {
      auto* rs = new QLineSeries;
      rs->replace(raw);
      QColor faint = color;
      faint.setAlpha(70);
      rs->setPen(QPen(faint, 1));
      m_chart->addSeries(rs);
      rs->attachAxis(xAxis);
      rs->attachAxis(yAxis);
      m_chart->legend()->markers(rs).value(0)->setVisible(false);
    }
    auto* s = new QLineSeries;
    s->setName(name);
    s->replace(curve);
    s->setPen(QPen(color, 2));
    m_chart->addSeries(s);
    s->attachAxis(xAxis);
    s->attachAxis(yAxis);
    m_curves[run] = curve;
  }
  if (xmin <= xmax) {
    xAxis->setRange(xmin, xmax > xmin ? xmax : xmin + 1);
    double pad = logY ? 0 : (ymax - ymin) * 0.05;
    yAxis->setRange(logY ? ymin * 0.9 : ymin - pad, logY ? ymax * 1.1 : (ymax > ymin ? ymax + pad : ymin + 1));
  }
  m_info->setText(tr("%1 — %2 run(s), %3 points").arg(QString::fromStdString(key)).arg(m_curves.size()).arg(total));
  emit updated();
}

}  // namespace tsr::studio
