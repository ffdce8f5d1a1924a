#include "views/runs_panel.h"

#include <algorithm>
#include <set>

#include <QCheckBox>
#include <QComboBox>
#include <QDateTime>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalBlocker>
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

void RunsTableModel::setFilter(const QString& tag, bool showArchived) {
  m_tag = tag;
  m_showArchived = showArchived;
}

void RunsTableModel::sort(int column, Qt::SortOrder order) {
  m_sortColumn = column;
  m_sortOrder = order;
  emit layoutAboutToBeChanged();
  applySort();
  emit layoutChanged();
}

// Numbers sort as numbers (a metric by its latest value), text as text; empty cells last either way.
void RunsTableModel::applySort() {
  const int c = m_sortColumn;
  auto key = [&](const inspect::RunRow& r) -> std::pair<int, QVariant> {
    const int m = c - kFixed;
    if (c == 0) return {0, static_cast<double>(r.info.id)};
    if (c == 4) return {0, r.info.startTime};
    if (c == 5) return {0, (r.info.endTime > 0 ? r.info.endTime : QDateTime::currentSecsSinceEpoch()) - r.info.startTime};
    if (m >= 0 && m < m_metricKeys.size()) {
      auto it = r.metrics.find(m_metricKeys[m].toStdString());
      return it == r.metrics.end() ? std::pair<int, QVariant>{1, {}} : std::pair<int, QVariant>{0, it->second.latest};
    }
    if (m >= m_metricKeys.size()) {
      auto it = r.params.find(m_paramKeys[m - static_cast<int>(m_metricKeys.size())].toStdString());
      if (it == r.params.end()) return {1, {}};
      bool isNumber = false;
      const double v = QString::fromStdString(it->second).toDouble(&isNumber);
      return isNumber ? std::pair<int, QVariant>{0, v} : std::pair<int, QVariant>{0, QString::fromStdString(it->second)};
    }
    if (c == 1) return {0, QString::fromStdString(r.info.name)};
    if (c == 2) return {r.info.tags.empty(), QString::fromStdString(r.info.tags.empty() ? "" : r.info.tags.front())};
    return {0, QString(store::runStatusName(r.info.status))};
  };
  std::stable_sort(m_runs.begin(), m_runs.end(), [&](const inspect::RunRow& a, const inspect::RunRow& b) {
    auto ka = key(a), kb = key(b);
    if (ka.first != kb.first) return ka.first < kb.first;  // empty cells last, in both orders
    const int cmp = QVariant::compare(ka.second, kb.second) == QPartialOrdering::Less      ? -1
                    : QVariant::compare(ka.second, kb.second) == QPartialOrdering::Greater ? 1
                                                                                          : 0;
    return m_sortOrder == Qt::AscendingOrder ? cmp < 0 : cmp > 0;
  });
}

void RunsTableModel::setRuns(std::vector<inspect::RunRow> runs) {
  std::set<std::string> tags;
  for (const auto& r : runs)
    for (const auto& t : r.info.tags) tags.insert(t);
  m_allTags.clear();
  for (const auto& t : tags) m_allTags << QString::fromStdString(t);
  std::erase_if(runs, [&](const inspect::RunRow& r) {
    const bool tagged = m_tag.isEmpty() || std::find(r.info.tags.begin(), r.info.tags.end(), m_tag.toStdString()) != r.info.tags.end();
    return !tagged || (r.info.archived && !m_showArchived);
  });
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
    applySort();
    endResetModel();
  } else {
    emit layoutAboutToBeChanged();
    m_runs = std::move(runs);
    applySort();
    emit layoutChanged();
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
  if (role == Qt::ForegroundRole && c == 3) {
    switch (r.info.status) {
      case store::RunStatus::Failed:
      case store::RunStatus::Crashed:
      case store::RunStatus::Diverged: return QColor(208, 64, 64);
      case store::RunStatus::Running: return QColor(40, 140, 220);
      case store::RunStatus::Stopped: return QColor(200, 140, 30);
      default: return {};
    }
  }
  if (role == Qt::ToolTipRole && c == 3) return QString::fromStdString(r.info.message);
  if (role == Qt::ToolTipRole && c == 1 && !r.info.notes.empty()) return QString::fromStdString(r.info.notes);
  if (role != Qt::DisplayRole && role != Qt::ToolTipRole) return {};
  switch (c) {
    case 0: return static_cast<qlonglong>(r.info.id);
    case 1: return QString::fromStdString(r.info.name) + (r.info.archived ? tr(" (archived)") : QString());
    case 2: {
      QStringList tags;
      for (const auto& t : r.info.tags) tags << QString::fromStdString(t);
      return tags.join(", ");
    }
    case 3: {
      QString s = store::runStatusName(r.info.status);
      if ((r.info.status == store::RunStatus::Failed || r.info.status == store::RunStatus::Diverged ||
           r.info.status == store::RunStatus::Crashed) &&
          !r.info.message.empty())
        s += ": " + QString::fromStdString(r.info.message);
      return s;
    }
    case 4: return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(r.info.startTime)).toString("yyyy-MM-dd HH:mm");
    case 5: return duration(r.info);
  }
  c -= kFixed;
  if (c < m_metricKeys.size()) {
    auto it = r.metrics.find(m_metricKeys[c].toStdString());
    if (it == r.metrics.end()) return {};
    const inspect::MetricStats& s = it->second;
    // The latest value, as MLflow's table shows it; "2.9647 (min 2.5628, max 6.2725)" did not fit a column and
    // was cut to "2.9647 (min 2.5628, max …" on two lines. Its range is in the tooltip.
    if (role == Qt::ToolTipRole)
      return QString("%1 %2 at step %3 (min %4, max %5; %6 points)")
          .arg(m_metricKeys[c], num(s.latest)).arg(s.lastStep).arg(num(s.min), num(s.max)).arg(s.points);
    return num(s.latest);
  }
  c -= static_cast<int>(m_metricKeys.size());
  auto it = r.params.find(m_paramKeys[c].toStdString());
  return it == r.params.end() ? QVariant() : QString::fromStdString(it->second);
}

QVariant RunsTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* kFixedNames[] = {"ID", "Name", "Tags", "Status", "Started", "Duration"};
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
      m_editLine(new QLabel),
      m_table(new QTableView),
      m_model(new RunsTableModel(this)),
      m_compare(new QTextBrowser),
      m_timer(new QTimer(this)),
      m_poller(new RunsPoller),
      m_pollerThread(m_poller, "runsReader"),
      m_tagFilter(new QComboBox),
      m_showArchived(new QCheckBox(tr("Archived"))) {
  setObjectName("runsPanel");
  connect(m_poller, &RunsPoller::done, this, &RunsPanel::onRead);
  connect(m_poller, &RunsPoller::profilesDiffed, this, &RunsPanel::onProfilesDiffed);
  connect(m_poller, &RunsPoller::edited, this, &RunsPanel::onEdited);
  m_table->setModel(m_model);
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::ExtendedSelection);
  m_table->verticalHeader()->hide();
  m_table->horizontalHeader()->setStretchLastSection(true);
  // One line per run: a date or a status wrapped onto a second line doubled the rows.
  m_table->setWordWrap(false);
  connect(m_model, &QAbstractItemModel::modelReset, m_table, [this] { m_table->resizeColumnsToContents(); });
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(0, Qt::AscendingOrder);
  m_table->setContextMenuPolicy(Qt::CustomContextMenu);
  connect(m_table, &QWidget::customContextMenuRequested, this, &RunsPanel::showMenu);
  m_tagFilter->addItem(tr("All runs"), QString());
  m_tagFilter->setToolTip(tr("Only the runs with this tag (a sweep's runs carry sweep=NAME); Ctrl+A selects them all"));
  m_tagFilter->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  m_showArchived->setToolTip(tr("Show archived runs too"));
  auto filterChanged = [this] {
    m_model->setFilter(m_tagFilter->currentData().toString(), m_showArchived->isChecked());
    showRuns();  // the last read, under the new filter
  };
  connect(m_tagFilter, &QComboBox::activated, this, filterChanged);
  connect(m_showArchived, &QCheckBox::toggled, this, filterChanged);
  auto* compare = new QPushButton(tr("Compare selected"));
  auto* bar = new QHBoxLayout;
  bar->addWidget(m_info, 1);
  bar->addWidget(m_tagFilter);
  bar->addWidget(m_showArchived);
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
  m_editLine->setWordWrap(true);
  m_editLine->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_editLine->hide();
  layout->addWidget(m_editLine);
  layout->addWidget(split, 1);
  connect(compare, &QPushButton::clicked, this, &RunsPanel::compareSelected);
  connect(m_table->selectionModel(), &QItemSelectionModel::selectionChanged, this,
          [this] { emit selectedRunsChanged(selectedRuns()); });
  connect(m_session, &Session::projectOpened, this, [this] { setDatabase(m_session->runsDbPath()); });
  connect(m_session, &Session::projectClosed, this, [this] {
    setDatabase(QString());
    m_info->setText(tr("No runs: the project did not open."));
  });
  connect(m_timer, &QTimer::timeout, this, &RunsPanel::refresh);
  m_timer->start(2000);
}

void RunsPanel::setPollInterval(int msec) {
  if (msec > 0) m_timer->start(msec);
  else m_timer->stop();
}

void RunsPanel::setDatabase(const QString& path) {
  m_dbPath = path;
  m_reads.nextGeneration();
  ++m_editRequest;
  m_editing = false;
  m_editLine->clear();
  m_editLine->hide();
  m_allRuns.clear();
  m_model->setRuns({});
  if (path.isEmpty()) m_info->setText(tr("No project: no runs."));
  refresh();
}

void RunsPanel::refresh() {
  if (m_dbPath.isEmpty() || !m_reads.ask()) return;
  QMetaObject::invokeMethod(m_poller, [poller = m_poller, path = m_dbPath, generation = m_reads.generation()] {
    poller->read(path, generation);
  });
}

void RunsPanel::onRead(const RunsReadPtr& read) {
  bool current = false;
  const bool again = m_reads.answered(read->generation, current);
  if (current && !read->opened) {
    m_info->setText(tr("No runs yet: press Run ▶ to train (%1).").arg(QFileInfo(m_dbPath).fileName()));
  } else if (current && !read->error.isEmpty()) {
    m_info->setText(read->error);
  } else if (current && read->changed) {
    m_allRuns = std::move(read->runs);
    showRuns();
  }
  if (again) {
    refresh();
    return;
  }
  emit refreshed(read->changed);
}

void RunsPanel::showRuns() {
  const QList<qint64> selected = selectedRuns();
  const QModelIndex currentIndex = m_table->currentIndex();
  const qint64 currentRun = currentIndex.isValid() ? currentIndex.data(Qt::UserRole).toLongLong() : 0;
  const int currentColumn = currentIndex.column();
  const int vscroll = m_table->verticalScrollBar()->value();
  const int hscroll = m_table->horizontalScrollBar()->value();
  const size_t total = m_allRuns.size();
  m_model->setRuns(m_allRuns);
  selectRuns(selected);
  if (currentRun > 0) {
    for (int r = 0; r < m_model->rowCount(); ++r)
      if (m_model->index(r, 0).data(Qt::UserRole).toLongLong() == currentRun) {
        m_table->selectionModel()->setCurrentIndex(m_model->index(r, std::max(0, currentColumn)),
                                                   QItemSelectionModel::NoUpdate);
        break;
      }
  }
  // A reset model scrolls the view back to the top: the rows are laid out now, and the view put back.
  m_table->doItemsLayout();
  m_table->verticalScrollBar()->setValue(vscroll);
  m_table->horizontalScrollBar()->setValue(hscroll);
  // The filter's list follows the tags the runs have.
  const QString current = m_tagFilter->currentData().toString();
  QStringList items;
  for (int i = 1; i < m_tagFilter->count(); ++i) items << m_tagFilter->itemData(i).toString();
  if (items != m_model->allTags()) {
    QSignalBlocker block(m_tagFilter);
    while (m_tagFilter->count() > 1) m_tagFilter->removeItem(1);
    for (const QString& t : m_model->allTags()) m_tagFilter->addItem("#" + t, t);
    m_tagFilter->setCurrentIndex(std::max(0, m_tagFilter->findData(current)));
  }
  const int shown = m_model->rowCount();
  m_info->setText(static_cast<size_t>(shown) == total ? tr("%n run(s) in %1", "", shown).arg(m_dbPath)
                                                      : tr("%1 of %2 runs in %3").arg(shown).arg(total).arg(m_dbPath));
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
  ++m_compareRequest;
  m_comparing = false;
  QList<qint64> ids = selectedRuns();
  std::vector<const inspect::RunRow*> rows;
  for (const auto& r : m_model->runs())
    if (ids.contains(r.info.id)) rows.push_back(&r);
  if (rows.empty()) {
    m_compare->setHtml(tr("<p>Select runs in the table first.</p>"));
    emit compared();
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
  m_compareHtml = h;
  if (rows.size() != 2) {
    m_compare->setHtml(h);
    emit compared();
    return;
  }
  // The profiles (every kernel event of two runs) are read on the reader thread; the runs show meanwhile.
  m_comparing = true;
  m_compare->setHtml(h + tr("<p>Reading the profiles…</p>"));
  QMetaObject::invokeMethod(m_poller, [poller = m_poller, path = m_dbPath, request = m_compareRequest,
                                       a = rows[0]->info.id, b = rows[1]->info.id] {
    poller->diffProfiles(path, request, a, b);
  });
}

void RunsPanel::onProfilesDiffed(const ProfileDiffReadPtr& diff) {
  if (diff->request != m_compareRequest) return;  // another comparison was asked since
  m_comparing = false;
  m_compare->setHtml(m_compareHtml + profileDiffHtml(diff->runA, diff->runB, diff->diff));
  emit compared();
}

QString RunsPanel::profileDiffHtml(qint64 runA, qint64 runB, const Result<train::ProfileDiff>& d) {
  if (!d.ok()) return tr("<p><b>Profiles</b>: %1</p>").arg(QString::fromStdString(d.error().message).toHtmlEscaped());
  auto ms = [](double ns) { return QString::number(ns / 1e6, 'f', 3); };
  auto change = [](double a, double b) {
    return a > 0 ? QString("%1%2%").arg(b >= a ? "+" : "").arg(100.0 * (b - a) / a, 0, 'f', 1) : QString("new");
  };
  QString h = tr("<h4>Profiles: run %1 (A) against run %2 (B)</h4><p>Kernel time per step %3 ms &rarr; %4 ms (%5)%6. "
                 "Kernels are matched through the graph nodes they ran; a kernel's time is split evenly among its "
                 "nodes.</p>")
                  .arg(runA)
                  .arg(runB)
                  .arg(ms(d->a.stepNs), ms(d->b.stepNs), change(d->a.stepNs, d->b.stepNs),
                       d->sameGraph ? tr("; the same nodes and ops") : tr("; different graphs"));
  const size_t top = 15;
  h += tr("<table border=1 cellspacing=0 cellpadding=3><tr><th>A ms</th><th>B ms</th><th>change</th><th>kernel A</th>"
          "<th>kernel B</th></tr>");
  for (size_t i = 0; i < std::min(top, d->kernels.size()); ++i) {
    const auto& k = d->kernels[i];
    h += QString("<tr><td align=right>%1</td><td align=right>%2</td><td align=right>%3</td><td>%4</td><td>%5</td></tr>")
             .arg(ms(k.nsA), ms(k.nsB), change(k.nsA, k.nsB), QString::fromStdString(k.nameA).toHtmlEscaped(),
                  QString::fromStdString(k.nameB).toHtmlEscaped());
  }
  h += tr("</table><br><table border=1 cellspacing=0 cellpadding=3><tr><th>A ms</th><th>B ms</th><th>change</th>"
          "<th>graph node (module, op, which)</th><th>node A / B</th></tr>");
  for (size_t i = 0; i < std::min(top, d->nodes.size()); ++i) {
    const auto& n = d->nodes[i];
    h += QString("<tr><td align=right>%1</td><td align=right>%2</td><td align=right>%3</td><td>%4 %5 #%6</td>"
                 "<td>%7 / %8</td></tr>")
             .arg(ms(n.nsA), ms(n.nsB), change(n.nsA, n.nsB),
                  QString::fromStdString(n.module.empty() ? "(top)" : n.module).toHtmlEscaped(),
                  QString::fromStdString(n.op))
             .arg(n.occurrence)
             .arg(n.nodeA >= 0 ? QString::number(n.nodeA) : QString("-"), n.nodeB >= 0 ? QString::number(n.nodeB) : QString("-"));
  }
  h += "</table>";
  return h;
}

QString RunsPanel::comparisonText() const { return m_compare->toPlainText(); }

qint64 RunsPanel::editableRun() {
  if (m_editing) {
    m_error = tr("another edit is under way");
    return 0;
  }
  const QList<qint64> ids = selectedRuns();
  if (ids.size() != 1) {
    m_error = tr("select one run");
    return 0;
  }
  return ids.front();
}

bool RunsPanel::renameSelected(const QString& name) {
  RunEdit e;
  e.kind = RunEdit::Kind::Rename;
  e.text = name;
  return sendEdit(std::move(e));
}

bool RunsPanel::setTagsOfSelected(const QStringList& tags) {
  RunEdit e;
  e.kind = RunEdit::Kind::Tags;
  e.tags = tags;
  return sendEdit(std::move(e));
}

bool RunsPanel::setNotesOfSelected(const QString& notes) {
  RunEdit e;
  e.kind = RunEdit::Kind::Notes;
  e.text = notes;
  return sendEdit(std::move(e));
}

bool RunsPanel::archiveSelected(bool archived) {
  RunEdit e;
  e.kind = RunEdit::Kind::Archive;
  e.archived = archived;
  return sendEdit(std::move(e));
}

bool RunsPanel::deleteSelected() {
  RunEdit e;
  e.kind = RunEdit::Kind::DescribeDeletion;
  return sendEdit(std::move(e));
}

namespace {

// What the panel's line says while `e` is under way, and what failed when it did.
QString editDoing(const RunEdit& e) {
  switch (e.kind) {
    case RunEdit::Kind::Rename: return RunsPanel::tr("Renaming run %1…").arg(e.run);
    case RunEdit::Kind::Tags: return RunsPanel::tr("Setting the tags of run %1…").arg(e.run);
    case RunEdit::Kind::Notes: return RunsPanel::tr("Saving the notes of run %1…").arg(e.run);
    case RunEdit::Kind::Archive:
      return (e.archived ? RunsPanel::tr("Archiving run %1…") : RunsPanel::tr("Unarchiving run %1…")).arg(e.run);
    case RunEdit::Kind::DescribeDeletion: return RunsPanel::tr("Reading what deleting run %1 removes…").arg(e.run);
    case RunEdit::Kind::Delete: return RunsPanel::tr("Deleting run %1…").arg(e.run);
  }
  return {};
}

QString editFailure(const RunEdit& e, const QString& error) {
  QString what;
  switch (e.kind) {
    case RunEdit::Kind::Rename: what = RunsPanel::tr("Run %1 was not renamed"); break;
    case RunEdit::Kind::Tags: what = RunsPanel::tr("The tags of run %1 were not changed"); break;
    case RunEdit::Kind::Notes: what = RunsPanel::tr("The notes of run %1 were not saved"); break;
    case RunEdit::Kind::Archive:
      what = e.archived ? RunsPanel::tr("Run %1 was not archived") : RunsPanel::tr("Run %1 was not unarchived");
      break;
    case RunEdit::Kind::DescribeDeletion:
    case RunEdit::Kind::Delete: what = RunsPanel::tr("Run %1 was not deleted"); break;
  }
  return QString("%1: %2").arg(what.arg(e.run), error);
}

}  // namespace

bool RunsPanel::sendEdit(RunEdit edit) {
  // The deletion's second step is sent while its first one holds the turn.
  if (edit.kind != RunEdit::Kind::Delete) {
    edit.run = editableRun();
    if (edit.run <= 0) return false;
  }
  edit.path = m_dbPath;
  edit.request = ++m_editRequest;
  m_editing = true;
  m_error.clear();
  m_editLine->setStyleSheet(QString());
  m_editLine->setText(editDoing(edit));
  m_editLine->show();
  QMetaObject::invokeMethod(m_poller, [poller = m_poller, edit = std::move(edit)] { poller->edit(edit); });
  return true;
}

void RunsPanel::onEdited(const RunEditDonePtr& done) {
  const RunEdit& e = done->edit;
  if (!m_editing || e.request != m_editRequest) return;  // sent before the store changed
  if (!done->error.isEmpty()) {
    editFailed(e, done->error);
    return;
  }
  if (e.kind == RunEdit::Kind::DescribeDeletion) {
    confirmDeletion(e, done->description);
    return;
  }
  m_editing = false;
  m_error.clear();  // a refusal while this edit was under way
  m_editLine->clear();
  m_editLine->hide();
  refresh();  // the edit's commit is seen by the poller's probe: the store is read again
  emit edited(true);
}

void RunsPanel::confirmDeletion(const RunEdit& describe, const QString& what) {
  const QString question = tr("Delete %1? This cannot be undone.").arg(what);
  m_editLine->setText(tr("Delete run %1? Waiting for the answer.").arg(describe.run));
  const quint64 request = m_editRequest;
  const bool yes = m_confirm ? m_confirm(question)
                             : QMessageBox::question(this, tr("Delete Run"), question) == QMessageBox::Yes;
  if (request != m_editRequest) return;  // another store was opened while the question was open
  if (!yes) {
    m_editing = false;
    m_error = tr("kept");
    m_editLine->clear();
    m_editLine->hide();
    emit edited(false);
    return;
  }
  RunEdit deletion = describe;
  deletion.kind = RunEdit::Kind::Delete;
  sendEdit(std::move(deletion));
}

void RunsPanel::editFailed(const RunEdit& edit, const QString& error) {
  m_editing = false;
  m_error = error;
  // Nothing is read again: the table shows the store as it was, which a failed edit left alone.
  m_editLine->setText(editFailure(edit, error));
  m_editLine->setStyleSheet("color: #d04040");
  m_editLine->show();
  m_session->log("error", m_error);
  emit edited(false);
}

QString RunsPanel::editStatus() const { return m_editLine->text(); }

void RunsPanel::showMenu(const QPoint& pos) {
  const QList<qint64> ids = selectedRuns();
  if (ids.size() != 1) return;
  const inspect::RunRow* row = nullptr;
  for (const auto& r : m_model->runs())
    if (r.info.id == ids.front()) row = &r;
  if (!row) return;
  QMenu menu(this);
  menu.addAction(tr("Rename…"), this, [this, row] {
    bool ok = false;
    QString name = QInputDialog::getText(this, tr("Rename Run"), tr("Name:"), QLineEdit::Normal,
                                         QString::fromStdString(row->info.name), &ok);
    if (ok) renameSelected(name);
  });
  menu.addAction(tr("Tags…"), this, [this, row] {
    QStringList tags;
    for (const auto& t : row->info.tags) tags << QString::fromStdString(t);
    bool ok = false;
    QString text = QInputDialog::getText(this, tr("Run Tags"), tr("Tags, separated by commas:"), QLineEdit::Normal,
                                         tags.join(", "), &ok);
    if (ok) setTagsOfSelected(text.split(',', Qt::SkipEmptyParts));
  });
  menu.addAction(tr("Notes…"), this, [this, row] {
    bool ok = false;
    QString text = QInputDialog::getMultiLineText(this, tr("Run Notes"), tr("Notes:"),
                                                  QString::fromStdString(row->info.notes), &ok);
    if (ok) setNotesOfSelected(text);
  });
  menu.addAction(row->info.archived ? tr("Unarchive") : tr("Archive"), this,
                 [this, archived = row->info.archived] { archiveSelected(!archived); });
  menu.addSeparator();
  menu.addAction(tr("Delete…"), this, [this] { deleteSelected(); });
  // One edit at a time: the one under way is on the panel's line.
  if (m_editing)
    for (QAction* a : menu.actions()) a->setEnabled(false);
  menu.exec(m_table->viewport()->mapToGlobal(pos));
}

}  // namespace tsr::studio
