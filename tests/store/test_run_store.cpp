// The SQLite run store: runs, params, metrics, artifacts; persistence, WAL readers, migrations, bad files.
#include <QtTest>

#include <QTemporaryDir>
#include <atomic>
#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>

#include <sqlite3.h>

#include "engine/store/run_store.h"

using namespace tsr;
using namespace tsr::store;

class TestRunStore : public QObject {
  Q_OBJECT
 private slots:
  void runsParamsMetricsArtifacts() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    auto s = RunStore::open(path);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->schemaVersion(), RunStore::kSchemaVersion);

    auto run = s->createRun("gpt2-small", "samples/gpt2", "[model]\nfamily = 'gpt2'\n");
    QVERIFY(run.ok());
    QVERIFY(s->setParams(*run, {{"lr", "3e-4"}, {"batch", "8"}}).ok());
    for (int step = 0; step < 100; ++step)
      QVERIFY(s->logMetrics(*run, step, {{"loss", 10.0 - step * 0.05}, {"lr", 3e-4}}, 1000.0 + step).ok());

    auto keys = s->metricKeys(*run);
    QVERIFY(keys.ok());
    QCOMPARE(*keys, (std::vector<std::string>{"loss", "lr"}));
    auto loss = s->metrics(*run, "loss");
    QVERIFY(loss.ok());
    QCOMPARE(loss->size(), size_t(100));
    QCOMPARE(loss->at(10).step, int64_t(10));
    QCOMPARE(loss->at(10).value, 9.5);
    QCOMPARE(loss->at(10).time, 1010.0);
    auto tail = s->metrics(*run, "loss", 97);  // the IDE tails from the last step it has
    QCOMPARE(tail->size(), size_t(2));
    QCOMPARE(tail->front().step, int64_t(98));
    auto latest = s->latestMetrics(*run);
    QCOMPARE(latest->at("loss").step, int64_t(99));
    QCOMPARE(latest->at("loss").value, 10.0 - 99 * 0.05);
    QCOMPARE(s->params(*run)->at("lr"), std::string("3e-4"));

    QVERIFY(s->putArtifact(*run, {"ir/00_traced.tir", "ir", "func @main() -> () {\n  return\n}\n"}).ok());
    std::string binary("\0\1\2\xff", 4);
    QVERIFY(s->putArtifact(*run, {"blob", "bin", binary}).ok());
    QCOMPARE(s->artifact(*run, "blob")->data, binary);
    QCOMPARE(*s->artifactNames(*run), (std::vector<std::string>{"blob", "ir/00_traced.tir"}));
    QVERIFY(!s->artifact(*run, "nope").ok());

    QVERIFY(s->finishRun(*run, RunStatus::Finished, "done").ok());
    QVERIFY(!s->finishRun(12345, RunStatus::Failed).ok());
    auto info = s->run(*run);
    QCOMPARE(info->status, RunStatus::Finished);
    QCOMPARE(info->name, std::string("gpt2-small"));
    QVERIFY(info->endTime >= info->startTime);

    // Reopening finds everything; a second connection (the IDE) reads while the first is open.
    auto again = RunStore::open(path);
    QVERIFY(again.ok());
    QCOMPARE(again->runs()->size(), size_t(1));
    QCOMPARE(again->metrics(*run, "lr")->size(), size_t(100));
    auto run2 = s->createRun("second", "p", "");
    QVERIFY(s->logMetrics(*run2, 0, {{"loss", 1.0}}).ok());
    QCOMPARE(again->metrics(*run2, "loss")->size(), size_t(1));

    QVERIFY(s->deleteRun(*run).ok());
    QCOMPARE(s->metrics(*run, "loss")->size(), size_t(0));  // cascades
    QCOMPARE(s->runs()->size(), size_t(1));
  }

  void profilesAndKernelEvents() {
    QTemporaryDir dir;
    auto s = RunStore::open(dir.filePath("runs.db").toStdString());
    QVERIFY(s.ok());
    auto run = s->createRun("r", "p", "");
    auto prof = s->createProfile(*run, "steps 10-12", 10, 12);
    QVERIFY(prof.ok());
    std::vector<KernelEvent> events;
    for (int i = 0; i < 1000; ++i)
      events.push_back({"cpu:0", i % 2, i % 3 ? "fusion.add_relu" : "dot_general", i / 3, i * 100, 80, 2.0 * i, 4.0 * i});
    QVERIFY(s->addKernelEvents(*prof, events).ok());
    auto all = s->kernelEvents(*prof);
    QCOMPARE(all->size(), size_t(1000));
    QCOMPARE(all->at(7).name, std::string("fusion.add_relu"));
    QCOMPARE(all->at(7).fusion, int64_t(2));
    QCOMPARE(all->at(7).flops, 14.0);
    // [1050, 1250] overlaps the events starting at 1000 (ends 1080), 1100 and 1200.
    auto range = s->kernelEvents(*prof, 1050, 1250);
    QCOMPARE(range->size(), size_t(3));
    QCOMPARE(range->front().startNs, int64_t(1000));
    QCOMPARE(s->profiles(*run)->size(), size_t(1));
    QCOMPARE(s->profiles(*run)->front().lastStep, int64_t(12));
    QVERIFY(s->deleteRun(*run).ok());
    QCOMPARE(s->kernelEvents(*prof)->size(), size_t(0));  // cascades
  }

  void migratesVersion1Databases() {
    QTemporaryDir dir;
    std::string path = dir.filePath("v1.db").toStdString();
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    // A database as the first schema left it, with one run.
    const char* v1 =
        "CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, project TEXT NOT NULL, "
        "config TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL NOT NULL "
        "DEFAULT 0, message TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE params(run INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(run, key));"
        "CREATE TABLE metrics(run INTEGER NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL, time REAL NOT NULL, "
        "value REAL NOT NULL, PRIMARY KEY(run, key, step)) WITHOUT ROWID;"
        "CREATE TABLE artifacts(run INTEGER NOT NULL, name TEXT NOT NULL, kind TEXT NOT NULL, data BLOB NOT NULL, "
        "PRIMARY KEY(run, name));"
        "INSERT INTO runs(name, project, status, start_time) VALUES('old', 'p', 'finished', 1);"
        "PRAGMA user_version = 1;";
    QCOMPARE(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto s = RunStore::open(path);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->schemaVersion(), RunStore::kSchemaVersion);
    QCOMPARE(s->runs()->front().name, std::string("old"));
    QVERIFY(s->createProfile(1, "p", 0, 0).ok());
  }

  void profileKernelsAndMarksRoundTrip() {
    QTemporaryDir dir;
    auto s = RunStore::open(dir.filePath("runs.db").toStdString());
    QVERIFY(s.ok());
    auto run = s->createRun("r", "p", "");
    auto prof = s->createProfile(*run, "steps 1-2", 1, 2);
    std::vector<KernelInfo> kernels = {
        {7, "train_step", "fusion.7 loop[add,mul,gelu]", "loop", {3, 4, 5}, {"add", "mul", "gelu"}, "h.0.mlp"},
        {2, "train_step", "dot_general f32[8,4],f32[4,2]", "gemm", {1}, {"dot_general"}, ""},
        {9, "eval \"quoted\"", "odd, name", "opaque", {}, {}, "a.b"}};
    QVERIFY(s->addProfileKernels(*prof, kernels).ok());
    auto back = s->profileKernels(*prof);
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
    QCOMPARE(back->size(), size_t(3));  // by fusion id
    QVERIFY(back->at(0) == kernels[1]);
    QVERIFY(back->at(1) == kernels[0]);
    QVERIFY(back->at(2) == kernels[2]);

    std::vector<ProfileMarkInfo> marks = {{"step 2", 2000, 900}, {"step 1", 1000, 950}};
    QVERIFY(s->addProfileMarks(*prof, marks).ok());
    auto m = s->profileMarks(*prof);
    QCOMPARE(m->size(), size_t(2));
    QVERIFY(m->at(0) == marks[1]);
    QVERIFY(m->at(1) == marks[0]);

    // Another profile sees none of them, and deleting the run takes them along.
    auto other = s->createProfile(*run, "other", 0, 0);
    QCOMPARE(s->profileKernels(*other)->size(), size_t(0));
    QVERIFY(s->deleteRun(*run).ok());
    QCOMPARE(s->profileKernels(*prof)->size(), size_t(0));
    QCOMPARE(s->profileMarks(*prof)->size(), size_t(0));
  }

  void damagedKernelRowsAreErrors() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    {
      auto s = RunStore::open(path);
      auto run = s->createRun("r", "p", "");
      auto prof = s->createProfile(*run, "p", 0, 0);
      QVERIFY(s->addProfileKernels(*prof, {{1, "x", "k", "loop", {1}, {"add"}, ""}}).ok());
    }
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "UPDATE profile_kernels SET nodes = '[1, \"x\"'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto s = RunStore::open(path);
    auto k = s->profileKernels(1);
    QVERIFY(!k.ok());
    QVERIFY2(k.error().message.find("damaged") != std::string::npos, k.error().message.c_str());
  }

  void migratesVersion2DatabasesKeepingTheirProfiles() {
    QTemporaryDir dir;
    std::string path = dir.filePath("v2.db").toStdString();
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    // A database as schema 2 left it: one run with a profile of two kernel events.
    const char* v2 =
        "CREATE TABLE runs(id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, project TEXT NOT NULL, "
        "config TEXT NOT NULL DEFAULT '', status TEXT NOT NULL, start_time REAL NOT NULL, end_time REAL NOT NULL "
        "DEFAULT 0, message TEXT NOT NULL DEFAULT '');"
        "CREATE TABLE params(run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, key TEXT NOT NULL, "
        "value TEXT NOT NULL, PRIMARY KEY(run, key));"
        "CREATE TABLE metrics(run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, key TEXT NOT NULL, "
        "step INTEGER NOT NULL, time REAL NOT NULL, value REAL NOT NULL, PRIMARY KEY(run, key, step)) WITHOUT ROWID;"
        "CREATE TABLE artifacts(run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL, "
        "kind TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY(run, name));"
        "CREATE TABLE profiles(id INTEGER PRIMARY KEY AUTOINCREMENT, run INTEGER NOT NULL REFERENCES runs(id) ON "
        "DELETE CASCADE, name TEXT NOT NULL, created REAL NOT NULL, first_step INTEGER NOT NULL DEFAULT 0, "
        "last_step INTEGER NOT NULL DEFAULT 0);"
        "CREATE TABLE kernel_events(profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE, device TEXT "
        "NOT NULL, stream INTEGER NOT NULL, name TEXT NOT NULL, fusion INTEGER NOT NULL, start_ns INTEGER NOT NULL, "
        "duration_ns INTEGER NOT NULL, flops REAL NOT NULL, bytes REAL NOT NULL);"
        "CREATE INDEX kernel_events_by_time ON kernel_events(profile, start_ns);"
        "INSERT INTO runs(name, project, status, start_time) VALUES('old', 'p', 'finished', 1);"
        "INSERT INTO metrics VALUES(1, 'loss', 5, 1.5, 2.25);"
        "INSERT INTO profiles(run, name, created, first_step, last_step) VALUES(1, 'steps 5-6', 2, 5, 6);"
        "INSERT INTO kernel_events VALUES(1, 'cpu:0', 0, 'dot_general', 3, 100, 50, 1e6, 2e3);"
        "INSERT INTO kernel_events VALUES(1, 'cpu:0', 1, 'add', 4, 160, 10, 64, 768);"
        "PRAGMA user_version = 2;";
    QCOMPARE(sqlite3_exec(db, v2, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);

    auto s = RunStore::open(path);
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->schemaVersion(), 3);
    QCOMPARE(s->runs()->front().name, std::string("old"));
    QCOMPARE(s->metrics(1, "loss")->front().value, 2.25);
    auto profiles = s->profiles(1);
    QCOMPARE(profiles->size(), size_t(1));
    QCOMPARE(profiles->front().name, std::string("steps 5-6"));
    auto events = s->kernelEvents(1);
    QCOMPARE(events->size(), size_t(2));
    QCOMPARE(events->at(0).name, std::string("dot_general"));
    QCOMPARE(events->at(0).flops, 1e6);
    QCOMPARE(events->at(1).stream, int64_t(1));
    // The old profile has no kernel table yet; one can be added.
    QCOMPARE(s->profileKernels(1)->size(), size_t(0));
    QVERIFY(s->addProfileKernels(1, {{3, "train_step", "dot_general", "gemm", {0}, {"dot_general"}, ""}}).ok());
    QCOMPARE(s->profileKernels(1)->front().ops.front(), std::string("dot_general"));
  }

  void migratesAnEmptyDatabaseAndRefusesNewerOnes() {
    QTemporaryDir dir;
    std::string path = dir.filePath("old.db").toStdString();
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "CREATE TABLE unrelated(x); PRAGMA user_version = 0;", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto s = RunStore::open(path);
    QVERIFY(s.ok());
    QCOMPARE(s->schemaVersion(), RunStore::kSchemaVersion);

    std::string newer = dir.filePath("newer.db").toStdString();
    QCOMPARE(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "PRAGMA user_version = 99;", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    auto n = RunStore::open(newer);
    QVERIFY(!n.ok());
    QVERIFY2(n.error().message.find("newer") != std::string::npos, n.error().message.c_str());
  }

  void badFilesAreErrorsThatNameThem() {
    QTemporaryDir dir;
    std::string junk = dir.filePath("junk.db").toStdString();
    std::ofstream(junk) << "this is not a database, just text that is long enough to have a header";
    auto j = RunStore::open(junk);
    QVERIFY(!j.ok());
    QVERIFY2(j.error().message.find("junk.db") != std::string::npos, j.error().message.c_str());
    auto missingDir = RunStore::open(dir.filePath("no/such/dir/runs.db").toStdString());
    QVERIFY(!missingDir.ok());
    QVERIFY2(missingDir.error().message.find("runs.db") != std::string::npos, missingDir.error().message.c_str());
  }

  // Read-only opening (runs list and show, the IDE) of an empty file and of another program's database: "not a
  // Tessera run store", and the file keeps every byte (open() used to write the schema into both).
  void readOnlyOpeningWritesNothing() {
    QTemporaryDir dir;
    auto bytesOf = [](const std::string& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    std::string empty = dir.filePath("empty.db").toStdString();
    std::ofstream(empty).close();
    std::string foreign = dir.filePath("foreign.db").toStdString();
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine');", nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    std::string junk = dir.filePath("junk.db").toStdString();
    std::ofstream(junk) << "this is not a database, just text that is long enough to have a header";
    for (const std::string& path : {empty, foreign, junk}) {
      const std::string before = bytesOf(path);
      auto s = RunStore::openReadOnly(path);
      QVERIFY(!s.ok());
      QVERIFY2(s.error().message.find(path + ": not a Tessera run store") == 0, s.error().message.c_str());
      QCOMPARE(bytesOf(path), before);
      QVERIFY(!std::filesystem::exists(path + "-wal"));
    }
    QVERIFY(!RunStore::openReadOnly(dir.filePath("absent.db").toStdString()).ok());
    QVERIFY(!std::filesystem::exists(dir.filePath("absent.db").toStdString()));

    // A real store reads; writing through the read-only handle fails with SQLite's word for it.
    std::string path = dir.filePath("runs.db").toStdString();
    {
      auto w = RunStore::open(path);
      QVERIFY(w.ok());
      auto run = w->createRun("r", "p", "");
      QVERIFY(w->logMetrics(*run, 1, {{"loss", 2.5}}).ok());
    }
    auto r = RunStore::openReadOnly(path);
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    QCOMPARE(r->runs()->size(), size_t(1));
    QCOMPARE(r->metrics(1, "loss")->front().value, 2.5);
    auto write = r->createRun("x", "p", "");
    QVERIFY(!write.ok());
    QVERIFY2(write.error().message.find("readonly") != std::string::npos, write.error().message.c_str());
  }

  // Pages of a store overwritten with noise, one at a time: a read either returns everything that was written
  // or fails with SQLite's own message and the file's name; it never returns part of a series as if it were
  // all, and never says "no run 1" about a run that is there.
  void damagedPagesAreErrorsNotShorterAnswers() {
    QTemporaryDir dir;
    std::string good = dir.filePath("good.db").toStdString();
    {
      auto s = RunStore::open(good);
      QVERIFY(s.ok());
      auto run = s->createRun("r", "p", "");
      for (int step = 0; step < 2000; ++step) QVERIFY(s->logMetrics(*run, step, {{"loss", 1.0 / (1 + step)}}).ok());
    }  // the last connection's close folds the WAL into the file
    std::ifstream in(good, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    const size_t pageSize = 4096;
    QVERIFY(bytes.size() > 8 * pageSize);
    int errors = 0;
    for (size_t page = 1; page * pageSize < bytes.size(); ++page) {
      std::string b = bytes;
      for (size_t i = 0; i < pageSize && page * pageSize + i < b.size(); ++i)
        b[page * pageSize + i] = static_cast<char>((i * 131 + page) & 0xff);
      std::string path = dir.filePath(QString("damaged%1.db").arg(page)).toStdString();
      std::ofstream(path, std::ios::binary) << b;
      auto s = RunStore::openReadOnly(path);
      if (!s.ok()) {
        ++errors;
        continue;
      }
      auto loss = s->metrics(1, "loss");
      if (loss.ok()) {
        QVERIFY2(loss->size() == 2000, qPrintable(QString("page %1: %2 of 2000 points, no error").arg(page).arg(loss->size())));
      } else {
        ++errors;
        QVERIFY2(loss.error().message.find(path) != std::string::npos, loss.error().message.c_str());
        QVERIFY2(loss.error().message.find("malformed") != std::string::npos, loss.error().message.c_str());
      }
      auto run = s->run(1);
      if (!run.ok()) QVERIFY2(run.error().message.find("no run 1") == std::string::npos, run.error().message.c_str());
    }
    QVERIFY(errors > 0);
  }

  void aWriterAndAReaderAtOnceNeverSeeALockedDatabase() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    auto writer = RunStore::open(path);
    QVERIFY(writer.ok());
    auto run = writer->createRun("busy", "p", "");
    QVERIFY(run.ok());
    std::atomic<bool> done{false};
    std::atomic<int64_t> written{0};
    std::string writerError, readerError;
    int64_t reads = 0, lastSeen = -1;
    // The reader has its own connection, as the IDE does; it tails the metrics the writer appends.
    std::thread reader([&] {
      auto r = RunStore::open(path);
      if (!r.ok()) {
        readerError = r.error().message;
        return;
      }
      while (!done.load() && readerError.empty()) {
        auto pts = r->metrics(*run, "loss", lastSeen);
        if (!pts.ok()) {
          readerError = pts.error().message;
          break;
        }
        for (const auto& pt : *pts) {
          if (pt.step != lastSeen + 1) readerError = "gap or reorder at step " + std::to_string(pt.step);
          lastSeen = pt.step;
        }
        auto latest = r->latestMetrics(*run);
        if (!latest.ok()) readerError = latest.error().message;
        else if (!latest->empty() && latest->at("loss").step < lastSeen) readerError = "latest went backwards";
        ++reads;
      }
    });
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (int64_t step = 0; std::chrono::steady_clock::now() < until; ++step) {
      auto st = writer->logMetrics(*run, step, {{"loss", 1.0 / (1 + step)}, {"lr", 1e-3}});
      if (!st.ok()) {
        writerError = st.error().message;
        break;
      }
      written = step + 1;
    }
    done = true;
    reader.join();
    QVERIFY2(writerError.empty(), writerError.c_str());
    QVERIFY2(readerError.empty(), readerError.c_str());
    QVERIFY(written.load() > 10);
    QVERIFY(reads > 1);
    QCOMPARE(writer->metrics(*run, "loss")->size(), size_t(written.load()));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestRunStore)
#include "test_run_store.moc"
