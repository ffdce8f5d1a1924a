#pragma once
// What the Runs panel changes about a run: its name, notes and tags, whether it is archived, or the run itself
// deleted with its checkpoint folder. Each opens the store for writing, makes one change and closes it (a
// training process may be writing the same store; WAL lets both).
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"

namespace tsr::inspect {

Status renameRun(const std::string& dbPath, int64_t run, const std::string& name);
Status setRunNotes(const std::string& dbPath, int64_t run, const std::string& notes);
// The run's tags become exactly `tags` (blank ones dropped).
Status setRunTags(const std::string& dbPath, int64_t run, const std::vector<std::string>& tags);
Status setRunArchived(const std::string& dbPath, int64_t run, bool archived);
// Deletes the run's rows and its checkpoint folder (<project>/checkpoints/run-N). A running run is refused.
Status deleteRun(const std::string& dbPath, int64_t run);
// What deleteRun would remove, for the confirmation: "run 3 (baseline) and its checkpoints (1.2 GB in ...)".
Result<std::string> describeDeletion(const std::string& dbPath, int64_t run);

}  // namespace tsr::inspect
