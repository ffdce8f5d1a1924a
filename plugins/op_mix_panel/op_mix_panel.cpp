// A small panel plugin for the IDE: "Op Mix", the ops of the graph on screen counted by op with their FLOPs
// (from the ops' cost rules), and below it the reports the compile's passes wrote (the op_stats plugin's
// op_stats.txt when that plugin is loaded). It registers nothing but the panel.
#include <algorithm>
#include <map>

#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include "engine/ops/registry.h"
#include "engine/plugin/plugin.h"
#include "engine/version.h"
#include "views/plugin_panel.h"

namespace {

using namespace tsr;

class OpMixPanel : public studio::PluginPanel {
 public:
  explicit OpMixPanel(QWidget* parent) : m_widget(new QWidget(parent)) {
    m_widget->setObjectName("opMixPanel");
    m_title = new QLabel(QObject::tr("Open a project to see its ops."));
    m_table = new QTableWidget(0, 4);
    m_table->setObjectName("opMixTable");
    m_table->setHorizontalHeaderLabels({QObject::tr("op"), QObject::tr("family"), QObject::tr("nodes"), QObject::tr("MFLOP")});
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    m_table->verticalHeader()->hide();
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_reports = new QPlainTextEdit;
    m_reports->setObjectName("opMixReports");
    m_reports->setReadOnly(true);
    QFont mono("monospace");
    mono.setStyleHint(QFont::Monospace);
    m_reports->setFont(mono);
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(m_table);
    split->addWidget(m_reports);
    auto* layout = new QVBoxLayout(m_widget);
    layout->addWidget(m_title);
    layout->addWidget(split, 1);
  }

  QWidget* widget() override { return m_widget; }

  void setStages(const std::vector<inspect::Stage>& stages) override {
    m_stages = stages;
    QString text;
    if (!stages.empty())
      for (const auto& r : stages.back().reports)
        text += QString::fromStdString("== " + r.name + " ==\n" + r.text + "\n");
    m_reports->setPlainText(text.isEmpty() ? QObject::tr("No pass reports (the op_stats plugin writes one).") : text);
    setCurrentStage(static_cast<int>(stages.size()) - 1);
  }

  void setCurrentStage(int index) override {
    if (index < 0 || index >= static_cast<int>(m_stages.size()) || !m_stages[static_cast<size_t>(index)].graph) return;
    const inspect::Stage& s = m_stages[static_cast<size_t>(index)];
    const ir::Graph& g = *s.graph;
    const ir::OpRegistry& reg = ops::registry();
    struct Row {
      std::string family;
      int nodes = 0;
      double flops = 0;
    };
    std::map<std::string, Row> rows;
    for (const ir::Node& n : g.nodes()) {
      const ir::OpDef* def = reg.find(n.op);
      Row& r = rows[def ? def->name : "?"];
      r.family = def ? def->family : "?";
      r.nodes += 1;
      r.flops += ir::nodeCost(g, n, reg).flops;
    }
    std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.nodes > b.second.nodes; });
    m_title->setText(QObject::tr("%1: %2 nodes, %3 ops").arg(QString::fromStdString(s.name)).arg(g.nodes().size()).arg(sorted.size()));
    m_table->setRowCount(static_cast<int>(sorted.size()));
    for (int i = 0; i < static_cast<int>(sorted.size()); ++i) {
      const auto& [op, r] = sorted[static_cast<size_t>(i)];
      m_table->setItem(i, 0, new QTableWidgetItem(QString::fromStdString(op)));
      m_table->setItem(i, 1, new QTableWidgetItem(QString::fromStdString(r.family)));
      auto* nodes = new QTableWidgetItem;
      nodes->setData(Qt::DisplayRole, r.nodes);
      m_table->setItem(i, 2, nodes);
      auto* flops = new QTableWidgetItem(QString::number(r.flops / 1e6, 'f', 3));
      m_table->setItem(i, 3, flops);
    }
  }

 private:
  QWidget* m_widget;
  QLabel* m_title;
  QTableWidget* m_table;
  QPlainTextEdit* m_reports;
  std::vector<inspect::Stage> m_stages;
};

int init(TesseraPluginHost* h) {
  plugin::Host& host = plugin::Host::from(h);
  host.addPanel({"op_mix", "Op Mix", [](void* parent) -> void* {
                   return static_cast<studio::PluginPanel*>(new OpMixPanel(static_cast<QWidget*>(parent)));
                 }});
  return 0;
}

const TesseraPluginInfo kInfo = {TESSERA_PLUGIN_API_VERSION, "op_mix_panel", "1.0.0",
                                 "the Op Mix panel: ops of the graph on screen, and the passes' reports", tsr::kVersion,
                                 init};

}  // namespace

extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v1(void) { return &kInfo; }
