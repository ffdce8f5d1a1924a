// The Metrics panel on the offscreen platform: dense series (200,000 points per metric, two metrics, two runs)
// are drawn with at most two points per pixel column of the plot, and a one-step spike is in the drawn curve at
// every zoom; zoom and resize reduce again; several metrics share a chart; x in tokens is step * batch_size *
// seq_len of each run, falling back to steps (and saying why) when a run is not a language model. The store is
// read on the panel's reader thread: the tests wait for its answers.
#include <cmath>

#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QLineSeries>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>
#include <QValueAxis>
#include <QWheelEvent>

#include "engine/store/run_store.h"
#include "tests/test_main.h"
#include "views/metrics_panel.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;

namespace {

constexpr int64_t kSteps = 200'000;
constexpr int64_t kLossSpike = 123'457;  // run a's loss jumps to 50 for this one step
constexpr int64_t kGradSpike = 77'777;   // run b's grad_norm drops to 0.01 for this one step

double lossAt(int64_t step, double offset) { return offset + 2.0 + 8.0 / (1.0 + 0.001 * step) + 0.01 * std::sin(step); }
double gradNormAt(int64_t step) { return 1.0 + 0.5 * std::cos(0.01 * step); }

// Two runs of kSteps steps logging loss and grad_norm every step, written in batches as training writes them.
bool writeDenseStore(const std::string& path, int64_t& a, int64_t& b) {
  auto s = store::RunStore::open(path);
  if (!s.ok()) return false;
  a = *s->createRun("a", "p", "");
  b = *s->createRun("b", "p", "");
  for (int64_t run : {a, b}) {
    std::vector<store::StepMetrics> batch;
    for (int64_t step = 0; step < kSteps; ++step) {
      double loss = run == a && step == kLossSpike ? 50.0 : lossAt(step, run == a ? 0.0 : 0.5);
      double grad = run == b && step == kGradSpike ? 0.01 : gradNormAt(step);
      batch.push_back({step, 1000.0 + 0.1 * static_cast<double>(step), {{"loss", loss}, {"grad_norm", grad}}});
      if (batch.size() == 20'000) {
        if (!s->logMetricsBatch(run, batch).ok()) return false;
        batch.clear();
      }
    }
  }
  return true;
}

int plotWidth(const MetricsPanel& m) {
  return static_cast<int>(std::lround(m.chartView()->chart()->plotArea().width()));
}

// The drawn curve is sorted by x and has at most two points per pixel column, plus one on either side.
void checkReduced(const QList<QPointF>& curve, int columns) {
  QVERIFY2(curve.size() <= 2 * columns + 2,
           qPrintable(QString("%1 points for %2 columns").arg(curve.size()).arg(columns)));
  for (qsizetype i = 1; i < curve.size(); ++i) QVERIFY(curve[i - 1].x() < curve[i].x());
}

// Waits until the panel has taken in every read asked for (they run on its reader thread).
bool answered(const MetricsPanel& m) { return QTest::qWaitFor([&] { return !m.reading(); }, 30000); }

double yMax(const MetricsPanel& m) {
  auto* y = qobject_cast<QValueAxis*>(m.chartView()->chart()->axes(Qt::Vertical).value(0));
  return y ? y->max() : NAN;
}

}  // namespace

class TestMetricsPanel : public QObject {
  Q_OBJECT

 private slots:
  void denseSeriesAreDrawnByLevelOfDetail() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    int64_t a = 0, b = 0;
    QVERIFY(writeDenseStore(path, a, b));
    Session session;
    MetricsPanel m(&session);
    m.resize(1000, 600);
    m.show();
    QVERIFY(QTest::qWaitForWindowExposed(&m));
    m.setDatabase(QString::fromStdString(path));
    m.setRuns({a, b});
    m.setMetrics({"loss", "grad_norm"});
    m.setSmoothing(0);
    QVERIFY(answered(m));
    QTRY_COMPARE(m.plotColumns(), plotWidth(m));
    const int columns = m.plotColumns();
    QVERIFY2(columns > 300, qPrintable(QString::number(columns)));
    for (int64_t run : {a, b}) {
      for (QString key : {"loss", "grad_norm"}) {
        QCOMPARE(static_cast<int64_t>(m.points(run, key).size()), kSteps);
        QList<QPointF> curve = m.curve(run, key);
        checkReduced(curve, columns);
        QVERIFY(curve.size() > columns);  // every column has points
        QCOMPARE(curve.front(), QPointF(0, key == "grad_norm" ? gradNormAt(0) : lossAt(0, run == a ? 0.0 : 0.5)));
        QCOMPARE(curve.back().x(), double(kSteps - 1));
      }
    }
    // The spikes: one step in 200,000, each drawn.
    QVERIFY(m.curve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
    QVERIFY(m.curve(b, "grad_norm").contains(QPointF(kGradSpike, 0.01)));
    QCOMPARE(yMax(m), 50.0 + (50.0 - 0.01) * 0.05);  // y fits the drawn points, spike included

    // Smoothed: the faint raw curve under the smoothed one keeps the spike; both are reduced.
    m.setSmoothing(0.9);
    checkReduced(m.curve(a, "loss"), columns);
    checkReduced(m.rawCurve(a, "loss"), columns);
    QVERIFY(m.rawCurve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
    QVERIFY(!m.curve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
    m.setSmoothing(0);

    // Zoomed: the visible range is reduced again, with one point beyond each edge.
    m.setXRange(120'000, 130'000);
    QList<QPointF> zoomed = m.curve(a, "loss");
    checkReduced(zoomed, columns);
    QVERIFY(zoomed.size() > columns);
    QVERIFY(zoomed.front().x() < 120'000 && zoomed[1].x() >= 120'000);
    QVERIFY(zoomed.back().x() > 130'000 && zoomed[zoomed.size() - 2].x() <= 130'000);
    QVERIFY(zoomed.contains(QPointF(kLossSpike, 50.0)));
    // Fewer steps than columns: every one of them.
    m.setXRange(123'400, 123'600.5);
    QCOMPARE(m.curve(a, "loss").size(), 201 + 2);
    QVERIFY(m.curve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
    // Away from the spike the y axis fits the points there (steps 0 to 1000), with 5 % above.
    m.setXRange(0, 1000);
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t step = 0; step <= 1000; ++step) {
      for (double v : {lossAt(step, 0), lossAt(step, 0.5), gradNormAt(step)}) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    QCOMPARE(yMax(m), hi + 0.05 * (hi - lo));

    // The wheel zooms around the cursor, a notch by 20 %.
    m.resetZoom();
    auto [x0, x1] = m.xRange();
    QCOMPARE(x0, 0.0);
    QCOMPARE(x1, double(kSteps - 1));
    QChartView* view = m.chartView();
    QPointF centre = view->mapFromScene(view->chart()->mapToScene(view->chart()->plotArea().center()));
    QWheelEvent wheel(centre, view->viewport()->mapToGlobal(centre), QPoint(), QPoint(0, 120), Qt::NoButton,
                      Qt::NoModifier, Qt::NoScrollPhase, false);
    QApplication::sendEvent(view->viewport(), &wheel);
    auto [w0, w1] = m.xRange();
    QVERIFY2(std::abs((w1 - w0) - 0.8 * (x1 - x0)) < 1e-6 * (x1 - x0), qPrintable(QString("%1 %2").arg(w0).arg(w1)));
    QVERIFY(w0 > x0 && w1 < x1);
    checkReduced(m.curve(b, "grad_norm"), columns);
    m.resetZoom();

    // Dragging across the chart zooms x to the dragged span (Qt Charts' rubber band), then reduces for it.
    QRectF plot = view->chart()->plotArea();
    auto at = [&](double fraction) {
      QPointF inPlot(plot.left() + fraction * plot.width(), plot.center().y());
      return view->mapFromScene(view->chart()->mapToScene(inPlot));
    };
    QMouseEvent press(QEvent::MouseButtonPress, at(0.5), view->viewport()->mapToGlobal(at(0.5)), Qt::LeftButton,
                      Qt::LeftButton, Qt::NoModifier);
    QMouseEvent move(QEvent::MouseMove, at(0.75), view->viewport()->mapToGlobal(at(0.75)), Qt::NoButton,
                     Qt::LeftButton, Qt::NoModifier);
    QMouseEvent release(QEvent::MouseButtonRelease, at(0.75), view->viewport()->mapToGlobal(at(0.75)), Qt::LeftButton,
                        Qt::NoButton, Qt::NoModifier);
    QApplication::sendEvent(view->viewport(), &press);
    QApplication::sendEvent(view->viewport(), &move);
    QApplication::sendEvent(view->viewport(), &release);
    auto [d0, d1] = m.xRange();
    const double pixel = (x1 - x0) / plot.width();
    QVERIFY2(std::abs(d0 - (x0 + 0.5 * (x1 - x0))) < 2 * pixel && std::abs(d1 - (x0 + 0.75 * (x1 - x0))) < 2 * pixel,
             qPrintable(QString("%1 %2").arg(d0).arg(d1)));
    QTRY_VERIFY(m.curve(a, "loss").front().x() < d0 && m.curve(a, "loss")[1].x() >= d0);
    checkReduced(m.curve(a, "loss"), columns);
    QVERIFY(m.curve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
    m.resetZoom();

    // A narrower panel has fewer columns: reduced again once the layout settles.
    m.resize(600, 600);
    QTRY_VERIFY(m.plotColumns() < columns && m.plotColumns() == plotWidth(m));
    for (int64_t run : {a, b})
      for (QString key : {"loss", "grad_norm"}) checkReduced(m.curve(run, key), m.plotColumns());
    QVERIFY(m.curve(a, "loss").contains(QPointF(kLossSpike, 50.0)));
  }

  // Two metrics of a language-model run and of an MLP run, with values and x worked out by hand.
  void severalMetricsAndATokensAxis() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    int64_t a = 0, b = 0;
    {
      auto s = store::RunStore::open(path);
      QVERIFY(s.ok());
      a = *s->createRun("a", "p", "");
      b = *s->createRun("b", "p", "");
      QVERIFY(s->setParams(a, {{"model.family", "gpt2"}, {"train.batch_size", "8"}, {"train.seq_len", "64"}}).ok());
      QVERIFY(s->setParams(b, {{"model.family", "mlp"}, {"train.batch_size", "32"}, {"train.seq_len", "64"}}).ok());
      for (int i = 0; i < 10; ++i) {
        QVERIFY(s->logMetrics(a, i, {{"loss", 10.0 - i}}, 1000.0 + i).ok());
        QVERIFY(s->logMetrics(b, i, {{"loss", 20.0 - i}}, 2000.0 + i).ok());
      }
      QVERIFY(s->logMetrics(a, 4, {{"val_loss", 7.5}}, 1004.0).ok());
      QVERIFY(s->logMetrics(a, 9, {{"val_loss", 2.5}}, 1009.0).ok());
      // Run a has ended: the panel reads it once, and a metric checked later is still read.
      QVERIFY(s->finishRun(a, store::RunStatus::Finished).ok());
    }
    Session session;
    MetricsPanel m(&session);
    m.setDatabase(QString::fromStdString(path));
    m.setSmoothing(0);
    m.setRuns({a});
    QVERIFY(answered(m));
    QCOMPARE(m.curve(a, "loss").size(), 10);
    QVERIFY(m.points(a, "val_loss").empty());  // not checked: not read
    m.setMetrics({"loss", "val_loss"});
    QVERIFY(answered(m));
    QCOMPARE(m.metrics(), (QStringList{"loss", "val_loss"}));
    QCOMPARE(m.curve(a, "loss").size(), 10);
    QCOMPARE(m.curve(a, "val_loss"), (QList<QPointF>{{4, 7.5}, {9, 2.5}}));
    QStringList names;
    for (QAbstractSeries* s : m.chartView()->chart()->series())
      if (!s->name().isEmpty()) names << s->name();
    QCOMPARE(names, (QStringList{"loss", "val_loss"}));  // one run: named by metric
    QCOMPARE(m.chartView()->chart()->axes(Qt::Vertical).value(0)->titleText(), QString("loss, val_loss"));

    // Tokens: run a trains on 8 * 64 = 512 tokens a step.
    m.setXAxis(MetricsPanel::XAxis::Tokens);
    QCOMPARE(m.xAxisTitle(), QString("tokens"));
    QCOMPARE(m.curve(a, "val_loss"), (QList<QPointF>{{4 * 512, 7.5}, {9 * 512, 2.5}}));
    QCOMPARE(m.curve(a, "loss")[3], QPointF(3 * 512, 7));
    QCOMPARE(m.xRange(), std::make_pair(0.0, 9.0 * 512));

    // With the MLP run beside it the axis falls back to steps and says why.
    m.setRuns({a, b});
    QVERIFY(answered(m));
    QVERIFY2(m.xAxisTitle().startsWith("step") && m.xAxisTitle().contains("mlp is not a language model"),
             qPrintable(m.xAxisTitle()));
    QCOMPARE(m.curve(a, "val_loss"), (QList<QPointF>{{4, 7.5}, {9, 2.5}}));
    QCOMPARE(m.curve(b, "loss")[2], QPointF(2, 18));
    QVERIFY(m.curve(b, "val_loss").isEmpty());  // b logged none
    names.clear();
    for (QAbstractSeries* s : m.chartView()->chart()->series())
      if (!s->name().isEmpty()) names << s->name();
    QCOMPARE(names, (QStringList{"run 1 a · loss", "run 1 a · val_loss", "run 2 b · loss"}));

    // One metric unchecked: its curves go.
    m.setMetrics({"val_loss"});
    QVERIFY(answered(m));
    QVERIFY(m.curve(a, "loss").isEmpty());
    QCOMPARE(m.curve(a, "val_loss").size(), 2);
    // Wall time: seconds since each run started, which createRun recorded.
    m.setMetrics({"loss"});
    QVERIFY(answered(m));
    m.setXAxis(MetricsPanel::XAxis::WallTime);
    QCOMPARE(m.xAxisTitle(), QString("wall time (s)"));
    auto s = store::RunStore::openReadOnly(path);
    QVERIFY(s.ok());
    QVERIFY(std::abs(m.curve(b, "loss")[5].x() - (2005.0 - s->run(b)->startTime)) < 1e-6);
  }

  // A run still training: the panel reads on its reader thread (a poll returns before anything is read), shows
  // the points the run appends after the panel opened, reads nothing when nothing was committed, reads the run
  // once more after it ended and never again; answers for a store given up since are dropped.
  void tailsARunOnTheReaderThread() {
    QTemporaryDir dir;
    const std::string path = dir.filePath("runs.db").toStdString();
    auto s = store::RunStore::open(path);
    QVERIFY(s.ok());
    const int64_t a = *s->createRun("a", "p", "");
    for (int i = 0; i < 10; ++i) QVERIFY(s->logMetrics(a, i, {{"loss", 10.0 - i}}, 1000.0 + i).ok());
    Session session;
    MetricsPanel m(&session);
    m.setSmoothing(0);
    QSignalSpy polled(&m, &MetricsPanel::polled);
    m.setDatabase(QString::fromStdString(path));
    QVERIFY(m.reading());
    QVERIFY(m.points(a, "loss").empty());  // not yet: the answer comes by signal
    QVERIFY(m.readerThread() && m.readerThread() != QThread::currentThread() && m.readerThread()->isRunning());
    QVERIFY(answered(m));
    QCOMPARE(m.shownRuns(), QList<qint64>{a});
    QCOMPARE(static_cast<int>(m.points(a, "loss").size()), 10);
    QCOMPARE(m.curve(a, "loss").size(), 10);

    // Nothing committed since: the poll reads no metric.
    polled.clear();
    m.poll();
    QVERIFY(polled.wait(30000));
    for (const auto& answer : polled) QCOMPARE(answer.front().toBool(), false);

    // The run appends points: the next poll shows them, and only they are read.
    for (int i = 10; i < 15; ++i) QVERIFY(s->logMetrics(a, i, {{"loss", 0.5}}, 1000.0 + i).ok());
    m.poll();
    QCOMPARE(static_cast<int>(m.points(a, "loss").size()), 10);
    QTRY_COMPARE(static_cast<int>(m.points(a, "loss").size()), 15);
    QCOMPARE(m.points(a, "loss").steps.back(), int64_t(14));
    QCOMPARE(m.curve(a, "loss").size(), 15);
    QCOMPARE(m.curve(a, "loss").back(), QPointF(14, 0.5));

    // It ends after one more step: read once more, then settled (a point written to it later is not read).
    QVERIFY(s->logMetrics(a, 15, {{"loss", 0.25}}, 1015.0).ok());
    QVERIFY(s->finishRun(a, store::RunStatus::Finished).ok());
    m.poll();
    QTRY_COMPARE(static_cast<int>(m.points(a, "loss").size()), 16);
    QVERIFY(answered(m));
    QVERIFY(s->logMetrics(a, 16, {{"loss", 0.125}}, 1016.0).ok());
    polled.clear();
    m.poll();
    QVERIFY(polled.wait(30000));
    QVERIFY(answered(m));
    QCOMPARE(static_cast<int>(m.points(a, "loss").size()), 16);

    // Another store given while the first is read: only the second one's points are shown.
    QTemporaryDir other;
    const std::string otherPath = other.filePath("runs.db").toStdString();
    {
      auto o = store::RunStore::open(otherPath);
      QVERIFY(o.ok());
      const int64_t b = *o->createRun("b", "p", "");
      for (int i = 0; i < 3; ++i) QVERIFY(o->logMetrics(b, i, {{"loss", 1.0 + i}}, 1000.0 + i).ok());
    }
    m.setDatabase(QString::fromStdString(path));
    m.setDatabase(QString::fromStdString(otherPath));
    QVERIFY(answered(m));
    QCOMPARE(static_cast<int>(m.points(1, "loss").size()), 3);
    QCOMPARE(m.curve(1, "loss").back(), QPointF(2, 3.0));
  }
};

TSR_TEST_MAIN(QTEST_MAIN, TestMetricsPanel)
#include "test_metrics_panel.moc"
