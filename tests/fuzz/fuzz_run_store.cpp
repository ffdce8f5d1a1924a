// The run store opened on a damaged file: SQLite's errors come back as errors, and every read the CLI's
// `runs list`, `runs show` and `runs export-trace` make either works or fails cleanly.
#include <unistd.h>

#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = tsr::fuzz::writeTemp(data, size, "runs.db");
  unlink((path + "-wal").c_str());
  unlink((path + "-shm").c_str());
  auto db = tsr::store::RunStore::open(path);
  if (!db.ok()) return 0;
  auto runs = db->runs();
  if (!runs.ok()) return 0;
  for (const auto& r : *runs) {
    (void)db->params(r.id);
    auto latest = db->latestMetrics(r.id);
    if (latest.ok())
      for (const auto& [key, point] : *latest) (void)db->metrics(r.id, key);
    (void)db->artifactNames(r.id);
    auto profiles = db->profiles(r.id);
    if (!profiles.ok()) continue;
    for (const auto& p : *profiles) {
      auto trace = tsr::train::loadTrace(*db, p.id);
      if (trace.ok()) (void)tsr::runtime::toChromeTrace(*trace);
    }
  }
  return 0;
}
