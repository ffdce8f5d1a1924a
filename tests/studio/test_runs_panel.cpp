// The Runs panel with a store of a few hundred runs (offscreen): the store is read on the panel's reader thread
// and the answer arrives by signal, so a refresh returns before anything is read; a refresh with nothing written
// since the last read leaves the table alone; one after a write shows it and keeps the selection, the current
// run, the scroll position and the sort order. Compare reads the two runs' profiles on that thread too.
#include <QHeaderView>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <algorithm>
#include <map>

#include "engine/store/run_store.h"
#include "tests/studio/studio_test_util.h"
#include "views/runs_panel.h"
#include "views/session.h"

using namespace tsr;
using namespace tsr::studio;

namespace {

constexpr int kRuns = 300;

// Run i's latest loss: 37 is prime to 300, so the losses are 0.00 to 2.99, each once, in a shuffled order.
double lossOf(int64_t run) { return static_cast<double>(run * 37 % kRuns) / 100.0; }

// Writes kRuns runs, each with 20 steps of loss (ending at lossOf) and two hyperparameters; all finished but
// run 7, which is still training (the reader keeps ended runs as it read them).
bool writeStore(const std::string& path) {
  auto s = store::RunStore::open(path);
  if (!s.ok()) return false;
  for (int i = 1; i <= kRuns; ++i) {
    auto id = s->createRun("r" + std::to_string(i), "/tmp/p", "");
    if (!id.ok() || *id != i) return false;
    std::vector<store::StepMetrics> steps;
    for (int step = 1; step <= 20; ++step)
      steps.push_back({step, static_cast<double>(step), {{"loss", lossOf(i) + (20 - step) * 0.5}}});
    if (!s->logMetricsBatch(*id, steps).ok() || !s->setParams(*id, {{"train.lr", "0.1"}, {"train.seed", std::to_string(i)}}).ok())
      return false;
    if (i != 7 && !s->finishRun(*id, store::RunStatus::Finished).ok()) return false;
  }
  return true;
}

int columnNamed(const RunsTableModel* m, const QString& name) {
  for (int c = 0; c < m->columnCount(); ++c)
    if (m->headerData(c, Qt::Horizontal).toString() == name) return c;
  return -1;
}

// A store of kRuns runs (written: whether writing it worked) and a Runs panel not given it yet.
struct Fixture {
  QTemporaryDir dir;
  QString db = dir.filePath("runs.db");
  bool written = writeStore(db.toStdString());
  Session session;
  RunsPanel panel{&session};
};

QList<qint64> shownIds(const RunsTableModel* m) {
  QList<qint64> out;
  for (int r = 0; r < m->rowCount(); ++r) out << m->index(r, 0).data(Qt::UserRole).toLongLong();
  return out;
}

}  // namespace

class TestRunsPanel : public QObject {
  Q_OBJECT

 private slots:
  void readsOffTheUiThreadAndOnlyWhatChanged() {
    Fixture f;
    QVERIFY(f.written);
    const QString& db = f.db;
    RunsPanel& panel = f.panel;
    panel.setPollInterval(0);  // every read here is one the test asks for
    panel.resize(900, 400);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    RunsTableModel* m = panel.model();
    QSignalSpy refreshed(&panel, &RunsPanel::refreshed);

    // setDatabase (and refresh) return before the store is read: the runs arrive by signal, read on another
    // thread.
    panel.setDatabase(db);
    QCOMPARE(m->rowCount(), 0);
    QVERIFY(panel.reading());
    QVERIFY(panel.readerThread() && panel.readerThread() != QThread::currentThread() && panel.readerThread()->isRunning());
    QVERIFY(refreshed.isEmpty() ? refreshed.wait(30000) : true);
    QCOMPARE(refreshed.front().front().toBool(), true);
    QCOMPARE(m->rowCount(), kRuns);

    // Nothing written since: the next refresh reads nothing and says so.
    refreshed.clear();
    panel.refresh();
    QVERIFY(refreshed.isEmpty() ? refreshed.wait(30000) : true);
    QCOMPARE(refreshed.front().front().toBool(), false);
    QCOMPARE(m->rowCount(), kRuns);

    // Sorted by loss, highest first; run 150 selected and current, scrolled to the middle.
    const int lossColumn = columnNamed(m, "loss");
    QVERIFY(lossColumn > 0);
    QTableView* table = panel.table();
    table->sortByColumn(lossColumn, Qt::DescendingOrder);
    panel.selectRuns({150});
    const int row150 = static_cast<int>(shownIds(m).indexOf(150));
    QVERIFY(row150 >= 0);
    table->selectionModel()->setCurrentIndex(m->index(row150, lossColumn), QItemSelectionModel::NoUpdate);
    table->verticalScrollBar()->setValue(table->verticalScrollBar()->maximum() / 2);
    const int scroll = table->verticalScrollBar()->value();
    QVERIFY(scroll > 0);

    // Another process writes: a new run, and run 7 a step with a new latest loss.
    {
      auto s = store::RunStore::open(db.toStdString());
      QVERIFY(s.ok());
      auto id = s->createRun("r301", "/tmp/p", "");
      QVERIFY(id.ok());
      QVERIFY(s->logMetrics(*id, 1, {{"loss", 1.005}}).ok());
      QVERIFY(s->logMetrics(7, 21, {{"loss", 9.0}}).ok());
    }
    refreshed.clear();
    panel.refresh();
    QCOMPARE(m->rowCount(), kRuns);  // not yet: the answer comes by signal
    QVERIFY(refreshed.isEmpty() ? refreshed.wait(30000) : true);
    QCOMPARE(refreshed.front().front().toBool(), true);
    QCOMPARE(m->rowCount(), kRuns + 1);

    // The order is the latest loss, highest first, by the losses written here.
    std::map<qint64, double> latest;
    for (int i = 1; i <= kRuns; ++i) latest[i] = lossOf(i);
    latest[7] = 9.0;
    latest[kRuns + 1] = 1.005;
    QList<qint64> expected;
    for (const auto& [id, loss] : latest) expected << id;
    std::stable_sort(expected.begin(), expected.end(), [&](qint64 a, qint64 b) { return latest[a] > latest[b]; });
    QCOMPARE(shownIds(m), expected);
    QCOMPARE(m->index(0, lossColumn).data().toDouble(), 9.0);
    QCOMPARE(table->horizontalHeader()->sortIndicatorSection(), lossColumn);
    QCOMPARE(table->horizontalHeader()->sortIndicatorOrder(), Qt::DescendingOrder);
    // Selection, current run and scroll position kept.
    QCOMPARE(panel.selectedRuns(), QList<qint64>{150});
    QCOMPARE(table->currentIndex().data(Qt::UserRole).toLongLong(), qint64(150));
    QCOMPARE(table->verticalScrollBar()->value(), scroll);
  }

  // Refreshes asked while a read is under way: one more read follows, and the last answer is what is shown; the
  // store given again is read again.
  void refreshesDuringARead() {
    Fixture f;
    QVERIFY(f.written);
    const QString& db = f.db;
    RunsPanel& panel = f.panel;
    panel.setDatabase(db);
    panel.refresh();
    panel.refresh();
    QVERIFY(test::runsRead(&panel));
    QCOMPARE(panel.model()->rowCount(), kRuns);
    // The same store given again (its project opened again): read again, though nothing was written.
    panel.setDatabase(db);
    QCOMPARE(panel.model()->rowCount(), 0);
    QVERIFY(test::runsRead(&panel));
    QCOMPARE(panel.model()->rowCount(), kRuns);
    // Another store meanwhile: the first one's answer is not shown.
    QTemporaryDir other;
    {
      auto s = store::RunStore::open(other.filePath("runs.db").toStdString());
      QVERIFY(s.ok());
      QVERIFY(s->createRun("only", "/tmp/q", "").ok());
    }
    panel.refresh();
    panel.setDatabase(other.filePath("runs.db"));
    QVERIFY(test::runsRead(&panel));
    QCOMPARE(panel.model()->rowCount(), 1);
    QCOMPARE(QString::fromStdString(panel.model()->runs().front().info.name), QString("only"));
  }

  // Compare lists the selected runs at once and reads their profiles on the reader thread; a comparison asked
  // while that read is under way replaces it.
  void compareReadsTheProfilesOffTheUiThread() {
    Fixture f;
    QVERIFY(f.written);
    RunsPanel& panel = f.panel;
    panel.setPollInterval(0);
    panel.setDatabase(f.db);
    QVERIFY(test::runsRead(&panel));
    QSignalSpy compared(&panel, &RunsPanel::compared);
    panel.selectRuns({3, 4});
    panel.compareSelected();
    QVERIFY(panel.comparing());
    QVERIFY2(panel.comparisonText().contains("run 3") && panel.comparisonText().contains("Reading the profiles"),
             qPrintable(panel.comparisonText()));
    panel.selectRuns({1, 2});
    panel.compareSelected();
    QVERIFY(compared.wait(30000));
    QCOMPARE(compared.size(), 1);  // the first comparison's answer was dropped
    QVERIFY(!panel.comparing());
    const QString text = panel.comparisonText();
    QVERIFY2(text.contains("run 1") && text.contains("run 2") && !text.contains("run 3") &&
                 text.contains("run 1 has no profile") && !text.contains("Reading the profiles"),
             qPrintable(text));
    // Three runs: side by side at once, no profiles to read.
    compared.clear();
    panel.selectRuns({1, 2, 3});
    panel.compareSelected();
    QCOMPARE(compared.size(), 1);
    QVERIFY(!panel.comparing());
    QVERIFY(panel.comparisonText().contains("run 3"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestRunsPanel)
#include "test_runs_panel.moc"
