#include "engine/inspect/run_edits.h"

#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"

namespace tsr::inspect {

Status renameRun(const std::string& dbPath, int64_t run, const std::string& name) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  return db.renameRun(run, name);
}

Status setRunNotes(const std::string& dbPath, int64_t run, const std::string& notes) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  return db.setNotes(run, notes);
}

Status setRunTags(const std::string& dbPath, int64_t run, const std::vector<std::string>& tags) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  std::vector<std::string> wanted;
  for (const std::string& t : tags)
    if (t.find_first_not_of(" \t") != std::string::npos) wanted.push_back(t);
  return db.setTags(run, wanted);
}

Status setRunArchived(const std::string& dbPath, int64_t run, bool archived) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::open(dbPath));
  return db.setArchived(run, archived);
}

Result<std::string> describeDeletion(const std::string& dbPath, int64_t run) {
  return train::describeRunDeletion(dbPath, run);
}

Status deleteRun(const std::string& dbPath, int64_t run) { return train::deleteRunAndCheckpoints(dbPath, run); }

}  // namespace tsr::inspect
