#include "views/graph_box_item.h"

#include <QGraphicsSceneDragDropEvent>
#include <QGraphicsSceneMouseEvent>
#include <QMimeData>
#include <QPainter>
#include <QPalette>
#include <QStyleOptionGraphicsItem>

#include "views/session.h"

namespace tsr::studio {

GraphBoxItem::GraphBoxItem(const inspect::ItemBox& box, std::function<void(GraphBoxItem*)> onDoubleClick)
    : m_box(box), m_onDoubleClick(std::move(onDoubleClick)) {
  setPos(box.x, box.y);
  // An expanded group lies under its level, a kernel's cluster over the group and under its nodes.
  setZValue(box.depth * 2 + (isExpandedGroup() ? 0 : isCluster() ? 0.5 : 1));
  if (!isFrame()) setFlag(ItemIsSelectable);
  setToolTip(QString::fromStdString(box.label));
  setAcceptHoverEvents(false);
}

void GraphBoxItem::paint(QPainter* p, const QStyleOptionGraphicsItem* option, QWidget*) {
  const QPalette& pal = option->palette;
  bool dark = pal.color(QPalette::Window).lightness() < 128;
  QRectF r(0, 0, m_box.w, m_box.h);
  p->setRenderHint(QPainter::Antialiasing);
  QColor border = dark ? QColor(150, 160, 175) : QColor(90, 100, 115);
  QColor fill;
  switch (m_box.item.kind) {
    case inspect::LevelItem::Kind::Group:
      fill = m_box.item.expanded ? (dark ? QColor(40, 46, 56, 200) : QColor(236, 241, 248, 220))
                                 : (dark ? QColor(52, 82, 120) : QColor(198, 219, 245));
      break;
    case inspect::LevelItem::Kind::Node:
      fill = dark ? QColor(58, 62, 70) : QColor(252, 252, 250);
      break;
    case inspect::LevelItem::Kind::Input:
      fill = dark ? QColor(70, 92, 62) : QColor(221, 239, 214);
      break;
    case inspect::LevelItem::Kind::Cluster:
      fill = dark ? QColor(70, 70, 120, 110) : QColor(232, 232, 250, 200);
      border = dark ? QColor(150, 150, 235) : QColor(91, 91, 214);
      break;
  }
  if (m_fill.isValid() && !isFrame()) fill = m_fill;
  if (m_diffColor.isValid() && !isCluster())
    fill = isExpandedGroup() ? QColor(m_diffColor.red(), m_diffColor.green(), m_diffColor.blue(), 60) : m_diffColor;
  QPen pen(border, 1);
  if (m_readThrough) pen.setStyle(Qt::DashLine);
  if (m_hit) pen = QPen(QColor(240, 150, 20), 3);
  if (m_conflict) pen = QPen(QColor(215, 40, 40), 3);
  if (isSelected()) pen = QPen(pal.color(QPalette::Highlight), 3);
  p->setPen(pen);
  p->setBrush(fill);
  p->drawRoundedRect(r, 6, 6);
  QColor text = fill.lightness() < 128 ? QColor(235, 238, 242) : QColor(25, 28, 32);
  if (isFrame()) text = pal.color(QPalette::WindowText);
  if (isCluster()) text = border;
  p->setPen(text);
  QFont f = p->font();
  f.setPointSizeF(8.5);
  p->setFont(f);
  if (isCluster()) {
    p->drawText(QRectF(6, 1, m_box.w - 12, 16), Qt::AlignLeft | Qt::AlignVCenter, QString::fromStdString(m_box.label));
  } else if (isExpandedGroup()) {
    p->drawText(QRectF(8, 2, m_box.w - 16, 20), Qt::AlignLeft | Qt::AlignVCenter,
                QString::fromUtf8("\u25be ") + QString::fromStdString(m_box.label));
  } else {
    QString label = QString::fromStdString(m_box.label);
    if (isGroup()) label = QString::fromUtf8("\u25b8 ") + label;
    p->drawText(r, Qt::AlignCenter, label);
  }
}

void GraphBoxItem::dragEnterEvent(QGraphicsSceneDragDropEvent* e) {
  e->setAccepted(m_onDrop && e->mimeData()->hasFormat(kPartitionSpecMime));
}

void GraphBoxItem::dropEvent(QGraphicsSceneDragDropEvent* e) {
  if (!m_onDrop || !e->mimeData()->hasFormat(kPartitionSpecMime)) return e->ignore();
  m_onDrop(QString::fromUtf8(e->mimeData()->data(kPartitionSpecMime)));
  e->acceptProposedAction();
}

void GraphBoxItem::mouseDoubleClickEvent(QGraphicsSceneMouseEvent* e) {
  if (isGroup() && m_onDoubleClick) {
    // An expanded group folds from its title bar only, so double-clicks inside reach its contents.
    if (!isExpandedGroup() || e->pos().y() < 22) m_onDoubleClick(this);
    return;
  }
  QGraphicsItem::mouseDoubleClickEvent(e);
}

}  // namespace tsr::studio
