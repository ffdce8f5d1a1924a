#pragma once
// The graph panel's boxes: an op, a graph input, or a module group (collapsed, or expanded with its title bar),
// or a fused kernel's cluster drawn around its nodes; with the marks the panel sets on them (search hits, the
// overlay's fill, the stage diff's colour, a sharding conflict) and a PartitionSpec dropped on a graph input.
#include <functional>

#include <QColor>
#include <QGraphicsItem>
#include <QString>

#include "engine/inspect/graph_layout.h"

namespace tsr::studio {

// One box of the view: an op, a graph input, or a module group (collapsed, or expanded with its title bar).
class GraphBoxItem : public QGraphicsItem {
 public:
  GraphBoxItem(const inspect::ItemBox& box, std::function<void(GraphBoxItem*)> onDoubleClick);

  const inspect::ItemBox& box() const { return m_box; }
  bool isExpandedGroup() const { return m_box.item.kind == inspect::LevelItem::Kind::Group && m_box.item.expanded; }
  bool isGroup() const { return m_box.item.kind == inspect::LevelItem::Kind::Group; }
  bool isCluster() const { return m_box.item.kind == inspect::LevelItem::Kind::Cluster; }
  // Drawn around other boxes: an expanded group or a kernel's cluster.
  bool isFrame() const { return isExpandedGroup() || isCluster(); }
  // A view its consumers read through (no kernel of its own): a dashed border.
  void setReadThrough(bool on) {
    m_readThrough = on;
    update();
  }
  void setHit(bool hit) {
    if (hit != m_hit) {
      m_hit = hit;
      update();
    }
  }
  void setFill(QColor c) {
    m_fill = c;
    update();
  }
  void setDiffColor(QColor c) {
    m_diffColor = c;
    update();
  }
  // Sharding: the box's spec and origin (appended to its tooltip), a conflict (red border), and for a graph
  // input the handler of a PartitionSpec dropped on it.
  void setSharding(const QString& text, bool conflict) {
    if (m_baseTip.isNull()) m_baseTip = toolTip();
    setToolTip(text.isEmpty() ? m_baseTip : m_baseTip + "\n" + text);
    if (conflict != m_conflict) {
      m_conflict = conflict;
      update();
    }
  }
  void setDropHandler(std::function<void(const QString& spec)> onDrop) {
    m_onDrop = std::move(onDrop);
    setAcceptDrops(static_cast<bool>(m_onDrop));
  }
  void dropSpec(const QString& spec) {
    if (m_onDrop) m_onDrop(spec);
  }

  QRectF boundingRect() const override { return QRectF(-2, -2, m_box.w + 4, m_box.h + 4); }

  void paint(QPainter* p, const QStyleOptionGraphicsItem* option, QWidget*) override;

 protected:
  void dragEnterEvent(QGraphicsSceneDragDropEvent* e) override;
  void dropEvent(QGraphicsSceneDragDropEvent* e) override;
  void mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) override;

 private:
  inspect::ItemBox m_box;
  std::function<void(GraphBoxItem*)> m_onDoubleClick;
  bool m_hit = false;
  bool m_readThrough = false;
  QColor m_fill;
  QColor m_diffColor;
  bool m_conflict = false;
  QString m_baseTip;
  std::function<void(const QString&)> m_onDrop;
};

}  // namespace tsr::studio
