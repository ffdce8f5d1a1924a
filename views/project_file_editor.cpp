#include "views/project_file_editor.h"

#include <algorithm>

#include <QDialogButtonBox>
#include <QFile>
#include <QFileInfo>
#include <QFontDatabase>
#include <QLabel>
#include <QPaintEvent>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QTextBlock>
#include <QTimer>
#include <QVBoxLayout>

#include "engine/inspect/project_edit.h"

namespace tsr::studio {

// A plain text editor with the line numbers in its left margin (Qt's code editor example).
class CodeEdit : public QPlainTextEdit {
 public:
  explicit CodeEdit(QWidget* parent = nullptr) : QPlainTextEdit(parent), m_numbers(new Numbers(this)) {
    connect(this, &QPlainTextEdit::blockCountChanged, this, [this] { updateMargin(); });
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

  int numbersWidth() const {
    int digits = QString::number(std::max(1, blockCount())).size();
    return 10 + fontMetrics().horizontalAdvance(QLatin1Char('9')) * std::max(digits, 2);
  }

 protected:
  void resizeEvent(QResizeEvent* e) override {
    QPlainTextEdit::resizeEvent(e);
    QRect r = contentsRect();
    m_numbers->setGeometry(QRect(r.left(), r.top(), numbersWidth(), r.height()));
  }

 private:
  class Numbers : public QWidget {
   public:
    explicit Numbers(CodeEdit* edit) : QWidget(edit), m_edit(edit) {}
    QSize sizeHint() const override { return {m_edit->numbersWidth(), 0}; }

   protected:
    void paintEvent(QPaintEvent* e) override { m_edit->paintNumbers(e->rect()); }

   private:
    CodeEdit* m_edit;
  };

  void updateMargin() { setViewportMargins(numbersWidth(), 0, 0, 0); }

  void paintNumbers(const QRect& rect) {
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

  Numbers* m_numbers;
};

ProjectFileEditor::ProjectFileEditor(const QString& file, QWidget* parent)
    : QDialog(parent), m_file(file), m_edit(new CodeEdit), m_message(new QLabel), m_timer(new QTimer(this)) {
  setObjectName("projectFileEditor");
  setWindowTitle(tr("%1 — Tessera Studio").arg(QFileInfo(file).fileName()));
  resize(760, 560);
  m_edit->setObjectName("projectTomlEditor");
  m_edit->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_edit->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_message->setObjectName("projectTomlError");
  m_message->setWordWrap(true);
  m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* path = new QLabel(QFileInfo(file).absoluteFilePath());
  path->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* buttons = new QDialogButtonBox;
  m_save = buttons->addButton(tr("Save and Reopen"), QDialogButtonBox::AcceptRole);
  m_save->setObjectName("saveProjectTomlButton");
  m_save->setShortcut(QKeySequence::Save);
  m_save->setToolTip(tr("Write project.toml and open the project again (Ctrl+S)"));
  buttons->addButton(QDialogButtonBox::Close);
  connect(m_save, &QPushButton::clicked, this, &ProjectFileEditor::save);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::close);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(path);
  layout->addWidget(m_edit, 1);
  layout->addWidget(m_message);
  layout->addWidget(buttons);
  m_timer->setSingleShot(true);
  m_timer->setInterval(300);
  connect(m_timer, &QTimer::timeout, this, &ProjectFileEditor::validate);
  connect(m_edit, &QPlainTextEdit::textChanged, m_timer, qOverload<>(&QTimer::start));
  load();
}

QPlainTextEdit* ProjectFileEditor::editor() const { return m_edit; }

int ProjectFileEditor::lineNumberWidth() const { return m_edit->numbersWidth(); }

bool ProjectFileEditor::load() {
  QFile f(m_file);
  if (!f.open(QIODevice::ReadOnly)) {
    m_message->setText(tr("Cannot read %1").arg(m_file));
    return false;
  }
  QSignalBlocker block(m_edit);
  m_edit->setPlainText(QString::fromUtf8(f.readAll()));
  return true;
}

void ProjectFileEditor::setError(const QString& message) {
  m_error = message;
  m_message->setText(QString("<span style=\"color:#d04040\">%1</span>").arg(message.toHtmlEscaped()));
  int line = inspect::errorLocation(message.toStdString()).line;
  mark(line);
  if (line > 0) {
    // The cursor on the error's line, the view centred on it.
    QTextCursor c(m_edit->document()->findBlockByNumber(line - 1));
    m_edit->setTextCursor(c);
    m_edit->centerCursor();
    m_edit->setFocus();
  }
}

void ProjectFileEditor::mark(int line) {
  m_markedLine = line > 0 && line <= m_edit->blockCount() ? line : 0;
  QList<QTextEdit::ExtraSelection> extras;
  if (m_markedLine > 0) {
    QTextEdit::ExtraSelection sel;
    sel.format.setBackground(QColor(250, 205, 205));
    sel.format.setProperty(QTextFormat::FullWidthSelection, true);
    sel.cursor = QTextCursor(m_edit->document()->findBlockByNumber(m_markedLine - 1));
    extras << sel;
  }
  m_edit->setExtraSelections(extras);
}

void ProjectFileEditor::validate() {
  // As typed: the mark follows the first error the parser finds; the cursor stays where the user is.
  QFileInfo info(m_file);
  Status st = inspect::validateProjectText(m_edit->toPlainText().toStdString(), m_file.toStdString(),
                                           info.absolutePath().toStdString());
  if (st.ok()) {
    m_error.clear();
    mark(0);
    m_message->setText(tr("No error found: Save and Reopen opens the project."));
    return;
  }
  m_error = QString::fromStdString(st.error().message);
  m_message->setText(QString("<span style=\"color:#d04040\">%1</span>").arg(m_error.toHtmlEscaped()));
  mark(inspect::errorLocation(st.error().message).line);
}

bool ProjectFileEditor::save() {
  m_timer->stop();
  QSaveFile f(m_file);
  if (!f.open(QIODevice::WriteOnly) || f.write(m_edit->toPlainText().toUtf8()) < 0 || !f.commit()) {
    m_message->setText(QString("<span style=\"color:#d04040\">%1</span>").arg(tr("Cannot write %1").arg(m_file).toHtmlEscaped()));
    return false;
  }
  m_message->setText(tr("Saved; opening the project…"));
  emit saved(m_file);
  return true;
}

}  // namespace tsr::studio
