#include "views/shard_grid_widget.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

namespace tsr::studio {

std::vector<std::vector<int>> ShardGridWidget::blockDevices(const inspect::TensorLayout::Cell& cell) {
  // Each range reads "[0:196, 0:512] on 0,2,4,6".
  std::vector<std::vector<int>> out;
  for (const std::string& range : cell.ranges) {
    const QString text = QString::fromStdString(range);
    const int on = static_cast<int>(text.lastIndexOf(" on "));
    std::vector<int> devices;
    for (const QString& d : text.mid(on + 4).split(',', Qt::SkipEmptyParts)) {
      bool ok = false;
      const int id = d.trimmed().toInt(&ok);
      if (ok) devices.push_back(id);
    }
    if (on < 0 || devices.empty()) return {cell.devices};  // not in that form: the cell as one block
    out.push_back(std::move(devices));
  }
  if (out.empty()) out.push_back(cell.devices);
  return out;
}

ShardGridWidget::ShardGridWidget(QWidget* parent) : QWidget(parent) {
  setObjectName("shardGrid");
  setMinimumSize(220, 160);
  setMouseTracking(true);
}

void ShardGridWidget::setTensorLayout(std::optional<inspect::TensorLayout> layout, int numDevices) {
  m_layout = std::move(layout);
  m_numDevices = std::max(1, numDevices);
  update();
}

QRectF ShardGridWidget::gridRect() const {
  QRectF r = QRectF(rect()).adjusted(8, 44, -8, -8);
  if (!m_layout) return r;
  // The grid keeps the tensor's aspect within bounds (a [8192, 10] matrix is not a hair).
  auto extent = [&](int dim) { return dim >= 0 ? static_cast<double>(m_layout->aval.shape[dim]) : 1.0; };
  double aspect = m_layout->rowDim >= 0 ? extent(m_layout->colDim) / extent(m_layout->rowDim) : 8.0;
  aspect = std::clamp(aspect, 0.5, 8.0);
  double w = r.width(), h = w / aspect;
  if (h > r.height()) {
    h = r.height();
    w = h * aspect;
  }
  return QRectF(r.left() + (r.width() - w) / 2, r.top(), w, h);
}

QRectF ShardGridWidget::cellRect(int index) const {
  QRectF g = gridRect();
  const auto& c = m_layout->cells[static_cast<size_t>(index)];
  double cw = g.width() / static_cast<double>(m_layout->cols), ch = g.height() / static_cast<double>(m_layout->rows);
  return QRectF(g.left() + static_cast<double>(c.col) * cw, g.top() + static_cast<double>(c.row) * ch, cw, ch);
}

int ShardGridWidget::cellAt(QPointF pos) const {
  if (!m_layout) return -1;
  for (size_t i = 0; i < m_layout->cells.size(); ++i)
    if (cellRect(static_cast<int>(i)).contains(pos)) return static_cast<int>(i);
  return -1;
}

QStringList ShardGridWidget::headerLines() const {
  if (!m_layout) return {};
  const inspect::TensorLayout& l = *m_layout;
  QString dims;
  if (l.rowDim >= 0) dims = tr("rows: dim %1, columns: dim %2").arg(l.rowDim).arg(l.colDim);
  else if (l.colDim >= 0) dims = tr("columns: dim %1").arg(l.colDim);
  QStringList others;
  for (int d : l.otherSplitDims) others << QString::number(d);
  if (!others.isEmpty()) dims += tr("; dim %1 split too (its blocks listed per cell)").arg(others.join(", "));
  const int64_t blocks =
      l.rows * l.cols * std::max<int64_t>(1, l.cells.empty() ? 1 : static_cast<int64_t>(l.cells.front().ranges.size()));
  return {QString("%1  %2  %3").arg(QString::fromStdString(l.name), QString::fromStdString(l.aval.toString()),
                                    QString::fromStdString(l.spec)),
          tr("%1 block(s) of %2, %3 each, on %4 device(s) each%5")
              .arg(blocks)
              .arg(QString::fromStdString(l.blockShape.toString()), QString::fromStdString(inspect::formatBytes(l.blockBytes)))
              .arg(l.replicas)
              .arg(dims.isEmpty() ? QString() : "; " + dims)};
}

void ShardGridWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const QPalette& pal = palette();
  p.fillRect(rect(), pal.color(QPalette::Base));
  if (!m_layout) {
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(rect(), Qt::AlignCenter | Qt::TextWordWrap,
               tr("Drop a PartitionSpec on a parameter, or pick an argument, to see its blocks per device"));
    return;
  }
  const inspect::TensorLayout& l = *m_layout;
  // Cut at the widget's width with an ellipsis; the whole lines are the header's tooltip.
  const QStringList header = headerLines();
  p.setPen(pal.color(QPalette::WindowText));
  QFont f = font();
  f.setBold(true);
  p.setFont(f);
  p.drawText(QRectF(8, 2, width() - 16, 20), Qt::AlignLeft | Qt::AlignVCenter,
             p.fontMetrics().elidedText(header[0], Qt::ElideRight, width() - 16));
  f.setBold(false);
  p.setFont(f);
  p.drawText(QRectF(8, 22, width() - 16, 18), Qt::AlignLeft | Qt::AlignVCenter,
             p.fontMetrics().elidedText(header[1], Qt::ElideRight, width() - 16));
  QFont small = font();
  small.setPointSizeF(std::max(6.5, font().pointSizeF() - 1));
  for (size_t i = 0; i < l.cells.size(); ++i) {
    const auto& c = l.cells[i];
    QRectF r = cellRect(static_cast<int>(i));
    // One stripe per block in the cell (more than one where a dim off the grid is split too), in the colour of
    // the first device holding it. A replicated block is one colour however many devices hold it, as
    // jax.debug.visualize_array_sharding draws it: stripes per device read as a split along the rows.
    const std::vector<std::vector<int>> blocks = blockDevices(c);
    const auto n = static_cast<double>(blocks.size());
    for (size_t k = 0; k < blocks.size(); ++k) {
      QRectF s(r.left(), r.top() + r.height() * static_cast<double>(k) / n, r.width(), r.height() / n);
      const int first = blocks[k].empty() ? 0 : blocks[k].front();
      p.fillRect(s, QColor::fromHsv(inspect::deviceHue(first, m_numDevices), 95, 235));
    }
    p.setPen(QPen(QColor(40, 40, 40), 1.2));
    p.setBrush(Qt::NoBrush);
    p.drawRect(r);
    QStringList devs;
    for (int d : c.devices) devs << QString::number(d);
    QString label = tr("dev %1").arg(devs.join(","));
    if (r.height() > 34 && r.width() > 60)
      label += QString("\n%1\n%2").arg(QString::fromStdString(l.blockShape.toString()),
                                        QString::fromStdString(inspect::formatBytes(l.blockBytes)));
    if (c.ranges.size() > 1 && r.height() > 60) label += tr("\n×%1 blocks").arg(c.ranges.size());
    else if (l.replicas > 1 && r.height() > 60) label += tr("\nreplicated ×%1").arg(l.replicas);
    p.setFont(r.width() < 90 ? small : font());
    QRectF box = p.boundingRect(r, Qt::AlignCenter, label).adjusted(-3, -1, 3, 1);
    p.fillRect(box.intersected(r), QColor(255, 255, 255, 170));
    p.setPen(QColor(20, 20, 20));
    p.drawText(r, Qt::AlignCenter, label);
  }
}

bool ShardGridWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && m_layout) {
    auto* h = static_cast<QHelpEvent*>(e);
    int i = cellAt(h->pos());
    if (i < 0 && h->pos().y() < gridRect().top()) {  // the header: its lines whole
      QToolTip::showText(h->globalPos(), headerLines().join('\n'), this);
      return true;
    }
    if (i < 0) {
      QToolTip::hideText();
      return true;
    }
    const auto& c = m_layout->cells[static_cast<size_t>(i)];
    QString text = tr("block %1 × %2 of %3, %4 each (%5 replica(s))")
                       .arg(c.row)
                       .arg(c.col)
                       .arg(QString::fromStdString(m_layout->blockShape.toString()))
                       .arg(QString::fromStdString(inspect::formatBytes(m_layout->blockBytes)))
                       .arg(m_layout->replicas);
    for (const auto& r : c.ranges) text += "\n" + QString::fromStdString(r);
    QToolTip::showText(h->globalPos(), text, this);
    return true;
  }
  return QWidget::event(e);
}

}  // namespace tsr::studio
