#include "views/plugin_dialog.h"

#include <QDialogButtonBox>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTextBrowser>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace tsr::studio {

namespace {

QString joined(const std::vector<std::string>& items) {
  QStringList l;
  for (const auto& s : items) l << QString::fromStdString(s);
  return l.join(", ");
}

}  // namespace

PluginDialog::PluginDialog(std::vector<plugin::PluginRecord> records,
                           std::vector<passes::PassContext::Report> reports, QWidget* parent)
    : QDialog(parent), m_tree(new QTreeWidget), m_reports(new QTextBrowser) {
  setWindowTitle(tr("Plugins"));
  setObjectName("pluginDialog");
  resize(900, 560);
  m_tree->setObjectName("pluginTree");
  m_tree->setColumnCount(4);
  m_tree->setHeaderLabels({tr("Plugin"), tr("Version"), tr("Status"), tr("Path")});
  m_tree->header()->setSectionResizeMode(QHeaderView::ResizeToContents);
  for (const auto& r : records) {
    auto* item = new QTreeWidgetItem(m_tree);
    QString name = QString::fromStdString(r.name.empty() ? r.path.substr(r.path.find_last_of('/') + 1) : r.name);
    item->setText(0, name);
    item->setText(1, QString::fromStdString(r.version));
    item->setText(2, r.loaded ? tr("loaded") : tr("skipped"));
    item->setText(3, QString::fromStdString(r.path) + " (" + QString::fromStdString(r.origin) + ")");
    item->setToolTip(3, item->text(3));
    if (!r.loaded) {
      item->setForeground(2, QColor(200, 40, 40));
      auto* why = new QTreeWidgetItem(item, {tr("reason"), "", "", QString::fromStdString(r.error)});
      why->setToolTip(3, why->text(3));
      why->setForeground(3, QColor(200, 40, 40));
    }
    if (!r.description.empty()) new QTreeWidgetItem(item, {tr("about"), "", "", QString::fromStdString(r.description)});
    if (!r.sha256.empty()) new QTreeWidgetItem(item, {tr("SHA-256"), "", "", QString::fromStdString(r.sha256)});
    auto add = [&](const QString& what, const std::vector<std::string>& items) {
      if (!items.empty()) new QTreeWidgetItem(item, {what, "", "", joined(items)});
    };
    add(tr("ops"), r.ops);
    add(tr("passes"), r.passes);
    add(tr("model families"), r.families);
    add(tr("panels"), r.panels);
    item->setExpanded(true);
  }
  if (records.empty()) new QTreeWidgetItem(m_tree, {tr("no plugins found"), "", "", ""});

  m_reports->setObjectName("pluginReports");
  QString text;
  for (const auto& r : reports)
    text += QString("== %1 (pass %2) ==\n%3\n").arg(QString::fromStdString(r.name), QString::fromStdString(r.pass),
                                                   QString::fromStdString(r.text));
  m_reports->setPlainText(text.isEmpty() ? tr("No pass reports: open a project (reports come from its compile).") : text);
  QFont mono("monospace");
  mono.setStyleHint(QFont::Monospace);
  m_reports->setFont(mono);

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_tree);
  split->addWidget(m_reports);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(new QLabel(tr("Searched: PROJECT/plugins, TESSERA_PLUGIN_PATH, ~/.config/tessera/plugins, "
                                  "and the plugins that ship with Tessera (first found wins).")));
  layout->addWidget(split, 1);
  layout->addWidget(buttons);
}

}  // namespace tsr::studio
