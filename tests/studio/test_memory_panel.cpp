// The Memory panel on the offscreen platform: after a project compiles, the step's live bytes stacked by kind
// (the parameters' and optimizer state's bytes as worked out from the model by hand), the peak marked, the
// buffers live at the peak listed largest first, and a click on one selects its node on the fusion stage.
#include <QAbstractSeries>
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QFile>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QValueAxis>

#include <cmath>

#include "app/studio/main_window.h"
#include "views/memory_panel.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;

class TestMemoryPanel : public QObject {
  Q_OBJECT

 private slots:
  void showsTheStepAndSelectsNodes() {
    QTemporaryDir dir;
    QFile toml(dir.filePath("project.toml"));
    QVERIFY(toml.open(QIODevice::WriteOnly));
    toml.write("[model]\nfamily = \"mlp\"\nsizes = [64, 32, 10]\n[data]\nkind = \"synthetic-digits\"\n"
               "[train]\nbatch_size = 16\nsteps = 1\noptimizer = \"adam\"\n");
    toml.close();
    MainWindow w;
    w.openProject(dir.path());
    MemoryPanel* panel = w.memoryPanel();
    QVERIFY(QTest::qWaitFor([&] { return w.session()->stages() && panel->memory() && !panel->computing(); }, 120000));
    const inspect::StepMemory& m = *panel->memory();
    QVERIFY2(panel->summary().startsWith("Peak "), qPrintable(panel->summary()));
    QVERIFY2(panel->measured().startsWith("measured: no profile yet"), qPrintable(panel->measured()));

    // Sizes by hand: weights 64x32 and 32x10, biases 32 and 10, f32; Adam keeps two moments and a count.
    const int64_t paramBytes = (64 * 32 + 32 + 32 * 10 + 10) * 4;
    const auto& peak = m.live[static_cast<size_t>(m.peakKernel)];
    QCOMPARE(peak[size_t(inspect::MemoryKind::Parameters)], paramBytes);
    QVERIFY(peak[size_t(inspect::MemoryKind::OptimizerState)] >= 2 * paramBytes);
    QVERIFY(peak[size_t(inspect::MemoryKind::OptimizerState)] <= 2 * paramBytes + 16);

    // Six stacked kinds and the peak's line.
    QCOMPARE(panel->chartView()->chart()->series().size(), qsizetype(inspect::kNumMemoryKinds + 1));
    // The bytes axis is ticked at round values (1, 2, 2.5 or 5 times a power of ten apart, from 0) and holds the
    // peak; its ticks were fifths of 1.05 x the peak.
    const auto axes = panel->chartView()->chart()->axes(Qt::Vertical);
    QCOMPARE(axes.size(), qsizetype(1));
    auto* y = qobject_cast<QValueAxis*>(axes.front());
    QVERIFY(y);
    QCOMPARE(y->min(), 0.0);
    const double interval = (y->max() - y->min()) / (y->tickCount() - 1);
    const double mantissa = interval / std::pow(10.0, std::floor(std::log10(interval)));
    QVERIFY2(std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 2.5) < 1e-9 ||
                 std::abs(mantissa - 5) < 1e-9,
             qPrintable(QString("ticks %1 apart up to %2").arg(interval).arg(y->max())));
    const double unit = m.peakBytes >= (int64_t(1) << 30) ? 1024.0 * 1024 * 1024 : m.peakBytes >= (1 << 20) ? 1024.0 * 1024 : 1024.0;
    QVERIFY(y->max() * unit >= static_cast<double>(m.peakBytes));

    // The list: every buffer live at the peak, largest first, summing to the peak.
    QTableWidget* table = panel->table();
    QCOMPARE(table->rowCount(), static_cast<int>(m.atPeak.size()));
    int64_t sum = 0, previous = INT64_MAX;
    int nodeRow = -1;
    for (int row = 0; row < table->rowCount(); ++row) {
      const int64_t bytes = table->item(row, 0)->data(Qt::UserRole).toLongLong();
      QVERIFY(bytes <= previous);
      previous = bytes;
      sum += bytes;
      if (nodeRow < 0 && table->item(row, 3)->data(Qt::UserRole).toInt() >= 0) nodeRow = row;
    }
    QCOMPARE(sum, m.peakBytes);

    // A click on a buffer made by a node selects that node on the fusion stage.
    QVERIFY2(nodeRow >= 0, "no buffer at the peak was made by a node");
    const int node = table->item(nodeRow, 3)->data(Qt::UserRole).toInt();
    w.session()->selectNode(-1);
    table->scrollToItem(table->item(nodeRow, 3));
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, table->visualItemRect(table->item(nodeRow, 3)).center());
    QCOMPARE(w.session()->selectedNode(), node);
    QCOMPARE(w.session()->currentStage(), w.session()->profileStage());
    // ... the node that made it, in the graph the IDE shows.
    const inspect::MemoryBuffer& b = m.buffers[static_cast<size_t>(m.atPeak[static_cast<size_t>(nodeRow)])];
    QCOMPARE(node, b.node);
    const auto& stage = (*w.session()->stages())[static_cast<size_t>(w.session()->profileStage())];
    QCOMPARE(stage.graph->value(b.value).producer, node);
  }
};

QTEST_MAIN(TestMemoryPanel)
#include "test_memory_panel.moc"
