#include "views/source_panel.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFileSystemWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSplitter>
#include <QSyntaxHighlighter>
#include <QTextBlock>
#include <QTimer>
#include <QVBoxLayout>

#include "engine/inspect/project_edit.h"
#include "views/code_edit.h"

namespace tsr::studio {

namespace {

// Python's keywords, builtins, numbers, decorators, comments and strings (triple-quoted ones across lines).
class PythonHighlighter : public QSyntaxHighlighter {
 public:
  explicit PythonHighlighter(QTextDocument* doc) : QSyntaxHighlighter(doc) {
    auto format = [](QColor color, bool bold = false, bool italic = false) {
      QTextCharFormat f;
      f.setForeground(color);
      if (bold) f.setFontWeight(QFont::Bold);
      f.setFontItalic(italic);
      return f;
    };
    const QStringList keywords = {"and",   "as",     "assert", "async",  "await", "break", "class",  "continue",
                                  "def",   "del",    "elif",   "else",   "except", "finally", "for", "from",
                                  "global", "if",    "import", "in",     "is",    "lambda", "nonlocal", "not",
                                  "or",    "pass",   "raise",  "return", "try",   "while", "with",   "yield"};
    m_rules.push_back({QRegularExpression("\\b(" + keywords.join('|') + ")\\b"), format(QColor(0, 0, 160), true)});
    m_rules.push_back({QRegularExpression("\\b(True|False|None|self|cls)\\b"), format(QColor(128, 0, 128))});
    m_rules.push_back({QRegularExpression("\\b[0-9][0-9_]*(\\.[0-9_]*)?([eE][+-]?[0-9]+)?\\b"), format(QColor(0, 110, 110))});
    m_rules.push_back({QRegularExpression("^\\s*@[\\w.]+"), format(QColor(150, 100, 0))});
    m_rules.push_back({QRegularExpression("\\b(?:def|class)\\s+(\\w+)"), format(QColor(0, 90, 180), true), 1});
    m_string = format(QColor(0, 128, 0));
    m_comment = format(QColor(120, 120, 120), false, true);
  }

 protected:
  void highlightBlock(const QString& text) override {
    for (const Rule& r : m_rules)
      for (auto it = r.pattern.globalMatch(text); it.hasNext();) {
        QRegularExpressionMatch m = it.next();
        setFormat(static_cast<int>(m.capturedStart(r.group)), static_cast<int>(m.capturedLength(r.group)), r.format);
      }
    // Strings and comments, left to right, so that a '#' in a string is not a comment. State 1 and 2: inside a
    // ''' or """ string that began on an earlier line.
    setCurrentBlockState(0);
    int i = 0;
    if (previousBlockState() > 0) i = closeTriple(text, 0, previousBlockState() == 1 ? "'''" : "\"\"\"");
    while (i >= 0 && i < text.size()) {
      const QChar c = text[i];
      if (c == '#') {
        setFormat(i, static_cast<int>(text.size()) - i, m_comment);
        break;
      }
      if (c == '\'' || c == '"') {
        const QString triple(3, c);
        if (text.mid(i, 3) == triple) {
          setCurrentBlockState(c == '\'' ? 1 : 2);
          i = closeTriple(text, i, triple, 3);
          continue;
        }
        int end = i + 1;
        while (end < text.size() && text[end] != c) end += text[end] == '\\' ? 2 : 1;
        setFormat(i, std::min(end + 1, static_cast<int>(text.size())) - i, m_string);
        i = end + 1;
        continue;
      }
      ++i;
    }
  }

 private:
  struct Rule {
    QRegularExpression pattern;
    QTextCharFormat format;
    int group = 0;  // the part of the match that is formatted: a def's name, not `def`
  };

  // Formats a triple-quoted string from `start` (its opening quotes `skip` long) to its close on this line, and
  // returns where scanning goes on; -1 (the state kept) when it goes past the line.
  int closeTriple(const QString& text, int start, const QString& triple, int skip = 0) {
    const int end = static_cast<int>(text.indexOf(triple, start + skip));
    if (end < 0) {
      // Still inside: the next line is too (a docstring's third line was highlighted as code).
      setFormat(start, static_cast<int>(text.size()) - start, m_string);
      setCurrentBlockState(triple == "'''" ? 1 : 2);
      return -1;
    }
    setCurrentBlockState(0);
    setFormat(start, end + 3 - start, m_string);
    return end + 3;
  }

  std::vector<Rule> m_rules;
  QTextCharFormat m_string, m_comment;
};

QString projectDirOf(const QString& path) {
  QFileInfo info(path);
  return info.isDir() ? QDir(path).absolutePath() : info.absolutePath();
}

}  // namespace

SourcePanel::SourcePanel(Session* session, QWidget* parent)
    : QWidget(parent),
      m_session(session),
      m_header(new QLabel),
      m_edit(new CodeEdit),
      m_save(new QPushButton(tr("Save"))),
      m_problems(new QListWidget),
      m_watcher(new QFileSystemWatcher(this)),
      m_reopen(new QTimer(this)) {
  setObjectName("sourcePanel");
  m_edit->setObjectName("sourceEditor");
  m_problems->setObjectName("sourceProblems");
  m_save->setObjectName("sourceSave");
  m_save->setShortcut(QKeySequence::Save);
  m_save->setToolTip(tr("Write the file; the project is traced again (Ctrl+S)"));
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_header->setWordWrap(true);
  new PythonHighlighter(m_edit->document());
  auto* top = new QHBoxLayout;
  top->addWidget(m_header, 1);
  top->addWidget(m_save);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_edit);
  split->addWidget(m_problems);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addLayout(top);
  layout->addWidget(split, 1);
  m_reopen->setSingleShot(true);
  m_reopen->setInterval(200);  // an editor's save is often several writes
  showProject(QString());

  connect(m_save, &QPushButton::clicked, this, &SourcePanel::save);
  connect(m_watcher, &QFileSystemWatcher::fileChanged, this, &SourcePanel::onFileChanged);
  connect(m_reopen, &QTimer::timeout, this, [this] {
    if (!m_dir.isEmpty()) emit reopenRequested(m_dir);
  });
  connect(m_session, &Session::projectOpening, this, &SourcePanel::showProject);
  connect(m_session, &Session::projectOpened, this, [this] {
    m_problems->clear();
    if (!m_file.isEmpty())
      m_header->setText(tr("%1 — traced: %2 nodes in the training step")
                            .arg(QFileInfo(m_file).fileName())
                            .arg(m_session->project()->traced->nodes().size()));
  });
  connect(m_session, &Session::projectFailed, this, &SourcePanel::onFailed);
  connect(m_session, &Session::nodeSelected, this, &SourcePanel::onNodeSelected);
  connect(m_edit, &QPlainTextEdit::cursorPositionChanged, this, &SourcePanel::onCursorMoved);
  connect(m_problems, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
    const int line = item->data(Qt::UserRole).toInt();
    if (line > 0) {
      m_edit->goToLine(line);
      m_edit->setFocus();
    }
  });
  connect(m_problems, &QListWidget::itemClicked, m_problems, &QListWidget::itemActivated);
}

void SourcePanel::showProject(const QString& path) {
  const QString dir = path.isEmpty() ? QString() : projectDirOf(path);
  const QString file = path.isEmpty() ? QString() : QString::fromStdString(inspect::modelSourceFile(path.toStdString()));
  if (dir == m_dir && file == m_file) return;  // traced again: the text stays as it is
  if (!m_file.isEmpty()) m_watcher->removePath(m_file);
  m_dir = dir;
  m_file = file;
  m_problems->clear();
  mark(0);
  const bool has = !m_file.isEmpty();
  m_edit->setVisible(has);
  m_problems->setVisible(has);
  m_save->setVisible(has);
  if (!has) {
    m_header->setText(path.isEmpty() ? tr("No project is open.")
                                     : tr("This project's model is a built-in family. A project whose project.toml "
                                          "says [model] python = \"model.py\" shows its model file here."));
    m_edit->clear();
    m_diskText.clear();
    return;
  }
  m_header->setText(QFileInfo(m_file).fileName());
  load();
}

void SourcePanel::load() {
  QFile f(m_file);
  if (!f.open(QIODevice::ReadOnly)) {
    m_header->setText(tr("Cannot read %1").arg(m_file));
    return;
  }
  m_diskText = f.readAll();
  const int line = m_edit->textCursor().blockNumber() + 1;
  {
    QSignalBlocker block(m_edit);
    m_edit->setPlainText(QString::fromUtf8(m_diskText));
    m_edit->document()->setModified(false);
  }
  m_marking = true;
  m_edit->goToLine(std::min(line, m_edit->blockCount()));
  m_marking = false;
  if (!m_watcher->files().contains(m_file)) m_watcher->addPath(m_file);
}

bool SourcePanel::save() {
  if (m_file.isEmpty()) return false;
  QSaveFile f(m_file);
  const QByteArray text = m_edit->toPlainText().toUtf8();
  if (!f.open(QIODevice::WriteOnly) || f.write(text) != text.size() || !f.commit()) {
    m_session->log("error", tr("cannot write %1: %2").arg(m_file, f.errorString()));
    return false;
  }
  m_diskText = text;
  m_edit->document()->setModified(false);
  // QSaveFile replaces the file: the watcher follows the path again.
  m_watcher->removePath(m_file);
  m_watcher->addPath(m_file);
  m_reopen->start();
  return true;
}

void SourcePanel::onFileChanged() {
  if (m_file.isEmpty()) return;
  // An editor that saves by replacing the file ends the watch: follow the new file.
  if (!m_watcher->files().contains(m_file) && QFileInfo::exists(m_file)) m_watcher->addPath(m_file);
  QFile f(m_file);
  if (!f.open(QIODevice::ReadOnly)) return;
  const QByteArray disk = f.readAll();
  if (disk == m_diskText) return;  // our own save, already on its way
  if (m_edit->document()->isModified()) {
    m_session->log("warning", tr("%1 changed on disk; the edits here are kept (Save writes them over it)").arg(m_file));
    m_diskText = disk;
  } else {
    load();
  }
  m_reopen->start();
}

void SourcePanel::onFailed(const QString& message) {
  m_problems->clear();
  if (m_file.isEmpty() || !message.contains(m_file)) return;
  const inspect::PythonTraceback tb = inspect::parseTraceback(message.toStdString());
  auto add = [this](const QString& text, int line) {
    auto* item = new QListWidgetItem(text, m_problems);
    item->setData(Qt::UserRole, line);
    if (line <= 0) item->setFlags(item->flags() & ~Qt::ItemIsSelectable);
  };
  // The exception first, pointing at the innermost frame in model.py; then the frames, innermost first.
  int innermost = 0;
  for (const auto& fr : tb.frames)
    if (QString::fromStdString(fr.file) == m_file) innermost = fr.line;
  const QString name = QFileInfo(m_file).fileName();
  add(tb.exception.empty() ? message.section('\n', 0, 0) : QString::fromStdString(tb.exception), innermost);
  for (auto it = tb.frames.rbegin(); it != tb.frames.rend(); ++it) {
    const bool here = QString::fromStdString(it->file) == m_file;
    add(QString("  %1:%2%3  %4")
            .arg(here ? name : QString::fromStdString(it->file))
            .arg(it->line)
            .arg(it->function.empty() ? QString() : " in " + QString::fromStdString(it->function))
            .arg(QString::fromStdString(it->code)),
        here ? it->line : 0);
  }
  m_header->setText(tr("%1 — the trace failed: %2").arg(name, m_problems->item(0)->text()));
  if (innermost > 0) {
    m_marking = true;
    m_edit->goToLine(innermost);
    m_marking = false;
  }
}

void SourcePanel::onNodeSelected(int node) {
  const inspect::Stage* stage = m_session->stage();
  if (m_file.isEmpty() || !stage || node < 0 || node >= static_cast<int>(stage->graph->nodes().size())) {
    mark(0);
    return;
  }
  const ir::Provenance& prov = stage->graph->nodes()[static_cast<size_t>(node)].prov;
  if (QString::fromStdString(prov.file) != m_file) {
    mark(0);
    return;
  }
  mark(prov.line);
  if (m_edit->textCursor().blockNumber() + 1 != prov.line) {
    m_marking = true;
    m_edit->goToLine(prov.line);
    m_marking = false;
  }
}

void SourcePanel::onCursorMoved() {
  const inspect::Stage* stage = m_session->stage();
  if (m_marking || m_file.isEmpty() || !stage) return;
  const int line = m_edit->textCursor().blockNumber() + 1;
  if (line == m_markedLine) return;
  const std::string file = m_file.toStdString();
  const auto& nodes = stage->graph->nodes();
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].prov.line == line && nodes[i].prov.file == file) {
      m_session->selectNode(static_cast<int>(i));
      return;
    }
}

void SourcePanel::mark(int line) { m_markedLine = m_edit->markLine(line, QColor(205, 225, 250)); }

}  // namespace tsr::studio
