#pragma once
// A prepared SQLite statement of the run store (private to engine/store).
#include <cstdint>
#include <string>

#include <sqlite3.h>

#include "engine/core/result.h"

namespace tsr::store {

// Whether the last call on `db` failed because another connection held the lock past the wait (lock_wait.h).
inline bool lockedOut(sqlite3* db) { return (sqlite3_extended_errcode(db) & 0xff) == SQLITE_BUSY; }
// SQLite says "database is locked", which reads like damage; the user needs to know it is another process and
// that nothing was changed.
inline Error lockedError(const std::string& path) {
  return makeError("the run store {} is locked by another process (a training run writing?); nothing was changed, "
                   "try again",
                   path);
}

// A prepared statement that finalizes itself.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : m_db(db) { m_rc = sqlite3_prepare_v2(db, sql, -1, &m_stmt, nullptr); }
  ~Stmt() { sqlite3_finalize(m_stmt); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  bool ok() const { return m_rc == SQLITE_OK; }
  // SQLite's own message, with the file: "run store /p/runs.db: database disk image is malformed".
  Error error() const {
    const char* file = sqlite3_db_filename(m_db, "main");
    const std::string path = file && *file ? file : "(in memory)";
    if (lockedOut(m_db)) return lockedError(path);
    return makeError("run store {}: {}", path, sqlite3_errmsg(m_db));
  }
  Stmt& bind(int i, int64_t v) { sqlite3_bind_int64(m_stmt, i, v); return *this; }
  Stmt& bind(int i, double v) { sqlite3_bind_double(m_stmt, i, v); return *this; }
  Stmt& bind(int i, const std::string& v) {
    sqlite3_bind_text(m_stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& bindBlob(int i, const std::string& v) {
    sqlite3_bind_blob(m_stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(m_stmt); }
  // Calls row() for each row. An error on the way (a damaged page, a locked file) is the result, never a
  // shorter list that looks complete.
  template <class F>
  Status each(F&& row) {
    int rc;
    while ((rc = step()) == SQLITE_ROW) TSR_TRY(row());
    if (rc != SQLITE_DONE) return error();
    return {};
  }
  // The one row of a lookup: true when found, false when there is none, an error when reading failed.
  Result<bool> one() {
    int rc = step();
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return error();
  }
  void reset() {
    sqlite3_reset(m_stmt);
    sqlite3_clear_bindings(m_stmt);
  }
  // A column's bytes, valid until the next step or reset.
  const void* blob(int col) const { return sqlite3_column_blob(m_stmt, col); }
  int bytes(int col) const { return sqlite3_column_bytes(m_stmt, col); }
  bool null(int col) const { return sqlite3_column_type(m_stmt, col) == SQLITE_NULL; }
  int64_t i64(int col) const { return sqlite3_column_int64(m_stmt, col); }
  double f64(int col) const { return sqlite3_column_double(m_stmt, col); }
  std::string text(int col) const {
    const void* p = sqlite3_column_blob(m_stmt, col);
    int n = sqlite3_column_bytes(m_stmt, col);
    return p ? std::string(static_cast<const char*>(p), static_cast<size_t>(n)) : std::string();
  }

 private:
  sqlite3* m_db;
  sqlite3_stmt* m_stmt = nullptr;
  int m_rc;
};

}  // namespace tsr::store
