// The SQLite run store: runs, params, metrics, artifacts; persistence, WAL readers, migrations, bad files.
#include "tests/check.h"

#include <atomic>
#include <cmath>
#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <utility>

#include <sqlite3.h>
#include <stdlib.h>

#include "engine/core/env_options.h"
#include "engine/store/lock_wait.h"
#include "engine/store/run_store.h"
#include "tests/store/held_lock.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::store;

TEST_CASE("runsParamsMetricsArtifacts") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->schemaVersion(), RunStore::kSchemaVersion);

  auto run = s->createRun("gpt2-small", "samples/gpt2", "[model]\nfamily = 'gpt2'\n");
  REQUIRE(run.ok());
  REQUIRE(s->setParams(*run, {{"lr", "3e-4"}, {"batch", "8"}}).ok());
  for (int step = 0; step < 100; ++step)
    REQUIRE(s->logMetrics(*run, step, {{"loss", 10.0 - step * 0.05}, {"lr", 3e-4}}, 1000.0 + step).ok());

  auto keys = s->metricKeys(*run);
  REQUIRE(keys.ok());
  TSR_COMPARE(*keys, (std::vector<std::string>{"loss", "lr"}));
  auto loss = s->metrics(*run, "loss");
  REQUIRE(loss.ok());
  TSR_COMPARE(loss->size(), size_t(100));
  TSR_COMPARE(loss->at(10).step, int64_t(10));
  TSR_COMPARE(loss->at(10).value, 9.5);
  TSR_COMPARE(loss->at(10).time, 1010.0);
  auto tail = s->metrics(*run, "loss", 97);  // the IDE tails from the last step it has
  TSR_COMPARE(tail->size(), size_t(2));
  TSR_COMPARE(tail->front().step, int64_t(98));
  auto latest = s->latestMetrics(*run);
  TSR_COMPARE(latest->at("loss").step, int64_t(99));
  TSR_COMPARE(latest->at("loss").value, 10.0 - 99 * 0.05);
  TSR_COMPARE(s->params(*run)->at("lr"), std::string("3e-4"));

  REQUIRE(s->putArtifact(*run, {"ir/00_traced.tir", "ir", "func @main() -> () {\n  return\n}\n"}).ok());
  std::string binary("\0\1\2\xff", 4);
  REQUIRE(s->putArtifact(*run, {"blob", "bin", binary}).ok());
  TSR_COMPARE(s->artifact(*run, "blob")->data, binary);
  TSR_COMPARE(*s->artifactNames(*run), (std::vector<std::string>{"blob", "ir/00_traced.tir"}));
  REQUIRE(!s->artifact(*run, "nope").ok());

  REQUIRE(s->finishRun(*run, RunStatus::Finished, "done").ok());
  REQUIRE(!s->finishRun(12345, RunStatus::Failed).ok());
  auto info = s->run(*run);
  TSR_COMPARE(info->status, RunStatus::Finished);
  TSR_COMPARE(info->name, std::string("gpt2-small"));
  REQUIRE(info->endTime >= info->startTime);

  // Reopening finds everything; a second connection (the IDE) reads while the first is open.
  auto again = RunStore::open(path);
  REQUIRE(again.ok());
  TSR_COMPARE(again->runs()->size(), size_t(1));
  TSR_COMPARE(again->metrics(*run, "lr")->size(), size_t(100));
  auto run2 = s->createRun("second", "p", "");
  REQUIRE(s->logMetrics(*run2, 0, {{"loss", 1.0}}).ok());
  TSR_COMPARE(again->metrics(*run2, "loss")->size(), size_t(1));

  REQUIRE(s->deleteRun(*run).ok());
  TSR_COMPARE(s->metrics(*run, "loss")->size(), size_t(0));  // cascades
  TSR_COMPARE(s->runs()->size(), size_t(1));
}

TEST_CASE("profilesAndKernelEvents") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  REQUIRE(!s->latestProfile()->has_value());
  auto run = s->createRun("r", "p", "");
  auto prof = s->createProfile(*run, "steps 10-12", 10, 12);
  REQUIRE(prof.ok());
  std::vector<KernelEvent> events;
  for (int i = 0; i < 1000; ++i)
    events.push_back({"cpu:0", i % 2, i % 3 ? "fusion.add_relu" : "dot_general", i / 3, i * 100, 80, 2.0 * i, 4.0 * i});
  REQUIRE(s->addKernelEvents(*prof, events).ok());
  auto all = s->kernelEvents(*prof);
  TSR_COMPARE(all->size(), size_t(1000));
  TSR_COMPARE(all->at(7).name, std::string("fusion.add_relu"));
  TSR_COMPARE(all->at(7).fusion, int64_t(2));
  TSR_COMPARE(all->at(7).flops, 14.0);
  // [1050, 1250] overlaps the events starting at 1000 (ends 1080), 1100 and 1200.
  auto range = s->kernelEvents(*prof, 1050, 1250);
  TSR_COMPARE(range->size(), size_t(3));
  TSR_COMPARE(range->front().startNs, int64_t(1000));
  TSR_COMPARE(s->profiles(*run)->size(), size_t(1));
  TSR_COMPARE(s->profiles(*run)->front().lastStep, int64_t(12));
  // The newest profile of any run: a second run's, then the first's again once the second is deleted.
  auto second = s->createRun("r2", "p", "");
  auto secondProf = s->createProfile(*second, "steps 1-1", 1, 1);
  TSR_COMPARE(s->latestProfile()->value().id, *secondProf);
  TSR_COMPARE(s->latestProfile()->value().run, *second);
  REQUIRE(s->deleteRun(*second).ok());
  TSR_COMPARE(s->latestProfile()->value().id, *prof);
  REQUIRE(s->deleteRun(*run).ok());
  TSR_COMPARE(s->kernelEvents(*prof)->size(), size_t(0));  // cascades
}

TEST_CASE("migratesVersion1Databases") {
  test::TempDir dir;
  std::string path = dir.filePath("v1.db");
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
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
  TSR_COMPARE(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->schemaVersion(), RunStore::kSchemaVersion);
  TSR_COMPARE(s->runs()->front().name, std::string("old"));
  REQUIRE(s->createProfile(1, "p", 0, 0).ok());
}

TEST_CASE("profileKernelsAndMarksRoundTrip") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto run = s->createRun("r", "p", "");
  auto prof = s->createProfile(*run, "steps 1-2", 1, 2);
  std::vector<KernelInfo> kernels = {
      {7, "train_step", "fusion.7 loop[add,mul,gelu]", "loop", {3, 4, 5}, {"add", "mul", "gelu"}, "h.0.mlp"},
      {2, "train_step", "dot_general f32[8,4],f32[4,2]", "gemm", {1}, {"dot_general"}, ""},
      {9, "eval \"quoted\"", "odd, name", "opaque", {}, {}, "a.b"}};
  REQUIRE(s->addProfileKernels(*prof, kernels).ok());
  auto back = s->profileKernels(*prof);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  TSR_COMPARE(back->size(), size_t(3));  // by fusion id
  REQUIRE(back->at(0) == kernels[1]);
  REQUIRE(back->at(1) == kernels[0]);
  REQUIRE(back->at(2) == kernels[2]);

  std::vector<ProfileMarkInfo> marks = {{"step 2", 2000, 900}, {"step 1", 1000, 950}, {"step 1", 1010, 940, 1}};
  REQUIRE(s->addProfileMarks(*prof, marks).ok());
  auto m = s->profileMarks(*prof);
  TSR_COMPARE(m->size(), size_t(3));
  REQUIRE(m->at(0) == marks[1]);
  REQUIRE(m->at(1) == marks[2]);  // rank 1's step keeps its rank
  REQUIRE(m->at(2) == marks[0]);
  std::vector<MemorySampleInfo> memory = {{1500, 4096, 1}, {1200, 2048, 0}};
  REQUIRE(s->addProfileMemory(*prof, memory).ok());
  auto mem = s->profileMemory(*prof);
  REQUIRE(mem.ok());
  REQUIRE(*mem == (std::vector<MemorySampleInfo>{memory[1], memory[0]}));

  // Another profile sees none of them, and deleting the run takes them along.
  auto other = s->createProfile(*run, "other", 0, 0);
  TSR_COMPARE(s->profileKernels(*other)->size(), size_t(0));
  REQUIRE(s->deleteRun(*run).ok());
  TSR_COMPARE(s->profileKernels(*prof)->size(), size_t(0));
  TSR_COMPARE(s->profileMarks(*prof)->size(), size_t(0));
}

TEST_CASE("damagedKernelRowsAreErrors") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  {
    auto s = RunStore::open(path);
    auto run = s->createRun("r", "p", "");
    auto prof = s->createProfile(*run, "p", 0, 0);
    REQUIRE(s->addProfileKernels(*prof, {{1, "x", "k", "loop", {1}, {"add"}, ""}}).ok());
  }
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  TSR_COMPARE(sqlite3_exec(db, "UPDATE profile_kernels SET nodes = '[1, \"x\"'", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto s = RunStore::open(path);
  auto k = s->profileKernels(1);
  REQUIRE(!k.ok());
  REQUIRE_MESSAGE(k.error().message.find("damaged") != std::string::npos, k.error().message.c_str());
}

TEST_CASE("migratesVersion2DatabasesKeepingTheirProfiles") {
  test::TempDir dir;
  std::string path = dir.filePath("v2.db");
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
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
  TSR_COMPARE(sqlite3_exec(db, v2, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->schemaVersion(), RunStore::kSchemaVersion);
  TSR_COMPARE(s->runs()->front().name, std::string("old"));
  TSR_COMPARE(s->metrics(1, "loss")->front().value, 2.25);
  auto profiles = s->profiles(1);
  TSR_COMPARE(profiles->size(), size_t(1));
  TSR_COMPARE(profiles->front().name, std::string("steps 5-6"));
  auto events = s->kernelEvents(1);
  TSR_COMPARE(events->size(), size_t(2));
  TSR_COMPARE(events->at(0).name, std::string("dot_general"));
  TSR_COMPARE(events->at(0).flops, 1e6);
  TSR_COMPARE(events->at(1).stream, int64_t(1));
  // The old profile has no kernel table yet; one can be added.
  TSR_COMPARE(s->profileKernels(1)->size(), size_t(0));
  REQUIRE(s->addProfileKernels(1, {{3, "train_step", "dot_general", "gemm", {0}, {"dot_general"}, ""}}).ok());
  TSR_COMPARE(s->profileKernels(1)->front().ops.front(), std::string("dot_general"));
}

TEST_CASE("namesTagsNotesAndArchive") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto a = s->createRun("a", "p", "");
  auto b = s->createRun("b", "p", "");
  REQUIRE(s->renameRun(*a, "baseline").ok());
  REQUIRE(s->setNotes(*a, "lr too high?\nsee step 40").ok());
  REQUIRE(s->addTags(*a, {"sweep-1", "lr=3e-4", "sweep-1"}).ok());
  REQUIRE(s->addTags(*b, {"sweep-1"}).ok());
  REQUIRE(s->removeTags(*a, {"lr=3e-4", "absent"}).ok());
  REQUIRE(s->setArchived(*b, true).ok());
  auto ra = s->run(*a);
  TSR_COMPARE(ra->name, std::string("baseline"));
  TSR_COMPARE(ra->notes, std::string("lr too high?\nsee step 40"));
  TSR_COMPARE(ra->tags, (std::vector<std::string>{"sweep-1"}));
  REQUIRE(!ra->archived);
  auto all = s->runs();
  TSR_COMPARE(all->size(), size_t(2));
  REQUIRE(all->at(1).archived);
  TSR_COMPARE(all->at(1).tags, (std::vector<std::string>{"sweep-1"}));
  // Runs that do not exist, empty names and empty tags are errors, not silent no-ops.
  REQUIRE(!s->renameRun(99, "x").ok());
  REQUIRE(!s->setNotes(99, "x").ok());
  REQUIRE(!s->addTags(99, {"x"}).ok());
  REQUIRE(!s->setArchived(99, true).ok());
  REQUIRE(!s->renameRun(*a, "").ok());
  REQUIRE(!s->addTags(*a, {""}).ok());
  REQUIRE(!s->deleteRun(99).ok());
  REQUIRE(s->deleteRun(*b).ok());
  TSR_COMPARE(s->runs()->size(), size_t(1));
}

TEST_CASE("batchedMetricsAreEveryStepOfEveryKey") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto run = s->createRun("r", "p", "");
  std::vector<StepMetrics> batch;
  for (int64_t step = 1; step <= 500; ++step)
    batch.push_back({step, 100.0 + step, {{"loss", 1.0 / step}, {"lr", 1e-3}}});
  REQUIRE(s->logMetricsBatch(*run, batch).ok());
  REQUIRE(s->logMetricsBatch(*run, {}).ok());
  auto loss = s->metrics(*run, "loss");
  TSR_COMPARE(loss->size(), size_t(500));
  TSR_COMPARE(loss->at(249).step, int64_t(250));
  TSR_COMPARE(loss->at(249).value, 1.0 / 250);
  TSR_COMPARE(loss->at(249).time, 350.0);
  TSR_COMPARE(s->metrics(*run, "lr")->size(), size_t(500));
  // A batch is one transaction: a bad row (NaN is NULL to SQLite, which the table refuses) writes nothing.
  std::vector<StepMetrics> bad = {{501, 0, {{"loss", 0.5}}}, {502, 0, {{"loss", std::nan("")}}}};
  REQUIRE(!s->logMetricsBatch(*run, bad).ok());
  TSR_COMPARE(s->metrics(*run, "loss")->size(), size_t(500));
}

// A schema 3 store read as it is (the IDE of a newer Tessera on an older project), then migrated: "killed"
// runs read as stopped, and there are no notes or tags until the migration adds them.
TEST_CASE("schema3StoresReadAndMigrate") {
  test::TempDir dir;
  std::string path = dir.filePath("v3.db");
  {
    auto s = RunStore::open(path);
    REQUIRE(s.ok());
    REQUIRE(s->createRun("old", "p", "").ok());
  }
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* downgrade =
      "ALTER TABLE profile_marks DROP COLUMN rank;"
      "DROP TABLE profile_collectives; DROP TABLE profile_devices;"
      "DROP TABLE profile_buckets; DROP TABLE profile_rows; DROP TABLE profile_levels;"
      "DROP INDEX kernel_events_by_span; ALTER TABLE kernel_events DROP COLUMN span_class;"
      "DROP TABLE profile_memory; DROP TABLE run_tags; ALTER TABLE runs DROP COLUMN notes;"
      "ALTER TABLE runs DROP COLUMN archived;"
      "UPDATE runs SET status = 'killed'; PRAGMA user_version = 3;";
  TSR_COMPARE(sqlite3_exec(db, downgrade, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  {
    auto r = RunStore::openReadOnly(path);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    TSR_COMPARE(r->schemaVersion(), 3);
    auto runs = r->runs();
    REQUIRE_MESSAGE(runs.ok(), runs.error().message);
    TSR_COMPARE(runs->front().status, RunStatus::Stopped);
    REQUIRE(runs->front().tags.empty());
    auto marks = r->profileMarks(1);  // a store before ranks: read as it is
    REQUIRE_MESSAGE(marks.ok(), marks.error().message);
  }
  auto s = RunStore::open(path);
  REQUIRE(s.ok());
  TSR_COMPARE(s->schemaVersion(), RunStore::kSchemaVersion);
  REQUIRE(s->addTags(1, {"kept"}).ok());
  TSR_COMPARE(s->run(1)->tags.front(), std::string("kept"));
  TSR_COMPARE(std::string(runStatusName(s->run(1)->status)), std::string("stopped"));
}

// A new (empty) file becomes a store; another program's database (tables, no schema of ours) is refused and left
// byte for byte as it was (it used to get the store's tables and WAL mode); a newer schema is refused.
TEST_CASE("migratesAnEmptyDatabaseAndRefusesNewerOnes") {
  test::TempDir dir;
  std::string empty = dir.filePath("empty.db");
  std::ofstream(empty).close();
  auto e = RunStore::open(empty);
  REQUIRE(e.ok());
  TSR_COMPARE(e->schemaVersion(), RunStore::kSchemaVersion);

  std::string path = dir.filePath("old.db");
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  TSR_COMPARE(sqlite3_exec(db, "CREATE TABLE unrelated(x); PRAGMA user_version = 0;", nullptr, nullptr, nullptr),
              SQLITE_OK);
  sqlite3_close(db);
  auto bytesOf = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = bytesOf(path);
  auto s = RunStore::open(path);
  REQUIRE(!s.ok());
  REQUIRE_MESSAGE(s.error().message.find(path + ": not a Tessera run store (it holds another program's tables: "
                                         "unrelated)") == 0, s.error().message.c_str());
  TSR_COMPARE(bytesOf(path), before);
  REQUIRE(!std::filesystem::exists(path + "-wal"));

  std::string newer = dir.filePath("newer.db");
  TSR_COMPARE(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  TSR_COMPARE(sqlite3_exec(db, "PRAGMA user_version = 99;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto n = RunStore::open(newer);
  REQUIRE(!n.ok());
  REQUIRE_MESSAGE(n.error().message.find("newer") != std::string::npos, n.error().message.c_str());
}

TEST_CASE("badFilesAreErrorsThatNameThem") {
  test::TempDir dir;
  std::string junk = dir.filePath("junk.db");
  std::ofstream(junk) << "this is not a database, just text that is long enough to have a header";
  auto j = RunStore::open(junk);
  REQUIRE(!j.ok());
  REQUIRE_MESSAGE(j.error().message.find("junk.db") != std::string::npos, j.error().message.c_str());
  auto missingDir = RunStore::open(dir.filePath("no/such/dir/runs.db"));
  REQUIRE(!missingDir.ok());
  REQUIRE_MESSAGE(missingDir.error().message.find("runs.db") != std::string::npos, missingDir.error().message.c_str());
}

// Read-only opening (runs list and show, the IDE) of an empty file and of another program's database: "not a
// Tessera run store", and the file keeps every byte (open() used to write the schema into both).
TEST_CASE("readOnlyOpeningWritesNothing") {
  test::TempDir dir;
  auto bytesOf = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::string empty = dir.filePath("empty.db");
  std::ofstream(empty).close();
  std::string foreign = dir.filePath("foreign.db");
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  TSR_COMPARE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine');", nullptr, nullptr, nullptr),
              SQLITE_OK);
  sqlite3_close(db);
  std::string junk = dir.filePath("junk.db");
  std::ofstream(junk) << "this is not a database, just text that is long enough to have a header";
  for (const std::string& path : {empty, foreign, junk}) {
    const std::string before = bytesOf(path);
    auto s = RunStore::openReadOnly(path);
    REQUIRE(!s.ok());
    REQUIRE_MESSAGE(s.error().message.find(path + ": not a Tessera run store") == 0, s.error().message.c_str());
    TSR_COMPARE(bytesOf(path), before);
    REQUIRE(!std::filesystem::exists(path + "-wal"));
  }
  REQUIRE(!RunStore::openReadOnly(dir.filePath("absent.db")).ok());
  REQUIRE(!std::filesystem::exists(dir.filePath("absent.db")));

  // A real store reads; writing through the read-only handle fails with SQLite's word for it.
  std::string path = dir.filePath("runs.db");
  {
    auto w = RunStore::open(path);
    REQUIRE(w.ok());
    auto run = w->createRun("r", "p", "");
    REQUIRE(w->logMetrics(*run, 1, {{"loss", 2.5}}).ok());
  }
  auto r = RunStore::openReadOnly(path);
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  TSR_COMPARE(r->runs()->size(), size_t(1));
  TSR_COMPARE(r->metrics(1, "loss")->front().value, 2.5);
  auto write = r->createRun("x", "p", "");
  REQUIRE(!write.ok());
  REQUIRE_MESSAGE(write.error().message.find("readonly") != std::string::npos, write.error().message.c_str());
}

// Pages of a store overwritten with noise, one at a time: a read either returns everything that was written
// or fails with SQLite's own message and the file's name; it never returns part of a series as if it were
// all, and never says "no run 1" about a run that is there.
TEST_CASE("damagedPagesAreErrorsNotShorterAnswers") {
  test::TempDir dir;
  std::string good = dir.filePath("good.db");
  {
    auto s = RunStore::open(good);
    REQUIRE(s.ok());
    auto run = s->createRun("r", "p", "");
    for (int step = 0; step < 2000; ++step) REQUIRE(s->logMetrics(*run, step, {{"loss", 1.0 / (1 + step)}}).ok());
  }  // the last connection's close folds the WAL into the file
  std::ifstream in(good, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  const size_t pageSize = 4096;
  REQUIRE(bytes.size() > 8 * pageSize);
  int errors = 0;
  for (size_t page = 1; page * pageSize < bytes.size(); ++page) {
    std::string b = bytes;
    for (size_t i = 0; i < pageSize && page * pageSize + i < b.size(); ++i)
      b[page * pageSize + i] = static_cast<char>((i * 131 + page) & 0xff);
    std::string path = dir.filePath("damaged" + std::to_string(page) + ".db");
    std::ofstream(path, std::ios::binary) << b;
    auto s = RunStore::openReadOnly(path);
    if (!s.ok()) {
      ++errors;
      continue;
    }
    auto loss = s->metrics(1, "loss");
    if (loss.ok()) {
      REQUIRE_MESSAGE(loss->size() == 2000, "page " << page << ": " << loss->size() << " of 2000 points, no error");
    } else {
      ++errors;
      REQUIRE_MESSAGE(loss.error().message.find(path) != std::string::npos, loss.error().message.c_str());
      REQUIRE_MESSAGE(loss.error().message.find("malformed") != std::string::npos, loss.error().message.c_str());
    }
    auto run = s->run(1);
    if (!run.ok())
      REQUIRE_MESSAGE(run.error().message.find("no run 1") == std::string::npos, run.error().message.c_str());
  }
  REQUIRE(errors > 0);
}

TEST_CASE("aWriterAndAReaderAtOnceNeverSeeALockedDatabase") {
  test::TempDir dir;
  std::string path = dir.filePath("runs.db");
  auto writer = RunStore::open(path);
  REQUIRE(writer.ok());
  auto run = writer->createRun("busy", "p", "");
  REQUIRE(run.ok());
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
  REQUIRE_MESSAGE(writerError.empty(), writerError.c_str());
  REQUIRE_MESSAGE(readerError.empty(), readerError.c_str());
  REQUIRE(written.load() > 10);
  REQUIRE(reads > 1);
  TSR_COMPARE(writer->metrics(*run, "loss")->size(), size_t(written.load()));
}

// Processes that open a new store at the same moment (a sweep's parallel runs) migrate it once between them:
// every opener succeeds and each run gets its own id.
TEST_CASE("openersOfANewStoreAtOnceAllSucceed") {
  for (int round = 0; round < 5; ++round) {
    test::TempDir dir;
    const std::string path = dir.filePath("runs.db");
    std::vector<std::thread> threads;
    std::vector<std::string> errors(6);
    std::vector<int64_t> ids(6, 0);
    for (int i = 0; i < 6; ++i)
      threads.emplace_back([&, i] {
        auto s = RunStore::open(path);
        if (!s.ok()) { errors[i] = s.error().message; return; }
        auto run = s->createRun("r", "p", "");
        if (!run.ok()) errors[i] = run.error().message;
        else ids[i] = *run;
      });
    for (auto& t : threads) t.join();
    for (const std::string& e : errors) REQUIRE_MESSAGE(e.empty(), e);
    std::sort(ids.begin(), ids.end());
    TSR_COMPARE(ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  }
}

// The summaries SQLite computes equal those computed from the points; the keys' skip scan finds every key.
TEST_CASE("metricSummariesEqualTheirPoints") {
  test::TempDir dir;
  auto s = RunStore::open(dir.filePath("runs.db"));
  REQUIRE(s.ok());
  auto run = s->createRun("r", "p", "");
  auto other = s->createRun("o", "p", "");
  std::vector<StepMetrics> rows;
  for (int64_t step = 1; step <= 300; ++step) {
    StepMetrics m{step, 1000.0 + step, {{"loss", std::sin(0.1 * step) + 2}, {"lr", 1e-3 * step}}};
    if (step % 7 == 0) m.values.push_back({"val_loss", std::cos(0.3 * step)});
    rows.push_back(m);
  }
  REQUIRE(s->logMetricsBatch(*run, rows).ok());
  REQUIRE(s->logMetrics(*other, 5, {{"zeta", 1.0}, {"alpha", 2.0}}).ok());
  TSR_COMPARE(*s->metricKeys(*run), (std::vector<std::string>{"loss", "lr", "val_loss"}));
  TSR_COMPARE(*s->metricKeys(*other), (std::vector<std::string>{"alpha", "zeta"}));
  TSR_COMPARE(s->metricKeys(99)->size(), size_t(0));
  auto summaries = s->metricSummaries(*run);
  REQUIRE(summaries.ok());
  TSR_COMPARE(summaries->size(), size_t(3));
  for (const std::string key : {"loss", "lr", "val_loss"}) {
    auto points = s->metrics(*run, key);
    const auto& m = summaries->at(key);
    TSR_COMPARE(m.points, static_cast<int64_t>(points->size()));
    double lo = points->front().value, hi = lo;
    for (const auto& p : *points) {
      lo = std::min(lo, p.value);
      hi = std::max(hi, p.value);
    }
    TSR_COMPARE(m.min, lo);
    TSR_COMPARE(m.max, hi);
    TSR_COMPARE(m.latest.step, points->back().step);
    TSR_COMPARE(m.latest.value, points->back().value);
    TSR_COMPARE(m.latest.time, points->back().time);
  }
}

namespace {

bool saysLocked(const Status& st, const std::string& path) {
  return !st.ok() && st.error().message.find("the run store " + path + " is locked by another process") == 0;
}
std::string said(const Status& st) { return st.ok() ? std::string("no error") : st.error().message; }
template <class T>
Status statusOf(const Result<T>& r) {
  return r.ok() ? Status() : Status(r.error());
}

}  // namespace

// While another connection holds the write lock, a current store opens at once (checking its schema takes no
// write lock) and an edit fails after the wait limit, saying the store is locked, not "database is locked"
// after minutes; nothing changed, and once the lock is free the same edits go through.
TEST_CASE("anEditOfALockedStoreFailsAfterTheLimitAndChangesNothing") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto s = RunStore::open(path);
    REQUIRE(s.ok());
    REQUIRE(s->createRun("before", "p", "").ok());
    REQUIRE(s->addTags(1, {"kept"}).ok());
  }
  test::HeldLock other(path);
  REQUIRE_MESSAGE(other.held(), other.error());
  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->run(1)->name, std::string("before"));  // reads go on beside the writer
  Status renamed = s->renameRun(1, "after");
  REQUIRE_MESSAGE(saysLocked(renamed, path), said(renamed));
  Status tagged = s->setTags(1, {"new"});
  REQUIRE_MESSAGE(saysLocked(tagged, path), said(tagged));
  Status deleted = s->deleteRun(1);
  REQUIRE_MESSAGE(saysLocked(deleted, path), said(deleted));
  other.release();
  TSR_COMPARE(s->run(1)->name, std::string("before"));
  TSR_COMPARE(s->run(1)->tags, (std::vector<std::string>{"kept"}));
  REQUIRE(s->renameRun(1, "after").ok());
  TSR_COMPARE(s->run(1)->name, std::string("after"));
}

// A store that needs migrating takes the write lock to migrate: held by another process, the opening fails
// after the limit (it used to try 500 times, each waiting 5 s) and leaves the store at its old schema, which
// the next opening migrates.
TEST_CASE("openingAnOldStoreThatIsLockedFailsAfterTheLimit") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto s = RunStore::open(path);
    REQUIRE(s.ok());
    REQUIRE(s->createRun("old", "p", "").ok());
  }
  {
    sqlite3* db = nullptr;
    TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* downgrade = "ALTER TABLE profile_marks DROP COLUMN rank; ALTER TABLE profile_memory DROP COLUMN rank;"
                            "PRAGMA user_version = 7;";
    TSR_COMPARE(sqlite3_exec(db, downgrade, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  {
    test::HeldLock other(path);
    REQUIRE_MESSAGE(other.held(), other.error());
    const Status opened = statusOf(RunStore::open(path));
    REQUIRE_MESSAGE(saysLocked(opened, path), said(opened));
  }
  {
    auto r = RunStore::openReadOnly(path);
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    TSR_COMPARE(r->schemaVersion(), 7);
    TSR_COMPARE(r->run(1)->name, std::string("old"));
  }
  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->schemaVersion(), RunStore::kSchemaVersion);
  TSR_COMPARE(s->run(1)->name, std::string("old"));
}

// A new file that another connection holds (in SQLite's rollback journal: it is no store yet) cannot be switched
// to WAL: the opening, which tries again while SQLite refuses at once, gives up after the limit too.
TEST_CASE("openingANewFileThatIsLockedFailsAfterTheLimit") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    test::HeldLock other(path);
    REQUIRE_MESSAGE(other.held(), other.error());
    REQUIRE_MESSAGE(other.exec("CREATE TABLE IF NOT EXISTS scratch(x)"), other.error());
    const Status opened = statusOf(RunStore::open(path));
    REQUIRE_MESSAGE(saysLocked(opened, path), said(opened));
  }
  auto s = RunStore::open(path);
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  REQUIRE(s->createRun("first", "p", "").ok());
}

// setTags replaces the run's tags in one transaction: when a write fails midway (here a trigger refuses one tag)
// the old tags stay, where removing and adding in two transactions lost them.
TEST_CASE("setTagsIsAllOrNothing") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  auto s = RunStore::open(path);
  REQUIRE(s.ok());
  REQUIRE(s->createRun("r", "p", "").ok());
  REQUIRE(s->setTags(1, {"a", "b"}).ok());
  TSR_COMPARE(s->run(1)->tags, (std::vector<std::string>{"a", "b"}));
  REQUIRE(s->setTags(1, {"b", "c", "c"}).ok());
  TSR_COMPARE(s->run(1)->tags, (std::vector<std::string>{"b", "c"}));
  REQUIRE(!s->setTags(99, {"x"}).ok());
  REQUIRE(!s->setTags(1, {"d", ""}).ok());
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* refuse = "CREATE TRIGGER refuse BEFORE INSERT ON run_tags WHEN NEW.tag = 'refused' "
                       "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;";
  TSR_COMPARE(sqlite3_exec(db, refuse, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Status st = s->setTags(1, {"d", "refused"});
  REQUIRE(!st.ok());
  REQUIRE_MESSAGE(st.error().message.find("refused by the test") != std::string::npos, st.error().message);
  TSR_COMPARE(s->run(1)->tags, (std::vector<std::string>{"b", "c"}));
  REQUIRE(s->setTags(1, {}).ok());
  REQUIRE(s->run(1)->tags.empty());
}

// An edit that reads the run before it changes it (tags: the run must exist) takes the write lock first and waits
// for another connection's write to end. A deferred transaction read first and then, at its first write, failed
// at once (SQLite lets a reader not wait for a writer) with "locked by another process", a limit of 20 s unused.
TEST_CASE("anEditThatReadsFirstWaitsForTheLockAndSucceeds") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  auto s = RunStore::open(path);
  REQUIRE(s.ok());
  REQUIRE(s->createRun("r", "p", "").ok());
  REQUIRE(s->addTags(1, {"a"}).ok());
  const auto edits = std::vector<std::pair<const char*, std::function<Status()>>>{
      {"addTags", [&] { return s->addTags(1, {"b", "c"}); }},
      {"removeTags", [&] { return s->removeTags(1, {"c"}); }},
      {"setTags", [&] { return s->setTags(1, {"a", "b", "d"}); }},
  };
  for (const auto& [name, edit] : edits) {
    INFO(std::string(name));
    test::HeldLock other(path, std::chrono::seconds(20));
    REQUIRE_MESSAGE(other.held(), other.error());
    // The holder writes and lets go a moment later, as a training process committing a step does.
    std::thread holder([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      other.release();
    });
    const Status st = edit();
    holder.join();
    REQUIRE_MESSAGE(st.ok(), said(st));
  }
  TSR_COMPARE(s->run(1)->tags, (std::vector<std::string>{"a", "b", "d"}));
  // The run is looked for under the lock: a missing one is "no run", not a foreign key's failure.
  const Status missing = s->addTags(42, {"x"});
  REQUIRE_MESSAGE(said(missing).find("no run 42") != std::string::npos, said(missing));
}

// TESSERA_STORE_LOCK_WAIT sets the limit where no program set one (the CLI's --lock-wait does): an edit of a
// locked store fails after about half a second, not the default 30 s; a limit set wins over the variable.
TEST_CASE("theLockWaitLimitComesFromTheEnvironment") {
  test::TempDir dir;
  const std::string path = dir.filePath("runs.db");
  {
    auto s = RunStore::open(path);
    REQUIRE(s.ok());
    REQUIRE(s->createRun("before", "p", "").ok());
  }
  struct Restore {
    ~Restore() {
      ::unsetenv("TESSERA_STORE_LOCK_WAIT");
      reloadEnvOptions();
      setLockWaitLimit(std::nullopt);
    }
  } restore;
  setLockWaitLimit(std::nullopt);
  TSR_COMPARE(lockWaitLimit().count(), kDefaultLockWait.count());
  ::setenv("TESSERA_STORE_LOCK_WAIT", "0.5", 1);
  reloadEnvOptions();
  TSR_COMPARE(lockWaitLimit().count(), 500);
  {
    test::HeldLock other(path, std::nullopt);
    REQUIRE_MESSAGE(other.held(), other.error());
    auto s = RunStore::open(path);
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    const auto start = std::chrono::steady_clock::now();
    const Status renamed = s->renameRun(1, "after");
    const auto waited = std::chrono::steady_clock::now() - start;
    REQUIRE_MESSAGE(saysLocked(renamed, path), said(renamed));
    REQUIRE(waited >= std::chrono::milliseconds(400));
    REQUIRE(waited < std::chrono::seconds(15));
  }
  setLockWaitLimit(std::chrono::milliseconds(1500));
  TSR_COMPARE(lockWaitLimit().count(), 1500);
  setLockWaitLimit(std::nullopt);
  TSR_COMPARE(lockWaitLimit().count(), 500);
  ::unsetenv("TESSERA_STORE_LOCK_WAIT");
  reloadEnvOptions();
  TSR_COMPARE(lockWaitLimit().count(), kDefaultLockWait.count());
}
