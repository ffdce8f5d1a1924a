#pragma once
// The Roofline panel: each kernel of the project's latest profile as a point, arithmetic intensity (FLOPs per
// byte) against achieved FLOP/s, on log axes under this machine's roofs (the SGEMM peak and the copy bandwidth,
// measured once per process off the UI thread). Hovering a point names the kernel and how far below its roof it
// runs; clicking one selects the kernel and its nodes on the fusion stage.
#include <memory>
#include <optional>

#include <QFutureWatcher>
#include <QWidget>

#include "engine/inspect/roofline.h"
#include "views/session.h"

class QChart;
class QChartView;
class QLabel;

namespace tsr::studio {

class RooflinePanel : public QWidget {
  Q_OBJECT
 public:
  explicit RooflinePanel(Session* session, QWidget* parent = nullptr);
  ~RooflinePanel() override;

  const inspect::Roofline& roofline() const { return m_roofline; }
  const std::optional<inspect::Roofs>& roofs() const { return m_roofs; }
  bool measuring() const;
  QString summary() const;
  QChartView* chartView() const { return m_view; }
  // What a click on point i does: selects its kernel's nodes.
  void selectPoint(int i);

 private:
  void refresh();
  void draw();

  Session* m_session;
  QLabel* m_summary;
  QChartView* m_view;
  QChart* m_chart;
  QFutureWatcher<inspect::Roofs>* m_watcher;
  std::optional<inspect::Roofs> m_roofs;
  inspect::Roofline m_roofline;
};

}  // namespace tsr::studio
