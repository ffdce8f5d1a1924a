// The Runs panel with a store of a few hundred runs (offscreen): the store is read on the panel's reader thread
// and the answer arrives by signal, so a refresh returns before anything is read; a refresh with nothing written
// since the last read leaves the table alone; one after a write shows it and keeps the selection, the current
// run, the scroll position and the sort order. Compare reads the two runs' profiles on that thread too, and the
// edits are made there: a store another process holds locked keeps them waiting there, not the UI.
#include <sqlite3.h>

#include <QDir>
#include <QFile>
#include <QHeaderView>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>

#include "engine/store/lock_wait.h"
#include "engine/store/run_lease.h"
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

QString shownName(const RunsTableModel* m, qint64 run) {
  for (const inspect::RunRow& r : m->runs())
    if (r.info.id == run) return QString::fromStdString(r.info.name);
  return {};
}

QString storedName(const QString& db, qint64 run) {
  auto s = store::RunStore::openReadOnly(db.toStdString());
  if (!s.ok()) return QString::fromStdString(s.error().message);
  auto r = s->run(run);
  return r.ok() ? QString::fromStdString(r->name) : QString::fromStdString(r.error().message);
}

// Another process's connection inside a write transaction, which holds the store's write lock until unlock(), as
// a training process does while it writes a step.
class LockHolder {
 public:
  explicit LockHolder(const QString& db) {
    if (sqlite3_open(db.toUtf8().constData(), &m_db) != SQLITE_OK) m_error = sqlite3_errmsg(m_db);
  }
  ~LockHolder() { unlock(); }
  LockHolder(const LockHolder&) = delete;
  LockHolder& operator=(const LockHolder&) = delete;

  // The change is one the edits under test never make, so that an edit that went through shows.
  bool lock() {
    return m_error.isEmpty() && exec("BEGIN IMMEDIATE") && exec("UPDATE runs SET notes = 'uncommitted' WHERE id = 5");
  }
  void unlock() {
    if (!m_db) return;
    exec("ROLLBACK");
    sqlite3_close(m_db);
    m_db = nullptr;
  }
  QString error() const { return m_error; }

 private:
  bool exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(m_db, sql, nullptr, nullptr, &err) == SQLITE_OK) return true;
    m_error = QString("%1: %2").arg(sql, err ? err : sqlite3_errmsg(m_db));
    sqlite3_free(err);
    return false;
  }
  sqlite3* m_db = nullptr;
  QString m_error;
};

// The thread that waited for a store's lock, from the store's notice (given once per process, after a second).
std::atomic<QThread*> g_waitedOn{nullptr};

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

  // While another process holds the store's write lock, an edit waits for it on the reader thread (the store's
  // notice comes from there) and the UI thread goes on: the panel, back at once, says which edit is under way and
  // takes no other. Once the lock is free the edit is made and the table read again shows it. (The first test
  // here to wait for a lock: the store gives its notice once per process.)
  void editsWaitForALockOnTheReaderThread() {
    Fixture f;
    QVERIFY(f.written);
    RunsPanel& panel = f.panel;
    panel.setPollInterval(0);
    panel.setDatabase(f.db);
    QVERIFY(test::runsRead(&panel));
    panel.selectRuns({5});
    LockHolder other(f.db);
    QVERIFY2(other.lock(), qPrintable(other.error()));
    store::setLockWaitNotice([](const std::string&) { g_waitedOn = QThread::currentThread(); });
    QSignalSpy edited(&panel, &RunsPanel::edited);
    QVERIFY(panel.renameSelected("renamed"));
    QVERIFY(panel.editing());
    QVERIFY2(panel.editStatus().contains("Renaming run 5"), qPrintable(panel.editStatus()));
    QVERIFY(!panel.archiveSelected(true));
    QCOMPARE(panel.lastError(), QString("another edit is under way"));
    QVERIFY(QTest::qWaitFor([] { return g_waitedOn.load() != nullptr; }, 30000));
    store::setLockWaitNotice({});
    QVERIFY(g_waitedOn.load() == panel.readerThread());
    QVERIFY(panel.editing());
    QVERIFY(edited.isEmpty());
    QCOMPARE(shownName(panel.model(), 5), QString("r5"));

    other.unlock();
    QVERIFY(QTest::qWaitFor([&] { return !edited.isEmpty(); }, 30000));
    QCOMPARE(edited.front().front().toBool(), true);
    QVERIFY2(panel.lastError().isEmpty(), qPrintable(panel.lastError()));
    QVERIFY(panel.editStatus().isEmpty());
    QVERIFY(test::runsRead(&panel));
    QCOMPARE(shownName(panel.model(), 5), QString("renamed"));
    QCOMPARE(storedName(f.db, 5), QString("renamed"));
  }

  // An edit the store refuses: Delete of a run that another process trains (it holds the run's lease). Taken
  // while the question was open, the deletion itself is refused; taken before, the question is not asked. The
  // panel says which edit failed and why, and leaves the table as it was, as the refusal left the run: its rows
  // and its checkpoints.
  void aRefusedEditSaysWhyAndLeavesTheRun() {
    Fixture f;
    QVERIFY(f.written);
    QVERIFY(QDir().mkpath(f.dir.filePath("checkpoints/run-7")));
    const QString checkpoint = f.dir.filePath("checkpoints/run-7/latest.safetensors");
    test::writeFile(checkpoint, "x");
    RunsPanel& panel = f.panel;
    panel.setPollInterval(0);
    panel.setDatabase(f.db);
    QVERIFY(test::runsRead(&panel));
    panel.selectRuns({7});
    std::optional<store::RunLease> training;
    int asked = 0;
    panel.setConfirm([&](const QString&) {
      ++asked;
      if (auto lease = store::RunLease::tryTake(f.db.toStdString(), 7); lease.ok() && *lease) training = std::move(*lease);
      return true;
    });
    QSignalSpy edited(&panel, &RunsPanel::edited);
    auto refused = [&] {
      if (!QTest::qWaitFor([&] { return !edited.isEmpty(); }, 30000)) return false;
      const bool ok = edited.takeFirst().front().toBool();
      return !ok && !panel.editing() && panel.lastError().contains("being trained by another process") &&
             panel.editStatus().startsWith("Run 7 was not deleted: ") && !panel.reading();
    };
    QVERIFY(panel.deleteSelected());
    QVERIFY(panel.editing());
    QVERIFY2(refused(), qPrintable(panel.editStatus()));
    QCOMPARE(asked, 1);
    QVERIFY(training.has_value());
    QVERIFY(panel.deleteSelected());
    QVERIFY2(refused(), qPrintable(panel.editStatus()));
    QCOMPARE(asked, 1);
    QVERIFY(shownIds(panel.model()).contains(7));
    QVERIFY(QFile::exists(checkpoint));
    {
      auto s = store::RunStore::openReadOnly(f.db.toStdString());
      QVERIFY(s.ok());
      QCOMPARE(s->run(7)->name, std::string("r7"));
      QCOMPARE(s->metrics(7, "loss")->size(), size_t(20));
    }
    // The training over, the deletion goes through.
    training.reset();
    panel.setConfirm([](const QString&) { return true; });
    QVERIFY(panel.deleteSelected());
    QVERIFY2(test::runsEdited(&panel), qPrintable(panel.lastError()));
    QVERIFY(panel.editStatus().isEmpty());
    QVERIFY(!shownIds(panel.model()).contains(7));
    QVERIFY(!QFile::exists(checkpoint));
  }

  // An edit sent before another store was given is not answered: the panel shows the new store and says nothing
  // of an edit of the old one, which is made all the same.
  void anEditOfTheStoreBeforeIsNotAnswered() {
    Fixture f;
    QVERIFY(f.written);
    RunsPanel& panel = f.panel;
    panel.setPollInterval(0);
    panel.setDatabase(f.db);
    QVERIFY(test::runsRead(&panel));
    panel.selectRuns({5});
    LockHolder other(f.db);
    QVERIFY2(other.lock(), qPrintable(other.error()));
    QSignalSpy edited(&panel, &RunsPanel::edited);
    QVERIFY(panel.renameSelected("before"));
    QTemporaryDir second;
    {
      auto s = store::RunStore::open(second.filePath("runs.db").toStdString());
      QVERIFY(s.ok());
      QVERIFY(s->createRun("only", "/tmp/q", "").ok());
    }
    panel.setDatabase(second.filePath("runs.db"));
    QVERIFY(!panel.editing());
    QVERIFY(panel.editStatus().isEmpty());
    other.unlock();
    // The read of the new store waits behind the edit on the reader thread: the edit's answer came first.
    QVERIFY(test::runsRead(&panel));
    QVERIFY(edited.isEmpty());
    QCOMPARE(shownIds(panel.model()), QList<qint64>{1});
    QCOMPARE(storedName(f.db, 5), QString("before"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_MAIN, TestRunsPanel)
#include "test_runs_panel.moc"
