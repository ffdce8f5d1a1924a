#include "views/project_file_editor.h"

#include <algorithm>

#include <QDialogButtonBox>
#include <QFile>
#include <QFileInfo>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QTextBlock>
#include <QTimer>
#include <QVBoxLayout>

#include "engine/inspect/project_edit.h"
#include "views/code_edit.h"

namespace tsr::studio {

ProjectFileEditor::ProjectFileEditor(const QString& file, QWidget* parent)
    : QDialog(parent), m_file(file), m_edit(new CodeEdit), m_message(new QLabel), m_timer(new QTimer(this)) {
  setObjectName("projectFileEditor");
  setWindowTitle(tr("%1 — Tessera Studio").arg(QFileInfo(file).fileName()));
  resize(760, 560);
  m_edit->setObjectName("projectTomlEditor");
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

void ProjectFileEditor::mark(int line) { m_markedLine = m_edit->markLine(line, QColor(250, 205, 205)); }

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
