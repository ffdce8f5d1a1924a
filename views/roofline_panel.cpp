#include "views/roofline_panel.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QScatterSeries>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtConcurrent>

#include "views/chart_util.h"

namespace tsr::studio {

namespace {

// The roofs are the machine's: measured once per process, by the first panel that needs them.
QFuture<inspect::Roofs> sharedRoofs() {
  static QFuture<inspect::Roofs> roofs = QtConcurrent::run([] { return inspect::measureRoofs(); });
  return roofs;
}

QColor kindColour(const std::string& kind) {
  if (kind == "gemm" || kind == "conv") return QColor(0x4e, 0x79, 0xa7);
  if (kind == "reduction") return QColor(0xf2, 0x8e, 0x2b);
  if (kind == "loop") return QColor(0x59, 0xa1, 0x4f);
  return QColor(0xe1, 0x57, 0x59);
}

}  // namespace

RooflinePanel::RooflinePanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_summary(new QLabel),
      m_view(new QChartView),
      m_chart(new QChart),
      m_watcher(new QFutureWatcher<inspect::Roofs>(this)) {
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_chart->legend()->setAlignment(Qt::AlignRight);
  m_chart->setMargins(QMargins(4, 4, 4, 4));
  m_view->setChart(m_chart);
  m_view->setRenderHint(QPainter::Antialiasing);
  m_view->setMinimumHeight(200);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(m_summary);
  layout->addWidget(m_view, 1);
  connect(m_watcher, &QFutureWatcherBase::finished, this, [this] {
    m_roofs = m_watcher->result();
    refresh();
  });
  connect(m_session, &Session::profileChanged, this, &RooflinePanel::refresh);
  connect(m_session, &Session::stagesReady, this, &RooflinePanel::refresh);
  refresh();
}

RooflinePanel::~RooflinePanel() { m_watcher->waitForFinished(); }

bool RooflinePanel::measuring() const { return m_watcher->isRunning(); }

QString RooflinePanel::summary() const { return m_summary->text(); }

void RooflinePanel::refresh() {
  ProfilePtr profile = m_session->profile();
  if (!profile) {
    m_roofline = {};
    m_summary->setText(tr("The roofline shows a profile's kernels: Run › Profile (Ctrl+F5) makes one. %1")
                           .arg(m_session->profileError()));
    draw();
    return;
  }
  if (!m_roofs) {
    if (!m_watcher->isRunning()) m_watcher->setFuture(sharedRoofs());
    m_summary->setText(tr("Measuring this machine's roofs (the SGEMM peak and the copy bandwidth)…"));
    return;
  }
  m_roofline = inspect::rooflineOf(*profile, *m_roofs);
  double time = 0, under = 0;
  for (const auto& p : m_roofline.points) time += p.share, under += p.share * p.ofRoof;
  m_summary->setText(tr("Profile %1: %2 kernels drawn (%3 move bytes only and have no point). Roofs: %4. Weighted "
                        "by time, the kernels run at %5% of their roof.")
                         .arg(profile->profile.id)
                         .arg(m_roofline.points.size())
                         .arg(m_roofline.withoutFlops)
                         .arg(QString::fromStdString(m_roofs->how))
                         .arg(time > 0 ? 100.0 * under / time : 0.0, 0, 'f', 1));
  draw();
}

void RooflinePanel::draw() {
  clearChart(m_chart);
  if (m_roofline.points.empty() || !m_roofs) return;
  // The ridge and some of the flat roof past it are always in view.
  double xMin = m_roofs->ridge(), xMax = m_roofs->ridge() * 4, yMin = m_roofs->flopsPerSecond;
  for (const auto& p : m_roofline.points) {
    xMin = std::min(xMin, p.intensity), xMax = std::max(xMax, p.intensity);
    yMin = std::min(yMin, p.flopsPerSecond);
  }
  xMin = std::pow(10.0, std::floor(std::log10(std::max(xMin, 1e-6)))), xMax = std::pow(10.0, std::ceil(std::log10(xMax * 1.01)));
  yMin = std::pow(10.0, std::floor(std::log10(std::max(yMin / 1e9, 1e-6))));
  auto* x = new QLogValueAxis;
  x->setTitleText(tr("FLOPs per byte"));
  x->setBase(10);
  x->setLabelFormat("%g");
  x->setRange(xMin, xMax);
  auto* y = new QLogValueAxis;
  y->setTitleText(tr("GFLOP/s"));
  y->setBase(10);
  y->setLabelFormat("%g");
  y->setRange(yMin, m_roofs->flopsPerSecond / 1e9 * 2);
  m_chart->addAxis(x, Qt::AlignBottom);
  m_chart->addAxis(y, Qt::AlignLeft);

  auto* roof = new QLineSeries;
  roof->setName(tr("roofs"));
  roof->append(xMin, m_roofs->at(xMin) / 1e9);
  if (m_roofs->ridge() > xMin && m_roofs->ridge() < xMax) roof->append(m_roofs->ridge(), m_roofs->flopsPerSecond / 1e9);
  roof->append(xMax, m_roofs->at(xMax) / 1e9);
  QPen pen(Qt::darkGray);
  pen.setWidth(2);
  roof->setPen(pen);
  m_chart->addSeries(roof);
  roof->attachAxis(x);
  roof->attachAxis(y);

  // One series per kernel kind; each point's index in the roofline rides along for hover and click.
  std::map<std::string, std::pair<QScatterSeries*, std::vector<int>>> byKind;
  for (int i = 0; i < static_cast<int>(m_roofline.points.size()); ++i) {
    const auto& p = m_roofline.points[static_cast<size_t>(i)];
    auto& [series, indices] = byKind[p.kind];
    if (!series) {
      series = new QScatterSeries;
      series->setName(QString::fromStdString(p.kind));
      series->setColor(kindColour(p.kind));
      series->setMarkerSize(9);
    }
    series->append(p.intensity, p.flopsPerSecond / 1e9);
    indices.push_back(i);
  }
  for (auto& [kind, entry] : byKind) {
    QScatterSeries* series = entry.first;
    const std::vector<int> indices = entry.second;
    m_chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y);
    auto pointAt = [series, indices](const QPointF& at) {
      int best = -1;
      double bestD = 0;
      for (int k = 0; k < series->count(); ++k) {
        const QPointF q = series->at(k);
        const double d = std::hypot(std::log10(q.x() / at.x()), std::log10(q.y() / at.y()));
        if (best < 0 || d < bestD) best = k, bestD = d;
      }
      return best < 0 ? -1 : indices[static_cast<size_t>(best)];
    };
    connect(series, &QScatterSeries::clicked, this, [this, pointAt](const QPointF& at) { selectPoint(pointAt(at)); });
    connect(series, &QScatterSeries::hovered, this, [this, pointAt](const QPointF& at, bool state) {
      if (!state) return QToolTip::hideText();
      const int i = pointAt(at);
      if (i < 0) return;
      const auto& p = m_roofline.points[static_cast<size_t>(i)];
      QToolTip::showText(QCursor::pos(), tr("%1\n%2 FLOPs/byte, %3 GFLOP/s: %4% of its roof\n%5% of the kernel time")
                                             .arg(QString::fromStdString(p.name))
                                             .arg(p.intensity, 0, 'g', 3)
                                             .arg(p.flopsPerSecond / 1e9, 0, 'f', 2)
                                             .arg(100.0 * p.ofRoof, 0, 'f', 1)
                                             .arg(100.0 * p.share, 0, 'f', 1));
    });
  }
}

void RooflinePanel::selectPoint(int i) {
  if (i < 0 || i >= static_cast<int>(m_roofline.points.size())) return;
  const auto& p = m_roofline.points[static_cast<size_t>(i)];
  if (!p.nodes.empty()) m_session->selectKernelNodes(std::vector<int>(p.nodes.begin(), p.nodes.end()));
}

}  // namespace tsr::studio
