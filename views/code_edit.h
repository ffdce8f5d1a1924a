#pragma once
// A plain text editor for code: a fixed-width font, no wrapping, the line numbers in its left margin (Qt's code
// editor example). project.toml's editor and the Source panel's model.py use it.
#include <QPlainTextEdit>

namespace tsr::studio {

class CodeEdit : public QPlainTextEdit {
 public:
  explicit CodeEdit(QWidget* parent = nullptr);

  // The width of the line numbers' margin, in pixels.
  int numbersWidth() const;
  // Moves the cursor to a 1-based line and centres the view on it.
  void goToLine(int line);
  // Marks a 1-based line across the editor's width in `colour` (0: no mark); returns the line marked, 0 when
  // `line` is not one of the text's.
  int markLine(int line, const QColor& colour);

 protected:
  void resizeEvent(QResizeEvent* e) override;
  void changeEvent(QEvent* e) override;

 private:
  class Numbers;
  void updateMargin();
  void paintNumbers(const QRect& rect);

  Numbers* m_numbers;
};

}  // namespace tsr::studio
