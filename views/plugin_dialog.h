#pragma once
// Help › Plugins: every plugin the IDE tried, as `tessera plugins` lists them: name, version, path, where it was
// found, and what it registers (ops, passes, model families, panels), or why it was skipped. Below, the reports
// the last compile's passes wrote (a plugin's op statistics).
#include <vector>

#include <QDialog>

#include "engine/inspect/graph_stages.h"
#include "engine/inspect/plugins.h"

class QTreeWidget;
class QTextBrowser;

namespace tsr::studio {

class PluginDialog : public QDialog {
  Q_OBJECT
 public:
  PluginDialog(std::vector<plugin::PluginRecord> records, std::vector<passes::PassContext::Report> reports,
               QWidget* parent = nullptr);

  QTreeWidget* tree() const { return m_tree; }
  QTextBrowser* reportView() const { return m_reports; }

 private:
  QTreeWidget* m_tree;
  QTextBrowser* m_reports;
};

}  // namespace tsr::studio
