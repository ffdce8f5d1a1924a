#pragma once
// Reads a project's runs.db for the Runs panel on a thread of its own, so that a store of many runs and metrics
// never stalls the UI. The poller lives on that thread with its own SQLite connections (a RunsReader, and a
// probe that asks SQLite whether anything was committed since the last read: PRAGMA data_version), and answers
// each read() with done(), which reaches the panel on the UI thread. Nothing written since the last read: the
// answer says so and carries no runs.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <QObject>
#include <QString>

#include "engine/inspect/runs_reader.h"

struct sqlite3;

namespace tsr::studio {

struct RunsRead {
  QString path;              // the store read
  quint64 generation = 0;    // the panel's database generation the read was asked for
  bool opened = false;       // the store exists and is a run store (else error says why)
  bool changed = true;       // false: nothing was committed since the last read, and runs is empty
  QString error;
  std::vector<inspect::RunRow> runs;
};
using RunsReadPtr = std::shared_ptr<RunsRead>;

class RunsPoller : public QObject {
  Q_OBJECT
 public:
  RunsPoller();
  ~RunsPoller() override;

  // Reads the store at `path` (another path or generation than the last: read whatever its version; another
  // path is opened afresh).
  // Call it on the poller's thread (QMetaObject::invokeMethod); done() follows.
  void read(const QString& path, quint64 generation);

 signals:
  void done(tsr::studio::RunsReadPtr result);

 private:
  void close();
  // SQLite's counter of commits by other connections, or nothing when the probe cannot ask.
  std::optional<int64_t> dataVersion();

  QString m_path;
  std::optional<inspect::RunsReader> m_reader;
  sqlite3* m_probe = nullptr;
  std::optional<int64_t> m_version;  // at the last read
  quint64 m_generation = 0;          // of the last read
};

}  // namespace tsr::studio

Q_DECLARE_METATYPE(tsr::studio::RunsReadPtr)
