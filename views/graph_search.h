#pragma once
// The graph panel's search: a regex box, "k of n", previous and next buttons (Enter / Shift+Enter in the box,
// F3 / Shift+F3 from the window, as in Qt Creator), and the list of matches (node, op, module, shape) whose rows
// pick their match. The panel runs the search and shows the match picked; this widget keeps the matches and the
// position among them.
#include <QVector>
#include <QWidget>

class QLabel;
class QLineEdit;
class QTimer;
class QToolButton;
class QTreeWidget;

namespace tsr::studio {

class GraphSearch : public QWidget {
  Q_OBJECT
 public:
  struct Match {
    int node = -1;
    QString name;    // "%12" (the first result), or the op of a node without results
    QString op;      // "dot_general"
    QString module;  // the group the graph shows it in, "h.0.attn"
    QString shape;   // "f32[8,64,384]"
  };

  explicit GraphSearch(QWidget* parent = nullptr);

  QLineEdit* box() const { return m_box; }
  // The list of matches; the panel places it (hidden while there is no pattern or the list is switched off).
  QTreeWidget* results() const { return m_results; }
  QString pattern() const;
  // Shows a pattern without searching again (a search run from outside).
  void setPattern(const QString& pattern);
  // The matches of the pattern on screen, or why there are none ("invalid regex: ..."); the position is reset.
  void setMatches(QVector<Match> matches, const QString& error = {});
  const QVector<Match>& matches() const { return m_matches; }
  int current() const { return m_current; }  // index into matches(); -1 before the first step
  QString status() const;                      // "3 of 17", "17 matches", "no match", "invalid regex"

  // Step to the next / previous match (wrapping around), or to match `index`; matchChosen follows.
  void next();
  void previous();
  void choose(int index);

 signals:
  void patternEdited(const QString& pattern);  // after the user stops typing
  void matchChosen(int node);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  void updateStatus();
  void updateResultsShown();

  QLineEdit* m_box;
  QLabel* m_status;
  QToolButton* m_previous;
  QToolButton* m_next;
  QToolButton* m_list;
  QTreeWidget* m_results;
  QTimer* m_timer;
  QVector<Match> m_matches;
  QString m_error;
  int m_current = -1;
};

}  // namespace tsr::studio
