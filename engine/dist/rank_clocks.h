#pragma once
// One profile of several processes: every rank's clock put on rank 0's, and every rank's bytes brought to rank 0.
//
// Clocks (alignClocks): rank 0 and each other rank r in turn play a few rounds of ping-pong through the
// communicator's permute. In a round, rank 0 reads its clock (t1) and both swap a word, which returns on r only
// after rank 0 has entered it; r then reads its clock (t2) and sends it back in a second swap, after which rank 0
// reads its clock again (t3). So t2 was read, on rank 0's clock, somewhere in [t1, t3]:
//
//   offset = t2 - (t1 + t3) / 2        (r's clock minus rank 0's)     |error| <= (t3 - t1) / 2
//
// and the round with the shortest round trip gives the offset and its bound. A time t of rank r is t - offset on
// rank 0's clock. Ranks of one host share the steady clock (CLOCK_MONOTONIC), so their offsets are within the
// bound of 0; ranks of other hosts are corrected by their measured offset. Devices of one process share one clock:
// their offsets are 0 and exact.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/dist/communicator.h"

namespace tsr::dist {

struct ClockOffset {
  int64_t offsetNs = 0;  // the position's clock minus position 0's
  int64_t errorNs = 0;   // |true offset - offsetNs| <= errorNs (half the best round trip)
  int64_t roundTripNs = 0;
};

// The clock of `clock` read by every position of comm against position 0's, `rounds` ping-pongs each; collective:
// every local device takes part (runOnDevices). Index = position; position 0's entry is {0, 0}. Complete on the
// process that runs position 0 (another process gets its own entry only). `clock` defaults to the profiler's.
Result<std::vector<ClockOffset>> alignClocks(Communicator& comm, int rounds = 8, int64_t (*clock)() = nullptr);

// Every position's bytes at position 0 (index = position), through permute; other positions get their own only.
// Collective, as alignClocks. For processes (MPI): each rank hands its own; in one process the devices share
// memory and need none of this.
Result<std::vector<std::string>> gatherToFirst(Communicator& comm, const std::vector<std::string>& mine);

}  // namespace tsr::dist
