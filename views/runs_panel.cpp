#include "views/runs_panel.h"

#include <set>

#include <QDateTime>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QPushButton>
#include <QSplitter>
#include <QTableView>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>

namespace tsr::studio {

namespace {

QString num(double v) { return QString::number(v, 'g', 5); }

QString duration(const store::RunInfo& r) {
  double end = r.endTime > 0 ? r.endTime : static_cast<double>(QDateTime::currentSecsSinceEpoch());
  int s = static_cast<int>(end - r.startTime);
  return s >= 3600 ? QString("%1h%2m").arg(s / 3600).arg(s % 3600 / 60, 2, 10, QChar('0'))
                   : QString("%1m%2s").arg(s / 60).arg(s % 60, 2, 10, QChar('0'));
}

}  // namespace

RunsTableModel::RunsTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunsTableModel::setRuns(std::vector<inspect::RunRow> runs) {
  std::set<std::string> metrics, params;
  for (const auto& r : runs) {
    for (const auto& [k, v] : r.metrics) metrics.insert(k);
    for (const auto& [k, v] : r.params) params.insert(k);
  }
  QStringList mk, pk;
  // loss first: it is what people look at.
  for (const char* first : {"loss", "val_loss"})
    if (metrics.erase(first)) mk << first;
  for (const auto& k : metrics) mk << QString::fromStdString(k);
  for (const auto& k : params) pk << QString::fromStdString(k);
  if (mk != m_metricKeys || pk != m_paramKeys || runs.size() != m_runs.size()) {
    beginResetModel();
    m_runs = std::move(runs);
    m_metricKeys = mk;
    m_paramKeys = pk;
    endResetModel();
  } else {
    m_runs = std::move(runs);
    if (!m_runs.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, columnCount() - 1));
  }
}

int RunsTableModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(m_runs.size());
}

int RunsTableModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kFixed + static_cast<int>(m_metricKeys.size() + m_paramKeys.size());
}

QVariant RunsTableModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const inspect::RunRow& r = m_runs[static_cast<size_t>(index.row())];
  int c = index.column();
  if (role == Qt::UserRole) return static_cast<qlonglong>(r.info.id);
  if (role == Qt::ForegroundRole && c == 2) {
    switch (r.info.status) {
      case store::RunStatus::Failed:
      case store::RunStatus::Diverged: return QColor(208, 64, 64);
      case store::RunStatus::Running: return QColor(40, 140, 220);
      case store::RunStatus::Stopped: return QColor(200, 140, 30);
      default: return {};
    }
  }
  if (role == Qt::ToolTipRole && c == 2) return QString::fromStdString(r.info.message);
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (c) {
    case 0: return static_cast<qlonglong>(r.info.id);
    case 1: return QString::fromStdString(r.info.name);
    case 2: {
      QString s = store::runStatusName(r.info.status);
      if ((r.info.status == store::RunStatus::Failed || r.info.status == store::RunStatus::Diverged) &&
          !r.info.message.empty())
        s += ": " + QString::fromStdString(r.info.message);
      return s;
    }
    case 3: return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.info.startTime)).toString("yyyy-MM-dd HH:mm");
    case 4: return duration(r.info);
  }
  c -= kFixed;
  if (c < m_metricKeys.size()) {
    auto it = r.metrics.find(m_metricKeys[c].toStdString());
    if (it == r.metrics.end()) return {};
    const inspect::MetricStats& s = it->second;
    if (role == Qt::ToolTipRole) return QString("%1 points, last at step %2").arg(s.points).arg(s.lastStep);
    return QString("%1 (min %2, max %3)").arg(num(s.latest), num(s.min), num(s.max));
  }
  c -= static_cast<int>(m_metricKeys.size());
  auto it = r.params.find(m_paramKeys[c].toStdString());
  return it == r.params.end() ? QVariant() : QString::fromStdString(it->second);
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kFixedNames[] = {"ID", "Name", "Status", "Started", "Duration"};
  if (section < kFixed) return tr(kFixedNames[section]);
  section -= kFixed;
  if (section < m_metricKeys.size()) return m_metricKeys[section];
  section -= static_cast<int>(m_metricKeys.size());
  return section < m_paramKeys.size() ? QVariant(m_paramKeys[section]) : QVariant();
}

RunsPanel::RunsPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_info(new QLabel),
      m_table(new QTableView),
      m_model(new RunsTableModel(this)),
      m_compare(new QTextBrowser),
      m_timer(new QTimer(this)) {
  setObjectName("runsPanel");
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setStretchLastSection(true);
  m_table->setSortingEnabled(false);
  auto* compare = new QPushButton(tr("Compare selected"));
  auto* bar = new QHBoxLayout;
  bar->addWidget(m_info, 1);
  bar->addWidget(compare);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_table);
  split->addWidget(m_compare);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  m_compare->setPlaceholderText(tr("Select two or more runs and press Compare."));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(bar);
  layout->addWidget(split, 1);
  connect(compare, &QPushButton::clicked, this, &RunsPanel::compareSelected);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { emit selectedRunsChanged(selectedRuns()); });
  connect(m_session, &Session::projectOpened, this, [this] { setDatabase(m_session->runsDbPath()); });
  connect(m_timer, &QTimer::timeout, this, &RunsPanel::refresh);
  m_timer->start(2000);
}

void RunsPanel::setDatabase(const QString& path) {
  m_dbPath = path;
  m_reader.reset();
  m_model->setRuns({});
  refresh();
}

void RunsPanel::refresh() {
  if (m_dbPath.isEmpty()) return;
  if (!m_reader) {
    auto r = inspect::RunsReader::open(m_dbPath.toStdString());
    if (!r.ok()) {
      m_info->setText(tr("No runs yet: press Run ▶ to train (%1).").arg(QFileInfo(m_dbPath).fileName()));
      return;
    }
    m_reader.emplace(std::move(r).value());
  }
  auto runs = m_reader->runs();
  if (!runs.ok()) {
    m_info->setText(QString::fromStdString(runs.error().message));
    return;
  }
  QList<qint64> selected = selectedRuns();
  size_t n = runs->size();
  m_model->setRuns(std::move(runs).value());
  selectRuns(selected);
  m_info->setText(tr("%n run(s) in %1", "", static_cast<int>(n)).arg(m_dbPath));
}

QList<qint64> RunsPanel::selectedRuns() const {
  QList<qint64> ids;
  for (const QModelIndex& i : m_table->selectionModel()->selectedRows()) ids << i.data(Qt::UserRole).toLongLong();
  std::sort(ids.begin(), ids.end());
  return ids;
}

void RunsPanel::selectRuns(const QList<qint64>& ids) {
  QItemSelection sel;
  for (int r = 0; r < m_model->rowCount(); ++r)
    if (ids.contains(m_model->index(r, 0).data(Qt::UserRole).toLongLong()))
      sel.select(m_model->index(r, 0), m_model->index(r, m_model->columnCount() - 1));
  QSignalBlocker block(m_table->selectionModel());
  m_table->selectionModel()->select(sel, QItemSelectionModel::ClearAndSelect);
  m_table->viewport()->update();
}

void RunsPanel::compareSelected() {
  QList<qint64> ids = selectedRuns();
  std::vector<const inspect::RunRow*> rows;
  for (const auto& r : m_model->runs())
    if (ids.contains(r.info.id)) rows.push_back(&r);
  if (rows.empty()) {
    m_compare->setHtml(tr("<p>Select runs in the table first.</p>"));
    return;
  }
  std::set<std::string> pkeys, mkeys;
  for (const auto* r : rows) {
    for (const auto& [k, v] : r->params) pkeys.insert(k);
    for (const auto& [k, v] : r->metrics) mkeys.insert(k);
  }
  QString h = "<table border=1 cellspacing=0 cellpadding=3><tr><th></th>";
  for (const auto* r : rows) h += QString("<th>run %1<br>%2</th>").arg(r->info.id).arg(QString::fromStdString(r->info.name).toHtmlEscaped());
  h += "</tr>";
  auto row = [&](const QString& name, const std::vector<QString>& cells) {
    bool differs = false;
    for (const QString& c : cells) differs |= c != cells.front();
    h += QString("<tr%1><td><b>%2</b></td>").arg(differs ? " style=\"background-color:#fff1c4;color:#000\"" : "", name.toHtmlEscaped());
    for (const QString& c : cells) h += "<td>" + c.toHtmlEscaped() + "</td>";
    h += "</tr>";
  };
  std::vector<QString> cells;
  for (const auto* r : rows) cells.push_back(store::runStatusName(r->info.status));
  row("status", cells);
  for (const auto& k : mkeys) {
    cells.clear();
    for (const auto* r : rows) {
      auto it = r->metrics.find(k);
      cells.push_back(it == r->metrics.end() ? "" : QString("%1 (min %2)").arg(num(it->second.latest), num(it->second.min)));
    }
    row(QString::fromStdString(k), cells);
  }
  for (const auto& k : pkeys) {
    cells.clear();
    for (const auto* r : rows) {
      auto it = r->params.find(k);
      cells.push_back(it == r->params.end() ? "" : QString::fromStdString(it->second));
    }
    row(QString::fromStdString(k), cells);
  }
  h += "</table>";
  m_compare->setHtml(h);
}

QString RunsPanel::comparisonText() const { return m_compare->toPlainText(); }

}  // namespace tsr::studio
