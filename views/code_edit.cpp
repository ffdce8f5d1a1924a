#include "views/code_edit.h"

#include <algorithm>

#include <QFontDatabase>
#include <QPaintEvent>
#include <QPainter>
#include <QTextBlock>
#include <QTextDocument>

namespace tsr::studio {

class CodeEdit::Numbers : public QWidget {
 public:
  explicit Numbers(CodeEdit* edit) : QWidget(edit), m_edit(edit) {}
  QSize sizeHint() const override { return {m_edit->numbersWidth(), 0}; }

 protected:
  void paintEvent(QPaintEvent* e) override { m_edit->paintNumbers(e->rect()); }

 private:
  CodeEdit* m_edit;
};

CodeEdit::CodeEdit(QWidget* parent) : QPlainTextEdit(parent), m_numbers(new Numbers(this)) {
  setLineWrapMode(QPlainTextEdit::NoWrap);
  setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  // The document's signal, not the editor's: a caller that sets the text with the editor's signals blocked
  // (the Source panel does) still widens the margin for a third digit. The margin stayed two digits wide while
  // the numbers took three, and they covered the first letters of every line.
  connect(document(), &QTextDocument::blockCountChanged, this, [this] { updateMargin(); });
  connect(this, &QPlainTextEdit::updateRequest, this, [this](const QRect& rect, int dy) {
    if (dy != 0) {
      m_numbers->scroll(0, dy);
    } else {
      m_numbers->update(0, rect.y(), m_numbers->width(), rect.height());
    }
    if (rect.contains(viewport()->rect())) updateMargin();
  });
  updateMargin();
}

int CodeEdit::numbersWidth() const {
  int digits = QString::number(std::max(1, blockCount())).size();
  return 10 + fontMetrics().horizontalAdvance(QLatin1Char('9')) * std::max(digits, 2);
}

void CodeEdit::goToLine(int line) {
  if (line < 1 || line > blockCount()) return;
  setTextCursor(QTextCursor(document()->findBlockByNumber(line - 1)));
  centerCursor();
}

int CodeEdit::markLine(int line, const QColor& colour) {
  const int marked = line > 0 && line <= blockCount() ? line : 0;
  QList<QTextEdit::ExtraSelection> extras;
  if (marked > 0) {
    QTextEdit::ExtraSelection sel;
    sel.format.setBackground(colour);
    sel.format.setProperty(QTextFormat::FullWidthSelection, true);
    sel.cursor = QTextCursor(document()->findBlockByNumber(marked - 1));
    extras << sel;
  }
  setExtraSelections(extras);
  return marked;
}

void CodeEdit::resizeEvent(QResizeEvent* e) {
  QPlainTextEdit::resizeEvent(e);
  updateMargin();
}

void CodeEdit::changeEvent(QEvent* e) {
  QPlainTextEdit::changeEvent(e);
  if (e->type() == QEvent::FontChange) updateMargin();
}

// The margin and the numbers in it are always as wide as each other.
void CodeEdit::updateMargin() {
  const int width = numbersWidth();
  if (viewportMargins().left() != width) setViewportMargins(width, 0, 0, 0);
  const QRect r = contentsRect();
  m_numbers->setGeometry(QRect(r.left(), r.top(), width, r.height()));
}

void CodeEdit::paintNumbers(const QRect& rect) {
  QPainter p(m_numbers);
  p.fillRect(rect, palette().color(QPalette::AlternateBase));
  p.setPen(palette().color(QPalette::PlaceholderText));
  QTextBlock block = firstVisibleBlock();
  int top = qRound(blockBoundingGeometry(block).translated(contentOffset()).top());
  int height = qRound(blockBoundingRect(block).height());
  while (block.isValid() && top <= rect.bottom()) {
    if (block.isVisible() && top + height >= rect.top())
      p.drawText(0, top, m_numbers->width() - 5, fontMetrics().height(), Qt::AlignRight,
                 QString::number(block.blockNumber() + 1));
    block = block.next();
    top += height;
    height = qRound(blockBoundingRect(block).height());
  }
}

}  // namespace tsr::studio
