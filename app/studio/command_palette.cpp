#include "app/studio/command_palette.h"

#include <algorithm>

#include <QAction>
#include <QKeyEvent>
#include <QLineEdit>
#include <QListWidget>
#include <QVBoxLayout>

namespace tsr::studio {

int fuzzyScore(const QString& pattern, const QString& text) {
  if (pattern.isEmpty()) return 0;
  QString p = pattern.toLower(), t = text.toLower();
  int score = 0, ti = 0, run = 0;
  for (QChar c : p) {
    if (c.isSpace()) continue;
    int found = static_cast<int>(t.indexOf(c, ti));
    if (found < 0) return -1;
    bool wordStart = found == 0 || !t[found - 1].isLetterOrNumber();
    run = found == ti ? run + 1 : 0;
    score += 1 + (wordStart ? 8 : 0) + run * 3 - std::min(found - ti, 10) / 2;
    ti = found + 1;
  }
  return score + std::max(0, 20 - static_cast<int>(t.size()) / 4);
}

QString actionTitle(const QAction* action) {
  QString title = action->text();
  title.remove('&');
  QString menu = action->property("menuPath").toString();
  return menu.isEmpty() ? title : menu + QString::fromUtf8(" \u203a ") + title;
}

CommandPalette::CommandPalette(QList<QAction*> actions, QWidget* parent)
    : QDialog(parent, Qt::Popup | Qt::FramelessWindowHint), m_actions(std::move(actions)), m_filter(new QLineEdit),
      m_list(new QListWidget) {
  setObjectName("commandPalette");
  m_filter->setPlaceholderText(tr("Type a command"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 6);
  layout->addWidget(m_filter);
  layout->addWidget(m_list);
  resize(520, 360);
  connect(m_filter, &QLineEdit::textChanged, this, &CommandPalette::refill);
  connect(m_filter, &QLineEdit::returnPressed, this, &CommandPalette::runCurrent);
  connect(m_list, &QListWidget::itemActivated, this, &CommandPalette::runCurrent);
  // Up and Down move in the list while typing, over the commands that can run now.
  auto* down = new QAction(this);
  down->setShortcut(Qt::Key_Down);
  connect(down, &QAction::triggered, this, [this] { step(1); });
  auto* up = new QAction(this);
  up->setShortcut(Qt::Key_Up);
  connect(up, &QAction::triggered, this, [this] { step(-1); });
  addAction(down);
  addAction(up);
  refill();
}

void CommandPalette::setFilter(const QString& text) { m_filter->setText(text); }

void CommandPalette::refill() {
  m_list->clear();
  QString f = m_filter->text();
  QList<QPair<int, QAction*>> scored;
  for (QAction* a : m_actions) {
    if (!a->isEnabled() && f.isEmpty()) continue;
    int s = fuzzyScore(f, actionTitle(a));
    if (s >= 0) scored.append({s, a});
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  for (const auto& [s, a] : scored) {
    QString label = actionTitle(a);
    if (!a->shortcut().isEmpty()) label += "    " + a->shortcut().toString(QKeySequence::NativeText);
    auto* item = new QListWidgetItem(label, m_list);
    item->setData(Qt::UserRole, QVariant::fromValue(static_cast<void*>(a)));
    if (!a->isEnabled()) item->setFlags(item->flags() & ~Qt::ItemIsEnabled);
  }
  // The best match that can run is highlighted: a disabled one first in the list (Run ▶ Train before a project
  // is open) took Enter, and the palette closed having done nothing.
  m_list->setCurrentRow(-1);
  step(1);
}

void CommandPalette::step(int direction) {
  for (int row = m_list->currentRow() + direction; row >= 0 && row < m_list->count(); row += direction)
    if (m_list->item(row)->flags() & Qt::ItemIsEnabled) {
      m_list->setCurrentRow(row);
      return;
    }
}

QString CommandPalette::currentCommand() const {
  QListWidgetItem* item = m_list->currentItem();
  return item ? item->text() : QString();
}

QStringList CommandPalette::visibleCommands() const {
  QStringList out;
  for (int i = 0; i < m_list->count(); ++i) out << m_list->item(i)->text();
  return out;
}

void CommandPalette::runCurrent() {
  QListWidgetItem* item = m_list->currentItem();
  if (!item || !(item->flags() & Qt::ItemIsEnabled)) return;  // nothing to run: the palette stays open
  auto* a = static_cast<QAction*>(item->data(Qt::UserRole).value<void*>());
  accept();
  if (a && a->isEnabled()) a->trigger();
}

}  // namespace tsr::studio
