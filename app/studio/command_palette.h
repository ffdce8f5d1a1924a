#pragma once
// The command palette (Ctrl+Shift+P): every action of the window, filtered by a fuzzy match as the user types
// (the letters in order, word starts and runs scoring higher); Enter runs the chosen one.
#include <QDialog>
#include <QList>

class QAction;
class QLineEdit;
class QListWidget;

namespace tsr::studio {

// A fuzzy-match score of pattern against text (case-insensitive): -1 when the letters do not all occur in
// order; higher for matches at word starts and in runs.
int fuzzyScore(const QString& pattern, const QString& text);

class CommandPalette : public QDialog {
  Q_OBJECT
 public:
  CommandPalette(QList<QAction*> actions, QWidget* parent = nullptr);

  void setFilter(const QString& text);
  QStringList visibleCommands() const;
  // The highlighted row: the best match that can run now ("" when none can).
  QString currentCommand() const;
  // Runs the highlighted command and closes; stays open when no command that can run is highlighted.
  void runCurrent();

 private:
  void refill();
  // Highlights the next row (direction 1) or the previous one (-1) whose command can run, if any.
  void step(int direction);

  QList<QAction*> m_actions;
  QLineEdit* m_filter;
  QListWidget* m_list;
};

// The text a palette row shows for an action: its menu path and text without '&' ("File › Open Project…").
QString actionTitle(const QAction* action);

}  // namespace tsr::studio
