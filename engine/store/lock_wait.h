#pragma once
// What a run store does while another process holds its lock: it waits, and after about a second says so once
// per process through the notice a program sets (the CLI prints "waiting for runs.db (locked by another
// process)..."), so that a wait is never mistaken for a hang. A wait ends after the limit (30 s unless set):
// the call then fails with "the run store ... is locked by another process", its data as it was. Opening a
// store, migration included, waits at most the limit in all; after that each statement waits at most the limit.
// A training process writes a few times a second in short transactions, so a reader or an edit that meets
// one waits milliseconds; the limit is met only behind a long write (a large profile) or a stuck process.
#include <chrono>
#include <functional>
#include <string>

namespace tsr::store {

// Set once at start-up; `notice` gets the store's path.
void setLockWaitNotice(std::function<void(const std::string& path)> notice);
// How long one wait for the store's lock may last (tests set a short one).
void setLockWaitLimit(std::chrono::milliseconds limit);
std::chrono::milliseconds lockWaitLimit();

}  // namespace tsr::store
