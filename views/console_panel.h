#pragma once
// The Console: engine logs, compile events and run output, errors in red. A location in a message
// ("project.toml:12", "node 42") is a link: it opens the line in the project panel or selects the node.
#include <QWidget>

#include "views/session.h"

class QTextBrowser;

namespace tsr::studio {

class ConsolePanel : public QWidget {
  Q_OBJECT
 public:
  explicit ConsolePanel(Session* session, QWidget* parent = nullptr);

  void append(const QString& level, const QString& text);
  QString plainText() const;

 signals:
  void fileLocationActivated(const QString& file, int line);

 private:
  Session* m_session;
  QTextBrowser* m_browser;
};

}  // namespace tsr::studio
