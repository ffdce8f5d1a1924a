#include "views/graph_search.h"

#include <QEvent>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QSignalBlocker>
#include <QTimer>
#include <QToolButton>
#include <QTreeWidget>

namespace tsr::studio {

GraphSearch::GraphSearch(QWidget* parent)
    : QWidget(parent),
      m_box(new QLineEdit),
      m_status(new QLabel),
      m_previous(new QToolButton),
      m_next(new QToolButton),
      m_list(new QToolButton),
      m_results(new QTreeWidget),
      m_timer(new QTimer(this)) {
  m_box->setObjectName("graphSearch");
  m_box->setPlaceholderText(tr("Search ops, %values, shapes, modules (regex)"));
  m_box->setToolTip(tr("Enter: next match · Shift+Enter: previous (F3 / Shift+F3 anywhere)"));
  m_box->setClearButtonEnabled(true);
  m_box->installEventFilter(this);
  m_status->setObjectName("graphSearchStatus");
  m_previous->setObjectName("graphSearchPrevious");
  m_previous->setArrowType(Qt::UpArrow);
  m_previous->setToolTip(tr("Previous match (Shift+Enter, Shift+F3)"));
  m_previous->setAutoRaise(true);
  m_next->setObjectName("graphSearchNext");
  m_next->setArrowType(Qt::DownArrow);
  m_next->setToolTip(tr("Next match (Enter, F3)"));
  m_next->setAutoRaise(true);
  m_list->setObjectName("graphSearchList");
  m_list->setText(tr("List"));
  m_list->setToolTip(tr("Show the matches as a list; a row selects its node"));
  m_list->setCheckable(true);
  m_list->setChecked(true);
  m_list->setAutoRaise(true);

  m_results->setObjectName("graphSearchResults");
  m_results->setColumnCount(4);
  m_results->setHeaderLabels({tr("Node"), tr("Op"), tr("Module"), tr("Shape")});
  m_results->setRootIsDecorated(false);
  m_results->setUniformRowHeights(true);
  m_results->setAlternatingRowColors(true);
  m_results->setSelectionMode(QAbstractItemView::SingleSelection);
  m_results->header()->setSectionResizeMode(QHeaderView::Interactive);
  m_results->header()->setStretchLastSection(true);
  m_results->setVisible(false);

  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  layout->addWidget(m_box, 1);
  layout->addWidget(m_status);
  layout->addWidget(m_previous);
  layout->addWidget(m_next);
  layout->addWidget(m_list);

  m_timer->setSingleShot(true);
  m_timer->setInterval(250);
  connect(m_box, &QLineEdit::textChanged, m_timer, qOverload<>(&QTimer::start));
  connect(m_timer, &QTimer::timeout, this, [this] { emit patternEdited(pattern()); });
  connect(m_previous, &QToolButton::clicked, this, &GraphSearch::previous);
  connect(m_next, &QToolButton::clicked, this, &GraphSearch::next);
  connect(m_list, &QToolButton::toggled, this, &GraphSearch::updateResultsShown);
  auto pick = [this](QTreeWidgetItem* item) {
    if (item) choose(m_results->indexOfTopLevelItem(item));
  };
  connect(m_results, &QTreeWidget::itemClicked, this, pick);
  connect(m_results, &QTreeWidget::itemActivated, this, pick);
  updateStatus();
}

QString GraphSearch::pattern() const { return m_box->text(); }

void GraphSearch::setPattern(const QString& pattern) {
  if (m_box->text() == pattern) return;
  QSignalBlocker block(m_box);
  m_box->setText(pattern);
}

void GraphSearch::setMatches(QVector<Match> matches, const QString& error) {
  m_matches = std::move(matches);
  m_error = error;
  m_current = -1;
  QList<QTreeWidgetItem*> items;
  items.reserve(m_matches.size());
  for (const Match& m : std::as_const(m_matches)) {
    auto* item = new QTreeWidgetItem({m.name, m.op, m.module, m.shape});
    item->setToolTip(2, m.module);
    items << item;
  }
  QSignalBlocker block(m_results);
  m_results->clear();
  m_results->addTopLevelItems(items);
  if (!items.isEmpty()) {
    m_results->resizeColumnToContents(0);
    m_results->resizeColumnToContents(1);
  }
  updateResultsShown();
  updateStatus();
}

QString GraphSearch::status() const { return m_status->text(); }

void GraphSearch::next() {
  // A pattern typed and not yet searched is searched first, so Enter right after typing finds its matches.
  if (m_timer->isActive()) {
    m_timer->stop();
    emit patternEdited(pattern());
  }
  if (m_matches.isEmpty()) return;
  choose(m_current < 0 ? 0 : (m_current + 1) % static_cast<int>(m_matches.size()));
}

void GraphSearch::previous() {
  if (m_timer->isActive()) {
    m_timer->stop();
    emit patternEdited(pattern());
  }
  if (m_matches.isEmpty()) return;
  const int n = static_cast<int>(m_matches.size());
  choose(m_current <= 0 ? n - 1 : m_current - 1);
}

void GraphSearch::choose(int index) {
  if (index < 0 || index >= static_cast<int>(m_matches.size())) return;
  m_current = index;
  {
    QSignalBlocker block(m_results);
    QTreeWidgetItem* item = m_results->topLevelItem(index);
    m_results->setCurrentItem(item);
    m_results->scrollToItem(item);
  }
  updateStatus();
  emit matchChosen(m_matches[index].node);
}

void GraphSearch::updateStatus() {
  QString text;
  if (!m_error.isEmpty()) {
    text = tr("invalid regex");
  } else if (!pattern().isEmpty()) {
    const int n = static_cast<int>(m_matches.size());
    text = n == 0   ? tr("no match")
           : m_current >= 0 ? tr("%1 of %2").arg(m_current + 1).arg(n)
           : n == 1      ? tr("1 match")
                         : tr("%1 matches").arg(n);
  }
  m_status->setText(text);
  m_status->setToolTip(m_error);
  m_previous->setEnabled(!m_matches.isEmpty());
  m_next->setEnabled(!m_matches.isEmpty());
}

void GraphSearch::updateResultsShown() {
  m_results->setVisible(m_list->isChecked() && !pattern().isEmpty() && m_error.isEmpty());
}

bool GraphSearch::eventFilter(QObject* watched, QEvent* event) {
  if (watched == m_box && event->type() == QEvent::KeyPress) {
    auto* key = static_cast<QKeyEvent*>(event);
    if (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) {
      if (key->modifiers() & Qt::ShiftModifier)
        previous();
      else
        next();
      return true;
    }
  }
  return QWidget::eventFilter(watched, event);
}

}  // namespace tsr::studio
