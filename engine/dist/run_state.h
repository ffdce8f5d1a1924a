#pragma once
// One runOnDevices call's state, shared by its devices (DeviceContext::run): which device failed first, and what
// the communicator keeps for the run's collectives. Internal to engine/dist (device.cpp and the communicators).
#include <memory>
#include <mutex>
#include <string>

#include "engine/dist/communicator.h"

namespace tsr::dist {

struct RunState {
  Communicator* comm = nullptr;
  std::mutex mutex;
  int firstDevice = -1;
  std::string firstMessage;
  // The communicator's state for this run's collectives (the in-process one: its rendezvous, call numbers and
  // abort), made by the communicator on the run's first collective and guarded by the communicator's lock. It
  // goes with the run: runs that overlap (from two host threads, or one started inside a device's program)
  // never meet each other's calls, and no later run meets a call that a failed one left half met.
  std::shared_ptr<void> collectives;

  // Records the first failure and aborts the communicator so that the run's other devices return too. Called
  // with the failing device's DeviceContext current on the calling thread: the in-process communicator reads it
  // to abort this run's calls only.
  void recordFailure(int position, const std::string& message);
};

}  // namespace tsr::dist
