#pragma once
// The environment variables as the IDE reads them (engine/core/env_options.h: one table for the engine, the
// CLI and the IDE): TESSERA_BIN, the tessera executable runs are started with.
#include "engine/core/env_options.h"

namespace tsr::inspect {

using tsr::EnvLocations;
using tsr::envLocations;

}  // namespace tsr::inspect
