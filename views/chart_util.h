#pragma once
// What the chart panels (Metrics, Memory, Roofline) share.
#include <QChart>

namespace tsr::studio {

// Removes every series and axis of the chart (a chart is rebuilt whole when its data changes).
inline void clearChart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* axis : chart->axes()) {
    chart->removeAxis(axis);
    delete axis;
  }
}

}  // namespace tsr::studio
