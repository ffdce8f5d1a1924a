#pragma once
// What a run store does while another process holds its lock: it waits, and after about a second says so once
// per process through the notice a program sets (the CLI prints "waiting for runs.db (locked by another
// process)..."), so that a wait is never mistaken for a hang. A wait ends after the limit (30 s unless set, by
// the commands' --lock-wait or TESSERA_STORE_LOCK_WAIT):
// the call then fails with "the run store ... is locked by another process", its data as it was. Opening a
// store, migration included, waits at most the limit in all; after that each statement waits at most the limit.
// A training process writes a few times a second in short transactions, so a reader or an edit that meets
// one waits milliseconds; the limit is met only behind a long write (a large profile) or a stuck process.
#include <chrono>
#include <functional>
#include <optional>
#include <string>

namespace tsr::store {

// Set once at start-up; `notice` gets the store's path.
void setLockWaitNotice(std::function<void(const std::string& path)> notice);
constexpr std::chrono::milliseconds kDefaultLockWait{30000};
// How long one wait for the store's lock may last: the limit set here (the CLI's --lock-wait; tests set a short
// one), else TESSERA_STORE_LOCK_WAIT's seconds, else kDefaultLockWait. None: back to the variable or the default.
void setLockWaitLimit(std::optional<std::chrono::milliseconds> limit);
std::chrono::milliseconds lockWaitLimit();

}  // namespace tsr::store
