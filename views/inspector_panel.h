#pragma once
// The Inspector: everything about the selected node: op, attributes, result avals, provenance (module path
// and source line), producers and consumers (links select them), cost, and the decisions passes recorded.
// With a sharding plan (the sharding panel's), every operand and result shows its sharding and where it came
// from, at any stage.
#include <QWidget>

#include <memory>

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
  // Two nodes compared: whether they share a kernel and, if not, the fusion pass's reason and what would fuse them.
  void showPair(int a, int b);
  // With nothing selected at a stage with a fusion plan: the costliest boundaries between kernels.
  void showFusionSummary();
  // The sharding plan carried to the current stage (cached per stage and plan); null without one.
  const sharding::ShardingPlan* stagePlan(QString* error);

  Session* m_session;
  struct PlanCache {
    const void* stage = nullptr;
    const void* plan = nullptr;
    std::shared_ptr<const sharding::ShardingPlan> value;
    QString error;
  } m_planCache;
  QTextBrowser* m_browser;
};

}  // namespace tsr::studio
