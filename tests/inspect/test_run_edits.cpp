// The Runs panel's edits (engine/inspect/run_edits.h), each of which the user must find all made or not made at
// all: a deletion the store refuses keeps the run's rows and its checkpoints; tags replaced in one go keep the
// old ones when a write fails.
#include "tests/check.h"

#include <filesystem>

#include <sqlite3.h>

#include "engine/inspect/run_edits.h"
#include "engine/store/run_store.h"
#include "tests/store/held_lock.h"
#include "tests/temp_dir.h"

using namespace tsr;
namespace fs = std::filesystem;

namespace {

// A store with run 1 of the project `dir` (metrics logged, a checkpoint in <dir>/checkpoints/run-1).
std::string storeWithCheckpointedRun(const test::TempDir& dir) {
  const std::string path = dir.filePath("runs.db");
  auto s = store::RunStore::open(path);
  REQUIRE(s.ok());
  auto run = s->createRun("r", dir.path(), "");
  REQUIRE(run.ok());
  TSR_COMPARE(*run, int64_t(1));
  REQUIRE(s->logMetrics(1, 1, {{"loss", 2.0}}).ok());
  REQUIRE(s->finishRun(1, store::RunStatus::Finished).ok());
  fs::create_directories(dir.filePath("checkpoints/run-1"));
  test::writeFile(dir.filePath("checkpoints/run-1/latest.safetensors"), "x");
  return path;
}

}  // namespace

// The rows are deleted first: a store locked by another process refuses the deletion before anything is
// removed, so the run is still listed with its metrics and its checkpoint is still there (the folder used to go
// first). Once the lock is free the deletion takes both.
TEST_CASE("aDeletionTheStoreRefusesKeepsTheRunAndItsCheckpoints") {
  test::TempDir dir;
  const std::string path = storeWithCheckpointedRun(dir);
  const std::string checkpoint = dir.filePath("checkpoints/run-1/latest.safetensors");
  {
    test::HeldLock other(path);
    REQUIRE_MESSAGE(other.held(), other.error());
    Status st = inspect::deleteRun(path, 1);
    REQUIRE(!st.ok());
    REQUIRE_MESSAGE(st.error().message.find("is locked by another process") != std::string::npos, st.error().message);
  }
  REQUIRE(fs::exists(checkpoint));
  {
    auto s = store::RunStore::openReadOnly(path);
    REQUIRE(s.ok());
    TSR_COMPARE(s->run(1)->name, std::string("r"));
    TSR_COMPARE(s->metrics(1, "loss")->size(), size_t(1));
  }
  Status st = inspect::deleteRun(path, 1);
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  REQUIRE(!fs::exists(dir.filePath("checkpoints/run-1")));
  auto s = store::RunStore::openReadOnly(path);
  REQUIRE(s.ok());
  REQUIRE(s->runs()->empty());
}

// Tags are replaced in one transaction: when a write fails midway (a trigger refuses one of the new tags) the
// old tags stay; removed in one transaction and added in another, they were lost.
TEST_CASE("tagsReplacedInOneGoStayWhenAWriteFails") {
  test::TempDir dir;
  const std::string path = storeWithCheckpointedRun(dir);
  REQUIRE(inspect::setRunTags(path, 1, {"a", " ", "b"}).ok());
  auto tags = [&] {
    auto s = store::RunStore::openReadOnly(path);
    REQUIRE(s.ok());
    return s->run(1)->tags;
  };
  TSR_COMPARE(tags(), (std::vector<std::string>{"a", "b"}));
  sqlite3* db = nullptr;
  TSR_COMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const char* refuse = "CREATE TRIGGER refuse BEFORE INSERT ON run_tags WHEN NEW.tag = 'refused' "
                       "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;";
  TSR_COMPARE(sqlite3_exec(db, refuse, nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  Status st = inspect::setRunTags(path, 1, {"c", "refused"});
  REQUIRE(!st.ok());
  REQUIRE_MESSAGE(st.error().message.find("refused by the test") != std::string::npos, st.error().message);
  TSR_COMPARE(tags(), (std::vector<std::string>{"a", "b"}));
  REQUIRE(inspect::setRunTags(path, 1, {"b", "c"}).ok());
  TSR_COMPARE(tags(), (std::vector<std::string>{"b", "c"}));
}
