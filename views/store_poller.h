#pragma once
// What the readers of runs.db off the UI thread share (views/runs_poller.h, views/metrics_poller.h): a QObject
// living on a thread of its own with its own SQLite connections — a RunsReader, and a probe that asks SQLite
// whether anything was committed since the last read (PRAGMA data_version), so an unchanged store costs one
// pragma — the thread it lives on (PollerThread), which the panel that asks starts and ends, and the asking
// side's bookkeeping (PollGate).
#include <cstdint>
#include <optional>

#include <QObject>
#include <QString>

#include "engine/inspect/runs_reader.h"

struct sqlite3;
class QThread;

namespace tsr::studio {

class StorePoller : public QObject {
 public:
  ~StorePoller() override;

 protected:
  // The store at `path` for a read asked with `generation` (the asker's count of the stores and selections it
  // was given): another path is opened afresh, and another generation than the last forgets the version, so that
  // read reads whatever the version says (the asker shows nothing of the store yet). Null, with the reason in
  // `error`, when the store does not exist or is not a run store.
  const inspect::RunsReader* open(const QString& path, quint64 generation, QString& error);
  // A poll's first step: the store to read, or null when the answer is known already, because the store did not
  // open (error says why, opened stays false) or nothing was committed since the last read (opened true, changed
  // false).
  const inspect::RunsReader* openChanged(const QString& path, quint64 generation, QString& error, bool& opened,
                                         bool& changed);
  // Nothing was committed since the last read (markRead). Asked before reading: a commit while the store is read
  // changes the version again, and the next poll reads.
  bool unchanged();
  // The read that followed unchanged() is done: its version is the one the next poll compares with.
  void markRead() { m_version = m_asked; }

 private:
  void close();
  // SQLite's counter of commits by other connections, or nothing when the probe cannot ask.
  std::optional<int64_t> dataVersion();

  QString m_path;
  std::optional<inspect::RunsReader> m_reader;
  sqlite3* m_probe = nullptr;
  std::optional<int64_t> m_version;  // at the last read
  std::optional<int64_t> m_asked;    // by the last unchanged()
  quint64 m_generation = 0;          // of the last read
};

// The asking panel's side of a poller: one read in flight at a time (a store that is slow to read is not asked
// again and again), one more after it when asked meanwhile (so the last answer is never older than the last ask),
// and answers asked for an older generation (another store or selection) dropped.
class PollGate {
 public:
  quint64 generation() const { return m_generation; }
  // Another store or selection: answers to the reads asked before are stale.
  void nextGeneration() { ++m_generation; }
  // A read is asked for. True: send it now, for generation(); false: one is under way, and another follows it.
  bool ask();
  // The answer to the read in flight, asked for `generation`. `current`: it is for the generation the panel shows
  // (else drop it). The result: read again now (it was asked meanwhile, or this answer is stale) rather than say
  // that the reads asked for are done.
  bool answered(quint64 generation, bool& current);
  // A read asked for has not been answered yet.
  bool busy() const { return m_inFlight || m_again; }

 private:
  quint64 m_generation = 0;
  bool m_inFlight = false;
  bool m_again = false;
};

// A poller on a thread of its own, named for debuggers. The thread starts here; the destructor lets a read under
// way end, stops the thread and deletes the poller, whose connections close with it.
class PollerThread {
 public:
  PollerThread(StorePoller* poller, const QString& name);
  ~PollerThread();
  PollerThread(const PollerThread&) = delete;
  PollerThread& operator=(const PollerThread&) = delete;

  QThread* thread() const { return m_thread; }

 private:
  QThread* m_thread;
  StorePoller* m_poller;
};

}  // namespace tsr::studio
