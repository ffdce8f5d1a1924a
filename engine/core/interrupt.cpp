#include "engine/core/interrupt.h"

#include <atomic>

namespace tsr {

namespace {

std::atomic<bool> gInterrupt{false};
static_assert(std::atomic<bool>::is_always_lock_free, "requestInterrupt is called from a signal handler");

}  // namespace

void requestInterrupt() { gInterrupt.store(true, std::memory_order_relaxed); }
void clearInterrupt() { gInterrupt.store(false, std::memory_order_relaxed); }
bool interruptRequested() { return gInterrupt.load(std::memory_order_relaxed); }

Status checkInterrupt() {
  if (interruptRequested()) return Error{kInterruptedMessage};
  return {};
}

}  // namespace tsr
