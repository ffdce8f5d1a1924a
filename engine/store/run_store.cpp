#include "engine/store/run_store.h"

#include "engine/core/env_options.h"
#include "engine/store/lock_wait.h"
#include "engine/store/stmt.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>
#include <functional>
#include <utility>

#include <unistd.h>

#include <fmt/format.h>
#include <sqlite3.h>

namespace tsr::store {

namespace {

double nowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Schema migrations: entry i brings a database from user_version i to i + 1. Never edit a shipped entry;
// append a new one.
const char* const kMigrations[] = {
    R"sql(
    CREATE TABLE runs(
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      name TEXT NOT NULL,
      project TEXT NOT NULL,
      config TEXT NOT NULL DEFAULT '',
      status TEXT NOT NULL,
      start_time REAL NOT NULL,
      end_time REAL NOT NULL DEFAULT 0,
      message TEXT NOT NULL DEFAULT '');
    CREATE TABLE params(
      run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
      key TEXT NOT NULL,
      value TEXT NOT NULL,
      PRIMARY KEY(run, key));
    CREATE TABLE metrics(
      run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
      key TEXT NOT NULL,
      step INTEGER NOT NULL,
      time REAL NOT NULL,
      value REAL NOT NULL,
      PRIMARY KEY(run, key, step)) WITHOUT ROWID;
    CREATE TABLE artifacts(
      run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
      name TEXT NOT NULL,
      kind TEXT NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY(run, name));
    )sql",
    // 2: profiles and the kernel launches they recorded (the timeline).
    R"sql(
    CREATE TABLE profiles(
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
      name TEXT NOT NULL,
      created REAL NOT NULL,
      first_step INTEGER NOT NULL DEFAULT 0,
      last_step INTEGER NOT NULL DEFAULT 0);
    CREATE TABLE kernel_events(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      device TEXT NOT NULL,
      stream INTEGER NOT NULL,
      name TEXT NOT NULL,
      fusion INTEGER NOT NULL,
      start_ns INTEGER NOT NULL,
      duration_ns INTEGER NOT NULL,
      flops REAL NOT NULL,
      bytes REAL NOT NULL);
    CREATE INDEX kernel_events_by_time ON kernel_events(profile, start_ns);
    )sql",
    // 3: a profile's kernel table (fusion id -> the graph nodes it runs) and its step marks.
    R"sql(
    CREATE TABLE profile_kernels(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      fusion INTEGER NOT NULL,
      executable TEXT NOT NULL,
      name TEXT NOT NULL,
      kind TEXT NOT NULL,
      nodes TEXT NOT NULL,
      ops TEXT NOT NULL,
      module_path TEXT NOT NULL DEFAULT '',
      PRIMARY KEY(profile, fusion)) WITHOUT ROWID;
    CREATE TABLE profile_marks(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      name TEXT NOT NULL,
      start_ns INTEGER NOT NULL,
      duration_ns INTEGER NOT NULL);
    CREATE INDEX profile_marks_by_time ON profile_marks(profile, start_ns);
    )sql",
    // 4: what the user says about a run: notes, tags, archived.
    R"sql(
    ALTER TABLE runs ADD COLUMN notes TEXT NOT NULL DEFAULT '';
    ALTER TABLE runs ADD COLUMN archived INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE run_tags(
      run INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
      tag TEXT NOT NULL,
      PRIMARY KEY(run, tag)) WITHOUT ROWID;
    )sql",
    // 5: measured memory: live buffer bytes over a profile.
    R"sql(
    CREATE TABLE profile_memory(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      t_ns INTEGER NOT NULL,
      bytes INTEGER NOT NULL);
    CREATE INDEX profile_memory_by_time ON profile_memory(profile, t_ns);
    )sql",
    // 6: profiles of any size. Each launch's span class (hex digits of its duration: class c lasts under 16^c ns)
    // with an index on it, so that the launches overlapping a window are a few exact index ranges; and the
    // levels of detail the timeline draws when a window holds too many launches (engine/store/profile_levels.cpp).
    R"sql(
    ALTER TABLE kernel_events ADD COLUMN span_class INTEGER
      GENERATED ALWAYS AS (length(printf('%x', duration_ns))) VIRTUAL;
    CREATE INDEX kernel_events_by_span ON kernel_events(profile, span_class, start_ns);
    CREATE TABLE profile_levels(
      profile INTEGER PRIMARY KEY REFERENCES profiles(id) ON DELETE CASCADE,
      events INTEGER NOT NULL,
      begin_ns INTEGER NOT NULL,
      end_ns INTEGER NOT NULL,
      base_shift INTEGER NOT NULL,
      levels INTEGER NOT NULL);
    CREATE TABLE profile_rows(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      row INTEGER NOT NULL,
      device TEXT NOT NULL,
      stream INTEGER NOT NULL,
      events INTEGER NOT NULL,
      begin_ns INTEGER NOT NULL,
      end_ns INTEGER NOT NULL,
      PRIMARY KEY(profile, row)) WITHOUT ROWID;
    CREATE TABLE profile_buckets(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      row INTEGER NOT NULL,
      level INTEGER NOT NULL,
      chunk INTEGER NOT NULL,
      data BLOB NOT NULL,
      PRIMARY KEY(profile, row, level, chunk)) WITHOUT ROWID;
    )sql",
    // 7: profiles of several ranks. Each device's process (rank) and how its clock was put on rank 0's; each
    // collective launch with its number on its device and its group, which identify one collective across ranks.
    R"sql(
    CREATE TABLE profile_devices(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      device TEXT NOT NULL,
      rank INTEGER NOT NULL,
      offset_ns INTEGER NOT NULL,
      error_ns INTEGER NOT NULL,
      PRIMARY KEY(profile, device)) WITHOUT ROWID;
    CREATE TABLE profile_collectives(
      profile INTEGER NOT NULL REFERENCES profiles(id) ON DELETE CASCADE,
      device TEXT NOT NULL,
      seq INTEGER NOT NULL,
      grp TEXT NOT NULL,
      name TEXT NOT NULL,
      fusion INTEGER NOT NULL,
      start_ns INTEGER NOT NULL,
      duration_ns INTEGER NOT NULL,
      PRIMARY KEY(profile, seq, grp, device)) WITHOUT ROWID;
    )sql",
    // 8: every rank's step marks and memory samples, not rank 0's alone.
    R"sql(
    ALTER TABLE profile_marks ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE profile_memory ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
    )sql",
};
constexpr int kNumMigrations = sizeof(kMigrations) / sizeof(kMigrations[0]);
static_assert(kNumMigrations == RunStore::kSchemaVersion);

}  // namespace

namespace {

RunStatus parseStatus(const std::string& s) {
  if (s == "finished") return RunStatus::Finished;
  if (s == "failed") return RunStatus::Failed;
  if (s == "stopped" || s == "killed") return RunStatus::Stopped;  // "killed": stores before schema 4
  if (s == "crashed") return RunStatus::Crashed;
  if (s == "diverged") return RunStatus::Diverged;
  return RunStatus::Running;
}

// The folder SQLite keeps a store's -wal and -shm in.
std::string folderOf(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

bool mayWrite(const std::string& path) { return ::access(path.c_str(), W_OK) == 0; }

// How a reader opens the store, so that it leaves the folder as it found it. SQLite's -wal and -shm are removed
// by the last connection to close, but only by one that may write the database: a read-only connection leaves
// the two it created behind, and made by another user they stop the store's owner from writing (a later train
// fails "attempt to write a readonly database"); in a folder it may not write, a read-only connection cannot
// make them at all and SQLite refuses to read. So:
//   - Writer: the store, its folder and any -wal or -shm may be written: opened read-write with query_only set
//     (SQLite refuses every write, and its last close removes the files as a writer's does). A -wal a killed
//     writer left is read and folded into the file, as the next writer would.
//   - Shared: a -shm is there (a writer has the store open): read-only, through the writer's files; nothing is
//     made. A file in rollback-journal mode (another program's) is read so too.
//   - Immutable: a WAL store with no -shm that this user may not write (another user's, or in a read-only
//     folder): read as the file is (SQLite's immutable=1, as `sqlite3 -readonly` users do), making nothing.
//   - A -wal with writes in it but no -shm, where the reader may not write: those writes cannot be read without
//     making a -shm, and reading the file without them would show an older store as if it were all: an error
//     that says so and what to do.
enum class ReadAccess { Writer, Shared, Immutable };

bool isWalFile(const std::string& path) {
  char header[20] = {};
  std::ifstream in(path, std::ios::binary);
  if (!in.read(header, sizeof header)) return false;
  return std::string(header, 16) == std::string("SQLite format 3\0", 16) && header[18] == 2 && header[19] == 2;
}

Result<ReadAccess> readAccess(const std::string& path) {
  if (!isWalFile(path)) return ReadAccess::Shared;
  std::error_code ec;
  const std::string wal = path + "-wal", shm = path + "-shm";
  const bool hasWal = std::filesystem::exists(wal, ec), hasShm = std::filesystem::exists(shm, ec);
  if (mayWrite(path) && mayWrite(folderOf(path)) && (!hasWal || mayWrite(wal)) && (!hasShm || mayWrite(shm)))
    return ReadAccess::Writer;
  if (hasShm) return ReadAccess::Shared;
  const auto walBytes = hasWal ? std::filesystem::file_size(wal, ec) : 0;
  if (hasWal && !ec && walBytes > 0)
    return makeError("run store {}: {} holds {} bytes of writes not yet folded into the store (its writer was "
                     "stopped before it closed the store), and reading them needs a {} that this user may not "
                     "make ({}); open the store once as a user who may write it (any tessera runs command then "
                     "folds them in), or copy {} and {} to a folder of yours and read the copy",
                     path, wal, walBytes, shm,
                     mayWrite(folderOf(path)) ? "it would be left behind, in another user's way"
                                              : "its folder " + folderOf(path) + " is read-only",
                     path, wal);
  return ReadAccess::Immutable;
}

// A "file:" URI naming `path`, for SQLite's URI parameters: every byte but the unreserved ones and '/' escaped
// (a path may hold spaces, '?', '#', '%' or any UTF-8).
std::string fileUri(const std::string& path, const char* parameters) {
  std::string out = "file:";
  for (unsigned char c : std::filesystem::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '-' || c == '_' || c == '.' || c == '~') out += static_cast<char>(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out + "?" + parameters;
}

// The message of a read that failed as a store opened: SQLite's "file is not a database" means the file is not
// one; anything else (a locked file, an I/O error, a permission) is said as SQLite says it.
Error readFailure(sqlite3* db, const std::string& path) {
  if (lockedOut(db)) return lockedError(path);
  if (sqlite3_errcode(db) == SQLITE_NOTADB)
    return makeError("{}: not a Tessera run store ({})", path, sqlite3_errmsg(db));
  return makeError("cannot read run store {}: {}", path, sqlite3_errmsg(db));
}

// Whether the database at `db` is a run store or a new, empty file; another program's database (tables, but not
// ours) is an error naming the file. Read before anything is written: such a file is left exactly as it was (no
// WAL switch, no schema). A store's schema version is written in the transaction that creates its tables, so a
// store another process is creating reads as empty or as a store, never as a foreign database.
Status checkIsRunStoreOrEmpty(sqlite3* db, const std::string& path) {
  Stmt version(db, "PRAGMA user_version");
  if (!version.ok()) return readFailure(db, path);
  auto hasVersion = version.one();
  if (!hasVersion.ok()) return readFailure(db, path);
  const int64_t v = *hasVersion ? version.i64(0) : 0;
  Stmt tables(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                  "ORDER BY name");
  if (!tables.ok()) return tables.error();
  std::vector<std::string> names;
  TSR_TRY(tables.each([&]() -> Status {
    names.push_back(tables.text(0));
    return {};
  }));
  const bool hasRuns = std::find(names.begin(), names.end(), "runs") != names.end();
  if (names.empty() && v == 0) return {};  // a new store
  if (v > RunStore::kSchemaVersion && (hasRuns || names.empty()))
    return makeError("run store {}: schema version {} is newer than this program's {}; upgrade Tessera", path, v,
                     RunStore::kSchemaVersion);
  if (v > 0 && hasRuns) return {};
  std::string listed;
  for (size_t i = 0; i < names.size() && i < 5; ++i) listed += (i ? ", " : "") + names[i];
  if (names.size() > 5) listed += fmt::format(" and {} more", names.size() - 5);
  return makeError("{}: not a Tessera run store ({}); it is left as it was", path,
                   names.empty() ? fmt::format("schema version {} and no tables", v)
                                 : fmt::format("it holds another program's tables: {}", listed));
}

std::function<void(const std::string&)>& lockWaitNotice() {
  static std::function<void(const std::string&)> notice;
  return notice;
}

std::atomic<int64_t> g_lockWaitLimitMs{-1};  // -1: none set

using Clock = std::chrono::steady_clock;

// When the calls under way on this thread must stop waiting (a WaitDeadline sets it), and when the current wait
// began. SQLite calls a connection's busy handler on the thread that runs the statement, one wait at a time.
thread_local Clock::time_point t_deadline = Clock::time_point::max();
thread_local Clock::time_point t_waitStart;

// One deadline for several statements (opening a store, a statement tried again): nested ones keep the earliest.
class WaitDeadline {
 public:
  WaitDeadline() : m_outer(t_deadline) { t_deadline = std::min(t_deadline, Clock::now() + lockWaitLimit()); }
  ~WaitDeadline() { t_deadline = m_outer; }
  WaitDeadline(const WaitDeadline&) = delete;
  WaitDeadline& operator=(const WaitDeadline&) = delete;
  bool passed() const { return Clock::now() >= t_deadline; }

 private:
  Clock::time_point m_outer;
};

// SQLite's busy handler for a store (arg: its connection): waits up to the limit, or the deadline set around
// the call, and gives the notice once per process when one wait passes a second. Clock time, not count * step:
// sleeps overshoot on a loaded machine.
int waitWhileLocked(void* arg, int count) {
  constexpr auto kStep = std::chrono::milliseconds(10);
  constexpr auto kNotice = std::chrono::seconds(1);
  static std::atomic<bool> noticed{false};
  const Clock::time_point now = Clock::now();
  if (count == 0) t_waitStart = now;
  const Clock::time_point giveUp = std::min(t_waitStart + lockWaitLimit(), t_deadline);
  if (now >= giveUp) return 0;
  if (now - t_waitStart >= kNotice && lockWaitNotice() && !noticed.exchange(true)) {
    const char* file = sqlite3_db_filename(static_cast<sqlite3*>(arg), "main");
    lockWaitNotice()(file ? file : "the run store");
  }
  std::this_thread::sleep_for(std::min<Clock::duration>(kStep, giveUp - now));
  return 1;
}

RunInfo readRun(const Stmt& st) {
  RunInfo r;
  r.id = st.i64(0);
  r.name = st.text(1);
  r.project = st.text(2);
  r.config = st.text(3);
  r.status = parseStatus(st.text(4));
  r.startTime = st.f64(5);
  r.endTime = st.f64(6);
  r.message = st.text(7);
  r.notes = st.text(8);
  r.archived = st.i64(9) != 0;
  return r;
}

}  // namespace

void setLockWaitNotice(std::function<void(const std::string& path)> notice) { lockWaitNotice() = std::move(notice); }
void setLockWaitLimit(std::optional<std::chrono::milliseconds> limit) {
  g_lockWaitLimitMs = limit ? std::max<int64_t>(limit->count(), 0) : -1;
}
std::chrono::milliseconds lockWaitLimit() {
  if (const int64_t set = g_lockWaitLimitMs.load(); set >= 0) return std::chrono::milliseconds(set);
  if (const std::optional<double> seconds = envOptions().storeLockWait)
    return std::chrono::milliseconds(std::llround(*seconds * 1000));
  return kDefaultLockWait;
}

const char* runStatusName(RunStatus s) {
  switch (s) {
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Failed: return "failed";
    case RunStatus::Stopped: return "stopped";
    case RunStatus::Crashed: return "crashed";
    case RunStatus::Diverged: return "diverged";
  }
  return "?";
}

RunStore::~RunStore() {
  if (m_db) sqlite3_close(m_db);
}
RunStore::RunStore(RunStore&& o) noexcept : m_db(std::exchange(o.m_db, nullptr)), m_path(std::move(o.m_path)) {}
RunStore& RunStore::operator=(RunStore&& o) noexcept {
  if (this != &o) {
    if (m_db) sqlite3_close(m_db);
    m_db = std::exchange(o.m_db, nullptr);
    m_path = std::move(o.m_path);
  }
  return *this;
}

Status RunStore::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(m_db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    Error e = lockedOut(m_db) ? lockedError(m_path)
                              : Error{fmt::format("run store {}: {}", m_path, err ? err : sqlite3_errmsg(m_db))};
    sqlite3_free(err);
    return e;
  }
  return {};
}

// exec, tried again while SQLite answers "database is locked" without waiting: openers of a new file that meet
// while one switches it to WAL, or two that both hold a read lock and want the write lock, are refused at once by
// SQLite's deadlock rule rather than left to the busy handler. One deadline for all the tries: each try's busy
// handler would otherwise wait the whole limit again, and the tries would multiply it into minutes.
Status RunStore::execWhileBusy(const std::string& sql) const {
  const WaitDeadline deadline;
  while (true) {
    Status st = exec(sql);
    if (st.ok() || !lockedOut(m_db) || deadline.passed()) return st;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Result<RunStore> RunStore::open(const std::string& path) {
  // What SQLite would say later as "attempt to write a readonly database" or "unable to open database file",
  // said in the store's terms first.
  std::error_code ec;
  const std::string folder = folderOf(path);
  if (std::filesystem::is_directory(path, ec)) return makeError("cannot open run store {}: it is a folder", path);
  if (!std::filesystem::is_directory(folder, ec))
    return makeError("cannot open run store {}: no such folder {}", path, folder);
  if (std::filesystem::exists(path, ec) && !mayWrite(path))
    return makeError("run store {}: this user may not write it (it is read-only to them); commands that only read "
                     "it (runs list, show, export) still can",
                     path);
  if (!mayWrite(folder) && !(std::filesystem::exists(path + "-wal", ec) && std::filesystem::exists(path + "-shm", ec)))
    return makeError("run store {}: this user may not write its folder {}, where SQLite keeps {}-wal and {}-shm "
                     "beside it; commands that only read it (runs list, show, export) still can, and a store in "
                     "another folder (--db FILE) takes new runs",
                     path, folder, path, path);
  // SQLite's -wal and -shm beside the store that this process may not write (another user's reader left them):
  // SQLite would open them read-only and fail at the first write with "attempt to write a readonly database".
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string side = path + suffix;
    if (::access(side.c_str(), F_OK) == 0 && ::access(side.c_str(), W_OK) != 0)
      return makeError("run store {}: {} is not writable by this user (another user's process made it by reading "
                       "the store); remove {}-wal and {}-shm once no process has the store open",
                       path, side, path, path);
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return makeError("cannot open run store {}: {}", path, msg);
  }
  RunStore store(db, path);
  sqlite3_busy_handler(db, waitWhileLocked, db);  // a writer and the IDE share the file
  const WaitDeadline deadline;  // the whole opening waits for a lock at most the limit
  TSR_TRY(checkIsRunStoreOrEmpty(db, path));
  // A 64 MB page cache (SQLite's default is 2 MB): a profile's indexes grow by millions of entries per write.
  TSR_TRY(store.execWhileBusy("PRAGMA journal_mode=WAL"));
  TSR_TRY(store.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size = -65536;"));
  TSR_TRY(store.migrate());
  return store;
}

Result<RunStore> RunStore::openReadOnly(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    const std::string folder = folderOf(path);
    if (!std::filesystem::is_directory(folder, ec))
      return makeError("cannot open run store {}: no such folder {}", path, folder);
    return makeError("cannot open run store {}: no such file", path);
  }
  if (std::filesystem::is_directory(path, ec)) return makeError("cannot open run store {}: it is a folder", path);
  // An empty file is what a writer takes for a new store; a reader finds no runs in it and says so.
  if (std::filesystem::file_size(path, ec) == 0 && !ec)
    return makeError("{}: not a Tessera run store yet (an empty file: no run has been written to it; tessera train "
                     "makes it one)",
                     path);
  TSR_ASSIGN(const ReadAccess access, readAccess(path));
  sqlite3* db = nullptr;
  const std::string name = access == ReadAccess::Immutable ? fileUri(path, "immutable=1") : path;
  const int flags = (access == ReadAccess::Writer ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READONLY) |
                    SQLITE_OPEN_FULLMUTEX | (access == ReadAccess::Immutable ? SQLITE_OPEN_URI : 0);
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return makeError("cannot open run store {}: {}", path, msg);
  }
  RunStore store(db, path);
  if (access == ReadAccess::Writer) TSR_TRY(store.exec("PRAGMA query_only = ON"));
  sqlite3_busy_handler(db, waitWhileLocked, db);  // a training process may be writing
  auto version = store.readSchemaVersion();
  if (!version.ok()) return readFailure(db, path);
  if (*version > kSchemaVersion)
    return makeError("run store {}: schema version {} is newer than this program's {}; upgrade Tessera", path,
                     *version, kSchemaVersion);
  // An empty file, or another program's database: no schema of ours (and none is written into it here).
  Stmt runs(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs'");
  if (!runs.ok()) return readFailure(db, path);
  auto found = runs.one();
  if (!found.ok()) return readFailure(db, path);
  if (*version < 1 || !*found)
    return makeError("{}: not a Tessera run store (it holds no runs table{})", path,
                     *version < 1 ? " and no schema version" : "");
  // The timeline's window queries jump about a large file: a page cache of 64 MB (SQLite's default is 2 MB)
  // keeps the pages of recent windows, so panning back and forth reads them once.
  TSR_TRY(store.exec("PRAGMA cache_size = -65536"));
  return store;
}

Result<int> RunStore::readSchemaVersion() const {
  Stmt st(m_db, "PRAGMA user_version");
  if (!st.ok()) return st.error();
  TSR_ASSIGN(bool found, st.one());
  if (!found) return makeError("run store {}: no schema version", m_path);
  return static_cast<int>(st.i64(0));
}

int RunStore::schemaVersion() const {
  auto v = readSchemaVersion();
  return v.ok() ? *v : -1;
}

Status RunStore::migrate() {
  auto read = readSchemaVersion();
  if (!read.ok()) return makeError("run store {}: not a SQLite database ({})", m_path, read.error().message);
  if (*read > kSchemaVersion)
    return makeError("run store {}: schema version {} is newer than this program's {}; upgrade Tessera", m_path,
                     *read, kSchemaVersion);
  if (*read < 0) return makeError("run store {}: not a Tessera run store (schema version {})", m_path, *read);
  // A current store needs no write lock: opening it to read or edit must not wait for a training process's write.
  if (*read == kSchemaVersion) return {};
  // Each step reads the version again under the write lock: processes that open a new store at once (a sweep's
  // runs) migrate it once between them, never one migration twice.
  while (true) {
    TSR_TRY(execWhileBusy("BEGIN IMMEDIATE"));
    auto version = readSchemaVersion();
    if (!version.ok() || *version >= kSchemaVersion) {
      (void)exec(version.ok() ? "COMMIT" : "ROLLBACK");
      return version.ok() ? Status() : version.takeError();
    }
    const int v = *version;
    Status st = exec(kMigrations[v]);
    if (st.ok()) st = exec(fmt::format("PRAGMA user_version = {}", v + 1));
    if (!st.ok()) {
      (void)exec("ROLLBACK");
      return Error{fmt::format("migrating to schema {}: {}", v + 1, st.error().message)};
    }
    TSR_TRY(exec("COMMIT"));
  }
}

Result<int64_t> RunStore::createRun(const std::string& name, const std::string& project, const std::string& config) {
  Stmt st(m_db, "INSERT INTO runs(name, project, config, status, start_time) VALUES(?, ?, ?, 'running', ?)");
  if (!st.ok()) return st.error();
  st.bind(1, name).bind(2, project).bind(3, config).bind(4, nowSeconds());
  if (st.step() != SQLITE_DONE) return st.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(m_db));
}

Status RunStore::finishRun(int64_t run, RunStatus status, const std::string& message) {
  Stmt st(m_db, "UPDATE runs SET status = ?, end_time = ?, message = ? WHERE id = ?");
  if (!st.ok()) return st.error();
  st.bind(1, std::string(runStatusName(status))).bind(2, nowSeconds()).bind(3, message).bind(4, run);
  if (st.step() != SQLITE_DONE) return st.error();
  if (sqlite3_changes(m_db) == 0) return makeError("run store: no run {}", run);
  return {};
}

Status RunStore::reopenRun(int64_t run) {
  return updateRun(run, "UPDATE runs SET status = 'running', end_time = 0, message = '' WHERE id = ?",
                   [&](Stmt& st) { st.bind(1, run); });
}

Status RunStore::transaction(const std::function<Status()>& body) {
  // The write lock first, waited for here (SQLite calls the busy handler only for a connection that reads
  // nothing yet): a deferred BEGIN takes it at the first write, and a body that read before it then fails at
  // once, SQLite's deadlock rule refusing the wait to a reader while another connection writes.
  TSR_TRY(execWhileBusy("BEGIN IMMEDIATE"));
  Status st = body();
  if (st.ok()) st = exec("COMMIT");
  // A COMMIT that fails (the file locked, a full disk) leaves the transaction open, holding the lock: rolled
  // back, so that the connection stays usable and the store as it was.
  if (!st.ok()) (void)exec("ROLLBACK");
  return st;
}

Status RunStore::setParams(int64_t run, const std::map<std::string, std::string>& params) {
  return transaction([&]() -> Status {
    Stmt st(m_db, "INSERT OR REPLACE INTO params(run, key, value) VALUES(?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& [k, v] : params) {
      st.bind(1, run).bind(2, k).bind(3, v);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::map<std::string, std::string>> RunStore::params(int64_t run) const {
  Stmt st(m_db, "SELECT key, value FROM params WHERE run = ? ORDER BY key");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  std::map<std::string, std::string> out;
  TSR_TRY(st.each([&]() -> Status {
    out[st.text(0)] = st.text(1);
    return {};
  }));
  return out;
}

Status RunStore::logMetrics(int64_t run, int64_t step, const std::vector<std::pair<std::string, double>>& values,
                            double time) {
  return logMetricsBatch(run, {StepMetrics{step, time, values}});
}

Status RunStore::logMetricsBatch(int64_t run, const std::vector<StepMetrics>& steps) {
  if (steps.empty()) return {};
  const double now = nowSeconds();
  return transaction([&]() -> Status {
    Stmt st(m_db, "INSERT OR REPLACE INTO metrics(run, key, step, time, value) VALUES(?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const StepMetrics& m : steps) {
      for (const auto& [k, v] : m.values) {
        st.bind(1, run).bind(2, k).bind(3, m.step).bind(4, m.time == 0 ? now : m.time).bind(5, v);
        if (st.step() != SQLITE_DONE) return st.error();
        st.reset();
      }
    }
    return {};
  });
}

Result<std::vector<std::string>> RunStore::metricKeys(int64_t run) const {
  // A skip scan over the (run, key, step) key: one index seek per key, not one row per point (a dense run has
  // millions of points and a handful of keys).
  Stmt st(m_db,
          "WITH RECURSIVE k(key) AS ("
          "  SELECT (SELECT MIN(key) FROM metrics WHERE run = ?1)"
          "  UNION ALL"
          "  SELECT (SELECT MIN(key) FROM metrics WHERE run = ?1 AND key > k.key) FROM k WHERE k.key IS NOT NULL)"
          " SELECT key FROM k WHERE key IS NOT NULL");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  std::vector<std::string> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(st.text(0));
    return {};
  }));
  return out;
}

Result<std::map<std::string, RunStore::MetricSummary>> RunStore::metricSummaries(int64_t run) const {
  std::map<std::string, MetricSummary> out;
  Stmt agg(m_db, "SELECT key, COUNT(*), MIN(value), MAX(value) FROM metrics WHERE run = ? GROUP BY key");
  if (!agg.ok()) return agg.error();
  agg.bind(1, run);
  TSR_TRY(agg.each([&]() -> Status {
    MetricSummary& m = out[agg.text(0)];
    m.points = agg.i64(1);
    m.min = agg.f64(2);
    m.max = agg.f64(3);
    return {};
  }));
  // With one MAX() in the query, SQLite takes the bare columns from the row holding it: the latest point.
  Stmt last(m_db, "SELECT key, MAX(step), time, value FROM metrics WHERE run = ? GROUP BY key");
  if (!last.ok()) return last.error();
  last.bind(1, run);
  TSR_TRY(last.each([&]() -> Status {
    out[last.text(0)].latest = MetricPoint{last.i64(1), last.f64(2), last.f64(3)};
    return {};
  }));
  return out;
}

Result<std::vector<MetricPoint>> RunStore::metrics(int64_t run, const std::string& key, int64_t afterStep) const {
  Stmt st(m_db, "SELECT step, time, value FROM metrics WHERE run = ? AND key = ? AND step > ? ORDER BY step");
  if (!st.ok()) return st.error();
  st.bind(1, run).bind(2, key).bind(3, afterStep);
  std::vector<MetricPoint> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(MetricPoint{st.i64(0), st.f64(1), st.f64(2)});
    return {};
  }));
  return out;
}

Result<std::map<std::string, MetricPoint>> RunStore::latestMetrics(int64_t run) const {
  Stmt st(m_db,
          "SELECT m.key, m.step, m.time, m.value FROM metrics m JOIN "
          "(SELECT key, MAX(step) AS step FROM metrics WHERE run = ?1 GROUP BY key) last "
          "ON m.key = last.key AND m.step = last.step WHERE m.run = ?1");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  std::map<std::string, MetricPoint> out;
  TSR_TRY(st.each([&]() -> Status {
    out[st.text(0)] = MetricPoint{st.i64(1), st.f64(2), st.f64(3)};
    return {};
  }));
  return out;
}

Status RunStore::putArtifact(int64_t run, const Artifact& a) {
  Stmt st(m_db, "INSERT OR REPLACE INTO artifacts(run, name, kind, data) VALUES(?, ?, ?, ?)");
  if (!st.ok()) return st.error();
  st.bind(1, run).bind(2, a.name).bind(3, a.kind).bindBlob(4, a.data);
  if (st.step() != SQLITE_DONE) return st.error();
  return {};
}

Result<std::vector<std::string>> RunStore::artifactNames(int64_t run) const {
  Stmt st(m_db, "SELECT name FROM artifacts WHERE run = ? ORDER BY name");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  std::vector<std::string> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(st.text(0));
    return {};
  }));
  return out;
}

Result<Artifact> RunStore::artifact(int64_t run, const std::string& name) const {
  Stmt st(m_db, "SELECT name, kind, data FROM artifacts WHERE run = ? AND name = ?");
  if (!st.ok()) return st.error();
  st.bind(1, run).bind(2, name);
  TSR_ASSIGN(bool found, st.one());
  if (!found) return makeError("run store {}: run {} has no artifact '{}'", m_path, run, name);
  return Artifact{st.text(0), st.text(1), st.text(2)};
}

Result<int64_t> RunStore::createProfile(int64_t run, const std::string& name, int64_t firstStep, int64_t lastStep) {
  Stmt st(m_db, "INSERT INTO profiles(run, name, created, first_step, last_step) VALUES(?, ?, ?, ?, ?)");
  if (!st.ok()) return st.error();
  st.bind(1, run).bind(2, name).bind(3, nowSeconds()).bind(4, firstStep).bind(5, lastStep);
  if (st.step() != SQLITE_DONE) return st.error();
  return static_cast<int64_t>(sqlite3_last_insert_rowid(m_db));
}

std::string RunStore::runColumns() const {
  return schemaVersion() >= 4
             ? "id, name, project, config, status, start_time, end_time, message, notes, archived"
             : "id, name, project, config, status, start_time, end_time, message, '', 0";
}

Result<std::vector<std::string>> RunStore::tagsOf(int64_t run) const {
  std::vector<std::string> out;
  if (schemaVersion() < 4) return out;
  Stmt st(m_db, "SELECT tag FROM run_tags WHERE run = ? ORDER BY tag");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(st.text(0));
    return {};
  }));
  return out;
}

Result<std::vector<RunInfo>> RunStore::runs() const {
  const std::string sql = "SELECT " + runColumns() + " FROM runs ORDER BY id";
  Stmt st(m_db, sql.c_str());
  if (!st.ok()) return st.error();
  std::vector<RunInfo> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(readRun(st));
    return {};
  }));
  for (RunInfo& r : out) {
    TSR_ASSIGN(r.tags, tagsOf(r.id));
  }
  return out;
}

Result<RunInfo> RunStore::run(int64_t id) const {
  const std::string sql = "SELECT " + runColumns() + " FROM runs WHERE id = ?";
  Stmt st(m_db, sql.c_str());
  if (!st.ok()) return st.error();
  st.bind(1, id);
  TSR_ASSIGN(bool found, st.one());
  if (!found) return makeError("run store {}: no run {}", m_path, id);
  RunInfo r = readRun(st);
  TSR_ASSIGN(r.tags, tagsOf(id));
  return r;
}

Status RunStore::updateRun(int64_t id, const char* sql, const std::function<void(Stmt&)>& bind) {
  Stmt st(m_db, sql);
  if (!st.ok()) return st.error();
  bind(st);
  if (st.step() != SQLITE_DONE) return st.error();
  if (sqlite3_changes(m_db) == 0) return makeError("run store {}: no run {}", m_path, id);
  return {};
}

Status RunStore::deleteRun(int64_t id) {
  return updateRun(id, "DELETE FROM runs WHERE id = ?", [&](Stmt& st) { st.bind(1, id); });
}

Status RunStore::renameRun(int64_t id, const std::string& name) {
  if (name.empty()) return makeError("a run's name cannot be empty");
  return updateRun(id, "UPDATE runs SET name = ? WHERE id = ?", [&](Stmt& st) { st.bind(1, name).bind(2, id); });
}

Status RunStore::setNotes(int64_t id, const std::string& notes) {
  return updateRun(id, "UPDATE runs SET notes = ? WHERE id = ?", [&](Stmt& st) { st.bind(1, notes).bind(2, id); });
}

Status RunStore::setArchived(int64_t id, bool archived) {
  return updateRun(id, "UPDATE runs SET archived = ? WHERE id = ?",
                   [&](Stmt& st) { st.bind(1, int64_t{archived}).bind(2, id); });
}

// One statement over the run's tags, in one transaction, which first finds the run: a run deleted meanwhile is
// "no run", never a foreign key's failure.
Status RunStore::eachTag(int64_t id, const char* sql, const std::vector<std::string>& tags) {
  return transaction([&]() -> Status {
    TSR_TRY(run(id));
    Stmt st(m_db, sql);
    if (!st.ok()) return st.error();
    for (const std::string& t : tags) {
      st.bind(1, id).bind(2, t);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Status RunStore::addTags(int64_t id, const std::vector<std::string>& tags) {
  for (const std::string& t : tags)
    if (t.empty()) return makeError("a tag cannot be empty");
  return eachTag(id, "INSERT OR IGNORE INTO run_tags(run, tag) VALUES(?, ?)", tags);
}

Status RunStore::removeTags(int64_t id, const std::vector<std::string>& tags) {
  return eachTag(id, "DELETE FROM run_tags WHERE run = ? AND tag = ?", tags);
}

Status RunStore::setTags(int64_t id, const std::vector<std::string>& tags) {
  for (const std::string& t : tags)
    if (t.empty()) return makeError("a tag cannot be empty");
  return transaction([&]() -> Status {
    TSR_TRY(run(id));
    Stmt clear(m_db, "DELETE FROM run_tags WHERE run = ?");
    if (!clear.ok()) return clear.error();
    clear.bind(1, id);
    if (clear.step() != SQLITE_DONE) return clear.error();
    Stmt add(m_db, "INSERT OR IGNORE INTO run_tags(run, tag) VALUES(?, ?)");
    if (!add.ok()) return add.error();
    for (const std::string& t : tags) {
      add.bind(1, id).bind(2, t);
      if (add.step() != SQLITE_DONE) return add.error();
      add.reset();
    }
    return {};
  });
}

}  // namespace tsr::store
