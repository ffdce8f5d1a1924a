#pragma once
// Another process's hold on a run store, for tests of what the store does meanwhile: a connection of its own
// inside a write transaction (BEGIN IMMEDIATE, as a training process committing metrics), and a short limit on
// how long the store waits for it (none: the limit is left as it is), both undone when the object goes.
#include <chrono>
#include <optional>
#include <string>

#include <sqlite3.h>

#include "engine/store/lock_wait.h"

namespace tsr::test {

class HeldLock {
 public:
  explicit HeldLock(const std::string& path,
                    std::optional<std::chrono::milliseconds> limit = std::chrono::milliseconds(300)) {
    if (limit) {
      m_limit = store::lockWaitLimit();
      store::setLockWaitLimit(*limit);
    }
    if (sqlite3_open(path.c_str(), &m_db) != SQLITE_OK) m_error = sqlite3_errmsg(m_db);
    else m_held = exec("BEGIN IMMEDIATE");
  }
  ~HeldLock() {
    release();
    if (m_limit) store::setLockWaitLimit(*m_limit);
  }
  HeldLock(const HeldLock&) = delete;
  HeldLock& operator=(const HeldLock&) = delete;

  bool held() const { return m_held; }
  const std::string& error() const { return m_error; }
  // Runs sql inside the held transaction (what the holder writes, never committed).
  bool exec(const char* sql) {
    char* err = nullptr;
    if (sqlite3_exec(m_db, sql, nullptr, nullptr, &err) == SQLITE_OK) return true;
    m_error = std::string(sql) + ": " + (err ? err : sqlite3_errmsg(m_db));
    sqlite3_free(err);
    return false;
  }
  // Rolls the transaction back and closes the connection.
  void release() {
    if (!m_db) return;
    if (m_held) sqlite3_exec(m_db, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close(m_db);
    m_db = nullptr;
    m_held = false;
  }

 private:
  std::optional<std::chrono::milliseconds> m_limit;  // the limit to restore; none: not changed
  sqlite3* m_db = nullptr;
  bool m_held = false;
  std::string m_error;
};

}  // namespace tsr::test
