#include "views/console_panel.h"

#include <QDateTime>
#include <QRegularExpression>
#include <QScrollBar>
#include <QTextBrowser>
#include <QUrl>
#include <QVBoxLayout>

namespace tsr::studio {

ConsolePanel::ConsolePanel(Session* session, QWidget* parent)
    : QWidget(parent), m_session(session), m_browser(new QTextBrowser) {
  setObjectName("consolePanel");
  m_browser->setOpenLinks(false);
  m_browser->document()->setMaximumBlockCount(20000);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->addWidget(m_browser);
  connect(m_session, &Session::message, this, &ConsolePanel::append);
  connect(m_browser, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    if (url.scheme() == "node") {
      m_session->selectNode(url.path().toInt());
    } else if (url.scheme() == "file") {
      emit fileLocationActivated(url.path(), url.fragment().toInt());
    }
  });
}

void ConsolePanel::append(const QString& level, const QString& text) {
  static const QRegularExpression kFileLine(R"(([\w./-]*project\.toml):(\d+))");
  static const QRegularExpression kNode(R"(\bnode (\d+)\b)");
  QString html = text.toHtmlEscaped();
  html.replace(kFileLine, R"(<a href="file:\1#\2">\1:\2</a>)");
  html.replace(kNode, R"(<a href="node:\1">node \1</a>)");
  html.replace("\n", "<br>");
  QString color = level == "error" ? "#d04040" : level == "warning" ? "#c08020" : "";
  QString time = QDateTime::currentDateTime().toString("HH:mm:ss");
  QString line = QString("<span style=\"color:gray\">%1</span> ").arg(time) +
                 (color.isEmpty() ? html : QString("<span style=\"color:%1\">%2</span>").arg(color, html));
  m_browser->append(line);
  m_browser->verticalScrollBar()->setValue(m_browser->verticalScrollBar()->maximum());
}

QString ConsolePanel::plainText() const { return m_browser->toPlainText(); }

}  // namespace tsr::studio
