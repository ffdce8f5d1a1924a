#pragma once
// The environment variables as the IDE reads them (engine/core/env_options.h: one table for the engine, the
// CLI and the IDE): TESSERA_BIN, the tessera executable runs are started with; TESSERA_STORE_LOCK_WAIT, the
// default of how long a wait for a run store another process holds locked may last, which the IDE's
// preference sets over (engine/store/lock_wait.h).
#include "engine/core/env_options.h"
#include "engine/store/lock_wait.h"

namespace tsr::inspect {

using tsr::EnvLocations;
using tsr::envLocations;
using tsr::envOptions;
using tsr::store::kDefaultLockWait;
using tsr::store::lockWaitLimit;
using tsr::store::setLockWaitLimit;

}  // namespace tsr::inspect
