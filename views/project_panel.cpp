#include "views/project_panel.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFontDatabase>
#include <QFormLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QScrollArea>
#include <QTabWidget>
#include <QTextBlock>
#include <QTreeView>
#include <QVBoxLayout>

#include "engine/inspect/project_edit.h"
#include "views/param_tree_model.h"
#include "views/project_file_editor.h"

namespace tsr::studio {

namespace {

bool sameFile(const QString& a, const QString& b) {
  return !a.isEmpty() && QFileInfo(a).absoluteFilePath() == QFileInfo(b).absoluteFilePath();
}

}  // namespace

ProjectPanel::ProjectPanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_tabs(new QTabWidget),
      m_summary(new QLabel(tr("No project. File › Open Project… or drop a folder here."))),
      m_openFile(new QPushButton(tr("Open project.toml"))),
      m_tree(new QTreeView),
      m_params(new ParamTreeModel(this)),
      m_errorLabel(new QLabel),
      m_save(new QPushButton(tr("Save project.toml"))),
      m_file(new QPlainTextEdit) {
  setObjectName("projectPanel");
  m_summary->setObjectName("projectSummary");
  m_summary->setWordWrap(true);
  m_openFile->setObjectName("openProjectTomlButton");
  m_openFile->setToolTip(tr("Edit the project's project.toml, its error marked; saving opens the project again"));
  m_openFile->setVisible(false);
  connect(m_openFile, &QPushButton::clicked, this, &ProjectPanel::openFileEditor);
  m_tree->setModel(m_params);
  m_tree->setUniformRowHeights(true);
  m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);

  auto* formWidget = new QWidget;
  m_form = new QFormLayout(formWidget);
  buildForm("gpt2");
  auto* scroll = new QScrollArea;
  scroll->setWidget(formWidget);
  scroll->setWidgetResizable(true);
  m_errorLabel->setWordWrap(true);
  m_save->setEnabled(false);
  auto* settings = new QWidget;
  m_settings = settings;
  auto* sl = new QVBoxLayout(settings);
  sl->addWidget(scroll, 1);
  sl->addWidget(m_errorLabel);
  sl->addWidget(m_save);
  connect(m_save, &QPushButton::clicked, this, &ProjectPanel::save);

  m_file->setReadOnly(true);
  m_file->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_file->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));

  m_tabs->addTab(m_tree, tr("Parameters"));
  m_tabs->addTab(settings, tr("Settings"));
  m_tabs->addTab(m_file, tr("project.toml"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(m_summary);
  layout->addWidget(m_openFile, 0, Qt::AlignLeft);
  layout->addWidget(m_tabs, 1);
  connect(m_session, &Session::projectOpened, this, &ProjectPanel::onProjectOpened);
  connect(m_session, &Session::projectClosed, this, &ProjectPanel::onProjectClosed);
  connect(m_session, &Session::projectFailed, this, [this](const QString& message) {
    // One line: a traceback's lines (and Python's ^^^^ underlines) would widen the dock, and the window with it.
    m_summary->setText(tr("<span style=\"color:#d04040\">Could not open the project:</span> %1")
                           .arg(failureSummary(message, m_session->failedProjectFile()).toHtmlEscaped()));
    m_summary->setToolTip(message);
    m_failure = message;
    m_openFile->setVisible(QFileInfo(m_session->failedProjectFile()).isFile());
    // The editor of that file, if open, marks the new error.
    if (m_editor && m_editor->isVisible() && sameFile(m_editor->file(), m_session->failedProjectFile())) {
      m_editor->load();
      m_editor->setError(message);
    }
  });
}

QString ProjectPanel::failureSummary(const QString& message, const QString& file) {
  const inspect::PythonTraceback tb = inspect::parseTraceback(message.toStdString());
  if (!tb.frames.empty() && !tb.exception.empty()) {
    const inspect::TracebackFrame* at = &tb.frames.back();
    for (const inspect::TracebackFrame& f : tb.frames)
      if (sameFile(QString::fromStdString(f.file), file)) at = &f;
    return QString("%1:%2: %3").arg(QString::fromStdString(at->file)).arg(at->line).arg(QString::fromStdString(tb.exception));
  }
  // Else the first line, which names the file, and the last, which says what went wrong (Python's own errors
  // before it runs the model end so).
  const QStringList lines = message.split('\n', Qt::SkipEmptyParts);
  if (lines.size() < 2) return message.trimmed();
  QString last = lines.back().trimmed();
  if (last.size() > 240) last = last.left(240) + "…";
  return lines.front().trimmed() + (lines.size() > 2 ? " … " : " ") + last;
}

void ProjectPanel::buildForm(const std::string& family) {
  // The rows of the family's own keys come from its declaration: a vit project shows image_size, not n_layer.
  while (m_form->rowCount() > 0) m_form->removeRow(0);
  m_fields.clear();
  m_formFamily = family;
  m_formFields = inspect::projectFields(family);
  QString lastSection;
  for (const inspect::ProjectField& f : m_formFields) {
    QString section = QString::fromStdString(f.section);
    if (section != lastSection) {
      auto* title = new QLabel(QString("<b>[%1]</b>").arg(section));
      m_form->addRow(title);
      lastSection = section;
    }
    auto* edit = new QLineEdit;
    edit->setObjectName(section + "." + QString::fromStdString(f.key));
    edit->setToolTip(QString::fromStdString(f.help));
    edit->setPlaceholderText(QString::fromStdString(f.help));
    m_fields.insert(section + "." + QString::fromStdString(f.key), edit);
    m_form->addRow(QString::fromStdString(f.key), edit);
    connect(edit, &QLineEdit::textEdited, this, &ProjectPanel::revalidate);
  }
}

QLineEdit* ProjectPanel::field(const QString& section, const QString& key) const {
  return m_fields.value(section + "." + key, nullptr);
}

void ProjectPanel::openFileEditor() {
  QString file = m_session->failedProjectFile();
  if (file.isEmpty()) file = m_session->projectFile();
  if (file.isEmpty()) return;
  if (m_editor && !sameFile(m_editor->file(), file)) {
    m_editor->deleteLater();
    m_editor = nullptr;
  }
  if (!m_editor) {
    m_editor = new ProjectFileEditor(file, this);
    m_editor->setWindowFlag(Qt::Window);
    connect(m_editor, &ProjectFileEditor::saved, this, [this](const QString& saved) {
      emit reopenRequested(QFileInfo(saved).absolutePath());
    });
  } else {
    m_editor->load();
  }
  if (!m_failure.isEmpty() && sameFile(file, m_session->failedProjectFile())) m_editor->setError(m_failure);
  m_editor->show();
  m_editor->raise();
  m_editor->activateWindow();
}

void ProjectPanel::onProjectOpened() {
  ProjectPtr p = m_session->project();
  m_failure.clear();
  m_openFile->setVisible(false);
  // The project whose project.toml was being fixed opens: its editor has done its job.
  if (m_editor && m_editor->isVisible() && sameFile(m_editor->file(), m_session->projectFile())) m_editor->close();
  m_settings->setEnabled(true);
  m_params->setParams(p->params);
  m_tree->expandToDepth(0);
  m_summary->setText(tr("<b>%1</b> — %2 (%3): %4 parameters, %5")
                         .arg(QString::fromStdString(p->project.name).toHtmlEscaped(),
                              QString::fromStdString(p->project.dir).toHtmlEscaped(),
                              QString::fromStdString(p->project.model.family))
                         .arg(QLocale(QLocale::English).toString(static_cast<qlonglong>(p->numParams)))
                         .arg(QString::fromStdString(inspect::formatBytes(p->paramBytes))));
  QFile f(QString::fromStdString(p->project.file));
  QString text = f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString::fromStdString(p->project.text);
  loadForm(text);
}

void ProjectPanel::onProjectClosed() {
  m_params->setParams({});
  QFile f(QDir(m_session->failedProjectDir()).filePath("project.toml"));
  loadForm(f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString());
  m_settings->setEnabled(false);
  m_errorLabel->setText(tr("The project did not open: its settings can be edited here once it does (project.toml "
                           "opens in an editor from the button above)."));
}

void ProjectPanel::loadForm(const QString& text) {
  m_loading = true;
  m_original = m_edited = text;
  std::string t = text.toStdString();
  if (ProjectPtr p = m_session->project(); p && p->project.model.family != m_formFamily) buildForm(p->project.model.family);
  for (const inspect::ProjectField& f : m_formFields) {
    QLineEdit* e = field(QString::fromStdString(f.section), QString::fromStdString(f.key));
    std::string v = inspect::fieldValue(t, f.section, f.key);
    if ((f.kind == inspect::FieldKind::IntList || f.kind == inspect::FieldKind::StringList) && v.size() >= 2)
      v = v.substr(1, v.size() - 2);
    if (f.kind == inspect::FieldKind::StringList) {
      QString s = QString::fromStdString(v);
      s.remove('"');
      v = s.toStdString();
    }
    e->setText(QString::fromStdString(v));
    e->setStyleSheet({});
  }
  m_file->setPlainText(text);
  m_error.clear();
  m_errorLabel->clear();
  m_save->setEnabled(false);
  m_loading = false;
}

void ProjectPanel::revalidate() {
  if (m_loading || !m_session->project()) return;
  std::string text = m_original.toStdString();
  m_error.clear();
  for (const inspect::ProjectField& f : m_formFields) {
    QLineEdit* e = field(QString::fromStdString(f.section), QString::fromStdString(f.key));
    std::string current = inspect::fieldValue(text, f.section, f.key);
    std::string typed = e->text().toStdString();
    bool blankAndAbsent = typed.empty() && current.empty();
    e->setStyleSheet({});
    if (blankAndAbsent) continue;
    auto lit = inspect::tomlLiteral(f.kind, typed);
    if (!lit.ok()) {
      e->setStyleSheet("QLineEdit { border: 2px solid #d04040; }");
      if (m_error.isEmpty()) m_error = QString("%1.%2: %3").arg(QString::fromStdString(f.section), QString::fromStdString(f.key),
                                                                 QString::fromStdString(lit.error().message));
      continue;
    }
    // Unchanged values keep their original spelling ("3e-3" stays as written).
    std::string original = inspect::fieldValue(m_original.toStdString(), f.section, f.key);
    auto originalLit = inspect::tomlLiteral(f.kind, original);
    if (originalLit.ok() && *originalLit == *lit && !original.empty()) continue;
    text = inspect::setFieldValue(text, f.section, f.key, *lit);
  }
  m_edited = QString::fromStdString(text);
  if (m_error.isEmpty()) {
    ProjectPtr p = m_session->project();
    Status st = inspect::validateProjectText(text, p->project.file, p->project.dir);
    if (!st.ok()) m_error = QString::fromStdString(st.error().message);
  }
  m_errorLabel->setText(m_error.isEmpty() ? QString() : QString("<span style=\"color:#d04040\">%1</span>").arg(m_error.toHtmlEscaped()));
  m_save->setEnabled(m_error.isEmpty() && m_edited != m_original);
  m_file->setPlainText(m_edited);
}

bool ProjectPanel::canSave() const { return m_session->project() && m_error.isEmpty(); }

bool ProjectPanel::save() {
  if (!canSave()) {
    m_session->log("error", "not saved: " + m_error);
    return false;
  }
  QString path = m_session->projectFile();
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly) || f.write(m_edited.toUtf8()) < 0 || !f.commit()) {
    m_session->log("error", "cannot write " + path);
    return false;
  }
  m_session->log("info", "saved " + path);
  m_original = m_edited;
  m_save->setEnabled(false);
  emit saved(path);
  return true;
}

void ProjectPanel::showFileLine(const QString& file, int line) {
  QFileInfo info(file);
  bool ours = file.isEmpty() || info.canonicalFilePath() == QFileInfo(m_session->projectFile()).canonicalFilePath();
  if (!ours && info.isFile()) {
    QFile f(info.filePath());
    if (f.open(QIODevice::ReadOnly)) m_file->setPlainText(QString::fromUtf8(f.readAll()));
  }
  m_tabs->setCurrentWidget(m_file);
  QTextBlock block = m_file->document()->findBlockByNumber(std::max(0, line - 1));
  QTextCursor c(block);
  c.select(QTextCursor::LineUnderCursor);
  m_file->setTextCursor(c);
  m_file->centerCursor();
}

bool ProjectPanel::fileViewShown() const { return m_tabs->currentWidget() == m_file; }

void ProjectPanel::showTab(int index) { m_tabs->setCurrentIndex(index); }

}  // namespace tsr::studio
