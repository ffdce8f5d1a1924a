#pragma once
// Reads a project's runs.db for the Runs panel on a thread of its own (a StorePoller), so that a store of many
// runs and metrics never stalls the UI: the runs for the table, answered by done() only when something was
// committed since the last read (else the answer says so and carries no runs), and two runs' profiles for
// Compare, answered by profilesDiffed(). The panel's edits of a run are made there too, answered by edited(): a
// store that a training process writes may keep an edit waiting for its lock for seconds. Every answer reaches
// the panel on the UI thread.
#include <memory>
#include <vector>

#include <QString>
#include <QStringList>

#include "engine/inspect/runs_reader.h"
#include "views/store_poller.h"

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

// Two runs' profiles by kernel and by graph node (or why they cannot be compared), for the comparison `request`.
struct ProfileDiffRead {
  quint64 request = 0;
  qint64 runA = 0, runB = 0;
  Result<train::ProfileDiff> diff;
};
using ProfileDiffReadPtr = std::shared_ptr<const ProfileDiffRead>;

// One edit of one run (engine/inspect/run_edits.h), or the read that Delete's confirmation quotes.
struct RunEdit {
  enum class Kind { Rename, Tags, Notes, Archive, DescribeDeletion, Delete };
  Kind kind = Kind::Rename;
  QString path;           // the store
  quint64 request = 0;    // the panel's count of edits: the answer to another is dropped
  qint64 run = 0;
  QString text;           // Rename: the name; Notes: the notes
  QStringList tags;       // Tags: the run's tags after the edit
  bool archived = false;  // Archive: archived (true) or shown again
};

struct RunEditDone {
  RunEdit edit;
  QString error;        // empty: the edit was made
  QString description;  // DescribeDeletion: what Delete would remove
};
using RunEditDonePtr = std::shared_ptr<const RunEditDone>;

class RunsPoller : public StorePoller {
  Q_OBJECT
 public:
  RunsPoller();

  // Reads the store at `path` (another path or generation than the last: read whatever its version; another
  // path is opened afresh).
  // Call these on the poller's thread (QMetaObject::invokeMethod); done() or profilesDiffed() follows.
  void read(const QString& path, quint64 generation);
  void diffProfiles(const QString& path, quint64 request, qint64 runA, qint64 runB);
  // Each edit opens the store for writing on a connection of its own, as the CLI does; the next read sees it.
  void edit(const RunEdit& edit);

 signals:
  void done(tsr::studio::RunsReadPtr result);
  void profilesDiffed(tsr::studio::ProfileDiffReadPtr result);
  void edited(tsr::studio::RunEditDonePtr result);
};

}  // namespace tsr::studio

Q_DECLARE_METATYPE(tsr::studio::RunsReadPtr)
Q_DECLARE_METATYPE(tsr::studio::ProfileDiffReadPtr)
Q_DECLARE_METATYPE(tsr::studio::RunEditDonePtr)
