#include "engine/dist/rank_clocks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>

namespace tsr::dist {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Position 0 and `other` swap one word each (both call it); returns the word `other` sent, on position 0.
Status swapWord(Communicator& comm, int self, int other, int64_t send, int64_t& received) {
  const std::pair<int, int> pairs[2] = {{0, other}, {other, 0}};
  return comm.permute(self, pairs, &send, &received, sizeof(int64_t));
}

}  // namespace

Result<std::vector<ClockOffset>> alignClocks(Communicator& comm, int rounds, int64_t (*clock)()) {
  if (!clock) clock = steadyNs;
  if (rounds < 1) return makeError("alignClocks: {} rounds (at least 1)", rounds);
  const int n = comm.numDevices();
  std::vector<ClockOffset> out(static_cast<size_t>(n));
  std::vector<int64_t> best(static_cast<size_t>(n), std::numeric_limits<int64_t>::max());
  TSR_TRY(runOnDevices(comm, [&](int self) -> Status {
    for (int r = 1; r < n; ++r) {
      if (self != 0 && self != r) continue;
      for (int k = 0; k < rounds; ++k) {
        int64_t ignored = 0, t2 = 0;
        if (self == 0) {
          const int64_t t1 = clock();
          TSR_TRY(swapWord(comm, 0, r, 0, ignored));  // returns once r has entered it too
          TSR_TRY(swapWord(comm, 0, r, 0, t2));       // r's clock, read between the two swaps
          const int64_t t3 = clock();
          if (t3 - t1 < best[static_cast<size_t>(r)]) {
            best[static_cast<size_t>(r)] = t3 - t1;
            // (t1 + t3) / 2 without overflow.
            const int64_t mid = t1 + (t3 - t1) / 2;
            out[static_cast<size_t>(r)] = {t2 - mid, (t3 - t1 + 1) / 2, t3 - t1};
          }
        } else {
          TSR_TRY(swapWord(comm, r, r, 0, ignored));
          TSR_TRY(swapWord(comm, r, r, clock(), ignored));
        }
      }
    }
    return {};
  }));
  return out;
}

Result<std::vector<std::string>> gatherToFirst(Communicator& comm, const std::vector<std::string>& mine) {
  const int n = comm.numDevices();
  if (static_cast<int>(mine.size()) != n) return makeError("gatherToFirst: {} entries for {} devices", mine.size(), n);
  // Messages of at most 256 MiB: MPI counts bytes in an int.
  constexpr int64_t kChunk = int64_t{1} << 28;
  std::vector<std::string> out(static_cast<size_t>(n));
  std::vector<int> all(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  std::mutex mutex;
  TSR_TRY(runOnDevices(comm, [&](int self) -> Status {
    const std::string& bytes = mine[static_cast<size_t>(self)];
    int64_t size = static_cast<int64_t>(bytes.size());
    std::vector<int64_t> sizes(static_cast<size_t>(n));
    TSR_TRY(comm.allGather(self, all, &size, sizes.data(), sizeof(int64_t)));
    if (self == 0) {
      std::lock_guard lock(mutex);
      out[0] = bytes;
    }
    for (int r = 1; r < n; ++r) {
      if (self != 0 && self != r) continue;
      const std::pair<int, int> pair[1] = {{r, 0}};
      std::string received(static_cast<size_t>(sizes[static_cast<size_t>(r)]), '\0');
      for (int64_t at = 0; at < sizes[static_cast<size_t>(r)]; at += kChunk) {
        const int64_t len = std::min(kChunk, sizes[static_cast<size_t>(r)] - at);
        // Position 0 sends nothing and r receives nothing (permute zeroes its `out`): buffers of the right size.
        if (self == 0) {
          TSR_TRY(comm.permute(self, pair, received.data() + at, received.data() + at, len));
        } else {
          std::string scratch(static_cast<size_t>(len), '\0');
          TSR_TRY(comm.permute(self, pair, bytes.data() + at, scratch.data(), len));
        }
      }
      if (self == 0) {
        std::lock_guard lock(mutex);
        out[static_cast<size_t>(r)] = std::move(received);
      }
    }
    if (self != 0) {
      std::lock_guard lock(mutex);
      out[static_cast<size_t>(self)] = bytes;
    }
    return {};
  }));
  return out;
}

}  // namespace tsr::dist
