#include "views/memory_panel.h"

#include <QAreaSeries>
#include <QChart>
#include <QChartView>
#include <QHeaderView>
#include <QLabel>
#include <QLineSeries>
#include <QTableWidget>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QtConcurrent>

#include "views/chart_util.h"

namespace tsr::studio {

namespace {

// The chart's unit: the largest of KiB, MiB and GiB under which the peak reads at least 1.
std::pair<double, QString> unitFor(int64_t peakBytes) {
  if (peakBytes >= (int64_t(1) << 30)) return {1024.0 * 1024.0 * 1024.0, "GiB"};
  if (peakBytes >= (int64_t(1) << 20)) return {1024.0 * 1024.0, "MiB"};
  return {1024.0, "KiB"};
}

// One colour per kind, in MemoryKind's order.
const QColor kKindColours[inspect::kNumMemoryKinds] = {QColor(0x4e, 0x79, 0xa7), QColor(0xf2, 0x8e, 0x2b),
                                                       QColor(0xe1, 0x57, 0x59), QColor(0x76, 0xb7, 0xb2),
                                                       QColor(0x59, 0xa1, 0x4f), QColor(0xba, 0xb0, 0xac)};

QString bytesText(int64_t bytes) { return QString::fromStdString(inspect::formatBytes(bytes)); }

}  // namespace

MemoryPanel::MemoryPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_summary(new QLabel),
      m_view(new QChartView),
      m_chart(new QChart),
      m_table(new QTableWidget(0, 5)),
      m_watcher(new QFutureWatcher<Computed>(this)) {
  m_summary->setWordWrap(true);
  m_summary->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_summary->setText(tr("Memory over the training step appears after the project compiles."));
  m_chart->legend()->setAlignment(Qt::AlignRight);
  m_chart->setMargins(QMargins(4, 4, 4, 4));
  m_view->setChart(m_chart);
  m_view->setRenderHint(QPainter::Antialiasing);
  m_view->setMinimumHeight(160);
  m_table->setHorizontalHeaderLabels({tr("Bytes"), tr("Kind"), tr("Made by"), tr("Node"), tr("What / where")});
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->verticalHeader()->hide();
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  m_table->setToolTip(tr("The buffers live at the peak, largest first; click one to select its node"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addWidget(m_summary);
  layout->addWidget(m_view, 3);
  layout->addWidget(m_table, 2);
  connect(m_session, &Session::stagesReady, this, &MemoryPanel::onStagesReady);
  connect(m_session, &Session::projectOpening, this, [this] {
    m_memory.reset();
    showMemory();
  });
  connect(m_session, &Session::projectClosed, this, [this] {
    m_memory.reset();
    m_measured.clear();
    showMemory();
    m_summary->setText(tr("No memory plan: the project did not open"));
  });
  connect(m_watcher, &QFutureWatcherBase::finished, this, &MemoryPanel::onComputed);
  connect(m_session, &Session::profileChanged, this, &MemoryPanel::onStagesReady);  // a new profile: measured again
  connect(m_table, &QTableWidget::cellClicked, this, [this](int row, int) { onRowActivated(row); });
}

MemoryPanel::~MemoryPanel() { m_watcher->waitForFinished(); }

bool MemoryPanel::computing() const { return m_watcher->isRunning() || m_stale; }

QString MemoryPanel::summary() const { return m_summary->text(); }

void MemoryPanel::onStagesReady() {
  if (m_watcher->isRunning()) {
    m_stale = true;  // computed again when the one under way ends
    return;
  }
  m_stale = false;
  StagesPtr stages = m_session->stages();
  ProjectPtr project = m_session->project();
  const int fusionStage = m_session->profileStage();  // the stage whose node ids kernels name
  if (!stages || fusionStage < 0 || !project) return;
  m_summary->setText(tr("Planning the step's memory…"));
  const std::string db = m_session->runsDbPath().toStdString();
  m_watcher->setFuture(QtConcurrent::run([stages, project, fusionStage, db]() -> Computed {
    auto c = std::make_shared<Computation>(
        Computation{inspect::stageMemory((*stages)[static_cast<size_t>(fusionStage)], *project), {}});
    if (c->memory.ok()) c->measured = inspect::measuredMemoryText(db, *c->memory);
    return c;
  }));
}

void MemoryPanel::onComputed() {
  Computed r = m_watcher->result();
  if (m_stale) {
    onStagesReady();
    return;
  }
  if (!m_session->project()) return;  // planned for a project that has gone since
  if (!r->memory.ok()) {
    m_memory.reset();
    m_measured.clear();
    showMemory();
    m_summary->setText(tr("No memory plan: %1").arg(QString::fromStdString(r->memory.error().message)));
    return;
  }
  m_memory = std::make_shared<const inspect::StepMemory>(std::move(r->memory).value());
  m_measured = QString::fromStdString(r->measured);
  showMemory();
}

void MemoryPanel::showMemory() {
  clearChart(m_chart);
  m_table->setRowCount(0);
  if (!m_memory) return;
  const inspect::StepMemory& m = *m_memory;
  const int numKernels = static_cast<int>(m.kernels.size());
  const auto& peak = m.live[static_cast<size_t>(m.peakKernel)];
  QStringList kinds;
  for (int k = 0; k < inspect::kNumMemoryKinds; ++k)
    kinds << QString("%1 %2").arg(inspect::memoryKindName(static_cast<inspect::MemoryKind>(k)),
                                  bytesText(peak[static_cast<size_t>(k)]));
  m_summary->setText(
      tr("Peak %1 on %2 while kernel %3 of %4 runs (%5): %6. Intermediates: an arena of %7, their live bytes "
         "peak at %8; %9 without reuse.")
          .arg(bytesText(m.peakBytes), QString::fromStdString(m.device))
          .arg(m.peakKernel + 1)
          .arg(numKernels)
          .arg(numKernels ? QString::fromStdString(m.kernels[static_cast<size_t>(m.peakKernel)]) : QString())
          .arg(kinds.join(", "), bytesText(m.arenaBytes), bytesText(m.arenaPeakLiveBytes),
               bytesText(m.intermediateBytes)) +
      (m_measured.isEmpty() ? QString() : "\n" + m_measured));

  // Stacked areas: kind k lies between the running sums of kinds before it and through it. Each kernel is a
  // step of the curve (two points), so the bytes read exactly at every kernel.
  auto* xAxis = new QValueAxis;
  xAxis->setTitleText(tr("kernel"));
  xAxis->setLabelFormat("%d");
  xAxis->setRange(0, std::max(numKernels, 1));
  const auto [unit, unitName] = unitFor(m.peakBytes);
  auto* yAxis = new QValueAxis;
  yAxis->setTitleText(tr("%1 live").arg(unitName));
  yAxis->setRange(0, std::max(m.peakBytes / unit * 1.05, 1e-3));
  // Ticks at round values (0, 5, 10, 15, 20 MiB), not at fifths of 1.05 x the peak (0, 5.0, 9.9, 14.9, 19.9).
  yAxis->applyNiceNumbers();
  m_chart->addAxis(xAxis, Qt::AlignBottom);
  m_chart->addAxis(yAxis, Qt::AlignLeft);
  std::vector<double> below(m.live.size(), 0.0);
  QLineSeries* lower = nullptr;
  for (int k = 0; k < inspect::kNumMemoryKinds; ++k) {
    auto* upper = new QLineSeries;
    QList<QPointF> points;
    points.reserve(static_cast<qsizetype>(2 * m.live.size()));
    for (size_t i = 0; i < m.live.size(); ++i) {
      below[i] += static_cast<double>(m.live[i][static_cast<size_t>(k)]) / unit;
      points << QPointF(static_cast<double>(i), below[i]) << QPointF(static_cast<double>(i + 1), below[i]);
    }
    upper->replace(points);
    auto* area = new QAreaSeries(upper, lower);
    area->setName(inspect::memoryKindName(static_cast<inspect::MemoryKind>(k)));
    area->setColor(kKindColours[k]);
    area->setBorderColor(kKindColours[k].darker(120));
    m_chart->addSeries(area);
    area->attachAxis(xAxis);
    area->attachAxis(yAxis);
    lower = upper;
  }
  auto* peakLine = new QLineSeries;
  peakLine->setName(tr("peak %1").arg(bytesText(m.peakBytes)));
  const double x = m.peakKernel + 0.5;
  peakLine->append(x, 0);
  peakLine->append(x, m.peakBytes / unit);
  QPen pen(Qt::black);
  pen.setStyle(Qt::DashLine);
  pen.setWidth(2);
  peakLine->setPen(pen);
  m_chart->addSeries(peakLine);
  peakLine->attachAxis(xAxis);
  peakLine->attachAxis(yAxis);

  m_table->setRowCount(static_cast<int>(m.atPeak.size()));
  for (int row = 0; row < static_cast<int>(m.atPeak.size()); ++row) {
    const inspect::MemoryBuffer& b = m.buffers[static_cast<size_t>(m.atPeak[static_cast<size_t>(row)])];
    QString place = QString::fromStdString(b.what.empty() ? b.where : b.where.empty() ? b.what : b.what + " at " + b.where);
    auto* bytes = new QTableWidgetItem(bytesText(b.bytes));
    bytes->setData(Qt::UserRole, static_cast<qlonglong>(b.bytes));
    bytes->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    m_table->setItem(row, 0, bytes);
    m_table->setItem(row, 1, new QTableWidgetItem(inspect::memoryKindName(b.kind)));
    m_table->setItem(row, 2, new QTableWidgetItem(QString::fromStdString(b.op)));
    auto* node = new QTableWidgetItem(b.node == ir::kNone ? QString("-") : QString("%%1").arg(b.node));
    node->setData(Qt::UserRole, b.node);
    m_table->setItem(row, 3, node);
    m_table->setItem(row, 4, new QTableWidgetItem(place));
  }
  m_table->resizeColumnsToContents();
}

void MemoryPanel::onRowActivated(int row) {
  QTableWidgetItem* item = m_table->item(row, 3);
  if (!item) return;
  const int node = item->data(Qt::UserRole).toInt();
  // Node ids are the fusion stage's: the stage the graph shows a profile's kernels on.
  if (node >= 0) m_session->selectKernelNodes({node});
}

}  // namespace tsr::studio
