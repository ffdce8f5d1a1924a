#pragma once
// A request to stop the engine's current work early: Ctrl-C while a Python call compiles or runs. The work checks
// it between steps (passes, kernels, nodes of the interpreter, iterations of a loop), so a long call stops within
// one step and fails with kInterruptedMessage. Process-wide: the request comes from a signal handler, which
// cannot know which thread does the work.
#include "engine/core/result.h"

namespace tsr {

inline constexpr const char* kInterruptedMessage = "interrupted";

// Async-signal-safe: a lock-free atomic store.
void requestInterrupt();
void clearInterrupt();
bool interruptRequested();

// An error saying that the work stopped here, when an interrupt was requested.
Status checkInterrupt();

}  // namespace tsr
