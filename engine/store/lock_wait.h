#pragma once
// What a run store does while another process holds its lock: it waits (up to 5 s), and after about a second
// says so once per process through the notice a program sets (the CLI prints "waiting for runs.db (locked by
// another process)..."), so that a wait is never mistaken for a hang.
#include <functional>
#include <string>

namespace tsr::store {

// Set once at start-up; `notice` gets the store's path.
void setLockWaitNotice(std::function<void(const std::string& path)> notice);

}  // namespace tsr::store
