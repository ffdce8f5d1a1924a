#pragma once
// The Memory panel: the compiled training step's live bytes over its kernels as an area chart stacked by kind
// (parameters, optimizer state, gradients, activations, temporaries, inputs), the peak marked, and the buffers
// live at the peak listed with their size, kind, the node that made them and its source line. Clicking a buffer
// selects its node in the graph (the fusion stage's). Computed off the UI thread after each compile.
#include <memory>

#include <QFutureWatcher>
#include <QWidget>

#include "engine/inspect/memory_view.h"
#include "views/session.h"

class QChart;
class QChartView;
class QLabel;
class QTableWidget;

namespace tsr::studio {

class MemoryPanel : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryPanel(Session* session, QWidget* parent = nullptr);
  ~MemoryPanel() override;

  // What is shown (null before the first compile, or when it failed: see summary()).
  std::shared_ptr<const inspect::StepMemory> memory() const { return m_memory; }
  bool computing() const;
  QString summary() const;
  QString measured() const { return m_measured; }
  QChartView* chartView() const { return m_view; }
  QTableWidget* table() const { return m_table; }

 private:
  struct Computation {
    Result<inspect::StepMemory> memory;
    std::string measured;  // the measured side, from the project's latest profile
  };
  using Computed = std::shared_ptr<Computation>;
  void onStagesReady();
  void onComputed();
  void showMemory();
  void onRowActivated(int row);

  Session* m_session;
  QLabel* m_summary;
  QChartView* m_view;
  QChart* m_chart;
  QTableWidget* m_table;
  QFutureWatcher<Computed>* m_watcher;
  std::shared_ptr<const inspect::StepMemory> m_memory;
  QString m_measured;
  bool m_stale = false;  // a compile finished while one was being computed
};

}  // namespace tsr::studio
