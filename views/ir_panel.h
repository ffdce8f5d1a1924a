#pragma once
// The IR panel: the current stage's text form with syntax highlighting. Clicking a line selects its node;
// a node selected elsewhere scrolls here and its line is highlighted.
#include <QSyntaxHighlighter>
#include <QWidget>

#include "views/session.h"

class QPlainTextEdit;
class QLabel;

namespace tsr::studio {

// Colours the text form: op names, %values, types, attribute keys, loc(...) and func headers.
class IrHighlighter : public QSyntaxHighlighter {
  Q_OBJECT
 public:
  explicit IrHighlighter(QTextDocument* doc);
  void setDark(bool dark);

 protected:
  void highlightBlock(const QString& text) override;

 private:
  bool m_dark = false;
};

class IrPanel : public QWidget {
  Q_OBJECT
 public:
  explicit IrPanel(Session* session, QWidget* parent = nullptr);

  QPlainTextEdit* editor() const { return m_text; }
  int highlightedLine() const { return m_line; }  // the selected node's line, -1 when none
  // Selects the node on `line` as a click there would.
  void activateLine(int line);

 protected:
  void changeEvent(QEvent* e) override;

 private:
  void showStage();
  void onNodeSelected(int node);
  void onCursorMoved();

  Session* m_session;
  QLabel* m_header;
  QPlainTextEdit* m_text;
  IrHighlighter* m_highlighter;
  const void* m_shown = nullptr;
  int m_line = -1;
  bool m_syncing = false;
};

}  // namespace tsr::studio
