#pragma once
// Offsets in one arena for values that live from the kernel that defines them to the kernel of their last use
// (the CPU executable's intermediates): two values share bytes only when their lifetimes do not overlap.
#include <cstdint>
#include <vector>

namespace tsr::cpu {

struct ArenaValue {
  int64_t bytes = 0;  // as placed: a multiple of the alignment
  int def = 0, last = 0;  // kernel indices, def <= last
};

struct ArenaPlacement {
  std::vector<int64_t> offsets;  // per value
  int64_t bytes = 0;             // the arena's size
};

// Placed two ways, keeping the smaller arena (as XLA's heap simulator tries several): online, walking the
// kernels and placing each kernel's new values best-fit among the free blocks before freeing the values whose
// last use it was; and offline, largest value first, each at the best-fitting gap among the values already
// placed whose lifetimes overlap its own. The online walk can strand a large block behind a small long-lived
// value; the offline one sees every lifetime at once. The offline placement is quadratic in the values: it is
// skipped above 20,000 of them.
ArenaPlacement placeArena(const std::vector<ArenaValue>& values, int numKernels);

}  // namespace tsr::cpu
