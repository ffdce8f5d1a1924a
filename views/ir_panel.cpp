#include "views/ir_panel.h"

#include <QEvent>
#include <QFontDatabase>
#include <QLabel>
#include <QPlainTextEdit>
#include <QRegularExpression>
#include <QTextBlock>
#include <QVBoxLayout>

#include "engine/inspect/node_info.h"

namespace tsr::studio {

IrHighlighter::IrHighlighter(QTextDocument* doc) : QSyntaxHighlighter(doc) {}

void IrHighlighter::setDark(bool dark) {
  if (dark != m_dark) {
    m_dark = dark;
    rehighlight();
  }
}

void IrHighlighter::highlightBlock(const QString& text) {
  auto fmt = [&](QColor c, bool bold = false) {
    QTextCharFormat f;
    f.setForeground(c);
    if (bold) f.setFontWeight(QFont::Bold);
    return f;
  };
  struct Rule {
    QRegularExpression re;
    QTextCharFormat format;
    int group;
  };
  static const QRegularExpression kOp(R"(=\s*([a-z_][a-z0-9_]*)\()");
  static const QRegularExpression kBareOp(R"(^\s+([a-z_][a-z0-9_]*)\()");
  static const QRegularExpression kValue(R"(%\??[0-9]+)");
  static const QRegularExpression kType(R"(\b(f32|f64|bf16|f16|i32|i64|u8|u32|bool)\[[0-9,]*\])");
  static const QRegularExpression kAttr(R"(([a-z_]+)=)");
  static const QRegularExpression kLoc(R"(loc\(.*\)$)");
  static const QRegularExpression kFunc(R"(^\s*(func|return)\b)");
  const Rule rules[] = {
      {kAttr, fmt(m_dark ? QColor(150, 170, 190) : QColor(110, 110, 140)), 1},
      {kValue, fmt(m_dark ? QColor(240, 180, 110) : QColor(160, 80, 0)), 0},
      {kType, fmt(m_dark ? QColor(120, 200, 160) : QColor(0, 120, 70)), 0},
      {kOp, fmt(m_dark ? QColor(120, 170, 255) : QColor(20, 70, 200), true), 1},
      {kBareOp, fmt(m_dark ? QColor(120, 170, 255) : QColor(20, 70, 200), true), 1},
      {kFunc, fmt(m_dark ? QColor(220, 130, 220) : QColor(140, 30, 140), true), 1},
      {kLoc, fmt(QColor(128, 128, 128)), 0},
  };
  for (const Rule& r : rules) {
    auto it = r.re.globalMatch(text);
    while (it.hasNext()) {
      auto m = it.next();
      setFormat(static_cast<int>(m.capturedStart(r.group)), static_cast<int>(m.capturedLength(r.group)), r.format);
    }
  }
}

IrPanel::IrPanel(Session* session, QWidget* parent)
    : QWidget(parent), m_session(session), m_header(new QLabel), m_text(new QPlainTextEdit) {
  setObjectName("irPanel");
  m_text->setReadOnly(true);
  m_text->setLineWrapMode(QPlainTextEdit::NoWrap);
  m_text->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
  m_text->setPlaceholderText(tr("Open a project to see its training step in the IR text form."));
  m_highlighter = new IrHighlighter(m_text->document());
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(m_header);
  layout->addWidget(m_text, 1);
  connect(m_session, &Session::stageChanged, this, &IrPanel::showStage);
  connect(m_session, &Session::stagesReady, this, &IrPanel::showStage);
  connect(m_session, &Session::nodeSelected, this, &IrPanel::onNodeSelected);
  connect(m_session, &Session::projectClosed, this, [this] {
    m_shown = nullptr;
    m_line = -1;
    m_syncing = true;
    m_text->clear();
    m_syncing = false;
    m_header->setText(tr("No IR: the project did not open"));
  });
  connect(m_text, &QPlainTextEdit::cursorPositionChanged, this, &IrPanel::onCursorMoved);
}

void IrPanel::changeEvent(QEvent* e) {
  QWidget::changeEvent(e);
  if (e->type() == QEvent::PaletteChange) m_highlighter->setDark(palette().color(QPalette::Window).lightness() < 128);
}

void IrPanel::showStage() {
  const inspect::Stage* stage = m_session->stage();
  if (!stage || stage == m_shown) return;
  m_shown = stage;
  m_highlighter->setDark(palette().color(QPalette::Window).lightness() < 128);
  m_syncing = true;
  m_text->setPlainText(QString::fromStdString(stage->text));
  m_syncing = false;
  m_header->setText(tr("%1 — %2 nodes, %3 lines")
                        .arg(QString::fromStdString(stage->name))
                        .arg(stage->graph->nodes().size())
                        .arg(m_text->blockCount()));
  m_line = -1;
  onNodeSelected(m_session->selectedNode());
}

void IrPanel::onNodeSelected(int node) {
  const inspect::Stage* stage = m_session->stage();
  if (stage != m_shown) showStage();
  QList<QTextEdit::ExtraSelection> extras;
  m_line = -1;
  if (stage && node >= 0 && static_cast<size_t>(node) < stage->nodeLines.size()) {
    m_line = stage->nodeLines[static_cast<size_t>(node)];
    QTextBlock block = m_text->document()->findBlockByNumber(m_line);
    QTextEdit::ExtraSelection sel;
    sel.format.setBackground(palette().color(QPalette::Highlight).lighter(palette().color(QPalette::Window).lightness() < 128 ? 60 : 170));
    sel.format.setProperty(QTextFormat::FullWidthSelection, true);
    sel.cursor = QTextCursor(block);
    extras << sel;
    // A kernel picked in the timeline: the lines of its other nodes too.
    for (int k : m_session->selectedKernelNodes()) {
      if (k == node || k < 0 || static_cast<size_t>(k) >= stage->nodeLines.size()) continue;
      QTextEdit::ExtraSelection other = sel;
      other.cursor = QTextCursor(m_text->document()->findBlockByNumber(stage->nodeLines[static_cast<size_t>(k)]));
      extras << other;
    }
    if (!m_syncing) {
      m_syncing = true;
      m_text->setTextCursor(QTextCursor(block));
      m_text->centerCursor();
      m_syncing = false;
    }
  }
  m_text->setExtraSelections(extras);
}

void IrPanel::onCursorMoved() {
  if (m_syncing) return;
  activateLine(m_text->textCursor().blockNumber());
}

void IrPanel::activateLine(int line) {
  const inspect::Stage* stage = m_session->stage();
  if (!stage) return;
  ir::NodeId n = inspect::nodeAtLine(*stage, line);
  m_syncing = true;
  m_session->selectNode(n);
  m_syncing = false;
}

}  // namespace tsr::studio
