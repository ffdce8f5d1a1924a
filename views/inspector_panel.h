#pragma once
// The Inspector: everything about the selected node: op, attributes, result avals, provenance (module path
// and source line), producers and consumers (links select them), cost, and the decisions passes recorded.
#include <QWidget>

#include "views/session.h"

class QTextBrowser;

namespace tsr::studio {

class InspectorPanel : public QWidget {
  Q_OBJECT
 public:
  explicit InspectorPanel(Session* session, QWidget* parent = nullptr);
  QString plainText() const;  // what is shown, as text (tests)

 private:
  void show(int node);

  Session* m_session;
  QTextBrowser* m_browser;
};

}  // namespace tsr::studio
