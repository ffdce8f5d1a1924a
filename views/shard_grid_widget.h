#pragma once
// One tensor's blocks on the device grid, as jax.debug.visualize_array_sharding draws them: a cell per block
// along the two dims on the grid (sized like the block), in the colour of the first device that holds it (a
// replicated block is one colour, labelled with all its devices), striped where a dim off the grid splits the
// cell into several blocks; labelled with the devices, the block's shape and bytes; hover for each block's
// element ranges.
#include <optional>

#include <QStringList>
#include <QWidget>

#include "engine/inspect/sharding_view.h"

namespace tsr::studio {

class ShardGridWidget : public QWidget {
  Q_OBJECT
 public:
  explicit ShardGridWidget(QWidget* parent = nullptr);

  void setTensorLayout(std::optional<inspect::TensorLayout> layout, int numDevices);
  const std::optional<inspect::TensorLayout>& tensorLayout() const { return m_layout; }
  // The cell under a point of the widget (-1: none), for tooltips and tests.
  int cellAt(QPointF pos) const;
  QSize sizeHint() const override { return {360, 260}; }
  // The devices holding each block of a cell (one list per block: its replicas), from the cell's ranges.
  static std::vector<std::vector<int>> blockDevices(const inspect::TensorLayout::Cell& cell);
  // The title (name, shape, spec) and the subtitle (blocks, their size, replicas, the grid's dims) the widget
  // draws above the grid, whole (drawn cut to its width, shown whole in the header's tooltip). Empty: no tensor.
  QStringList headerLines() const;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;

 private:
  QRectF gridRect() const;
  QRectF cellRect(int index) const;

  std::optional<inspect::TensorLayout> m_layout;
  int m_numDevices = 1;
};

}  // namespace tsr::studio
