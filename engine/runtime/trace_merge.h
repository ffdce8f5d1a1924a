#pragma once
// One profile from several processes: each rank's trace travels to rank 0 as bytes (encodeTrace/decodeTrace) and
// is merged into rank 0's with its times shifted onto rank 0's clock (mergeRankTrace).
#include <string>
#include <string_view>

#include "engine/core/result.h"
#include "engine/runtime/trace_export.h"

namespace tsr::runtime {

std::string encodeTrace(const Trace& trace);
Result<Trace> decodeTrace(std::string_view bytes);

// The devices of `trace` as rank `rank` of a run, with their clock's offset and its error bound.
void setDeviceClocks(Trace& trace, int rank, int64_t offsetNs, int64_t errorNs);

// Adds rank `rank`'s launches to `into`, each start minus offsetNs (rank's clock minus rank 0's), and its
// devices with their clock. Its kernel table joins `into`'s: a fusion id `into` has with the same entry is
// shared, one it has with another entry gets a fresh id (and so do its launches). Its step marks and memory
// samples are added as rank `rank`'s, shifted the same way.
void mergeRankTrace(Trace& into, Trace part, int rank, int64_t offsetNs, int64_t errorNs);

}  // namespace tsr::runtime
