#pragma once
// Reads the Metrics panel's series from runs.db on a thread of its own (a StorePoller): what is new since the
// points the panel holds, for the runs and metrics it shows. Each read() is answered by done() on the UI thread;
// nothing committed since the last read of the same selection: the answer says so, and no metric was asked.
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <QList>
#include <QString>

#include "engine/inspect/runs_reader.h"
#include "views/store_poller.h"

namespace tsr::studio {

using SeriesKey = std::pair<qint64, std::string>;  // (run, metric)

// What the panel asks: the runs and metrics it shows, and how far it holds each series.
struct MetricsQuery {
  QString path;
  quint64 generation = 0;     // the panel's count of stores and selections: a new one reads whatever the version
  QList<qint64> selected;     // the runs asked for; empty: the latest three
  std::vector<std::string> keys;           // the metrics checked
  std::map<SeriesKey, int64_t> held;       // the last step held of each series tried (-1: none yet)
  std::set<qint64> settled;                // runs read after they ended: their series held are not read again
  std::set<qint64> withTokens;             // runs whose tokens per step the panel has
};
using MetricsQueryPtr = std::shared_ptr<const MetricsQuery>;

// A run's tokens per step (inspect::tokensPerStep), or why it has none.
struct RunTokens {
  double perStep = 0;
  QString error;  // empty: perStep holds
};

struct MetricsRead {
  quint64 generation = 0;
  bool opened = false;   // the store exists and is a run store
  bool changed = true;   // false: nothing was committed since the last read, and nothing below is filled
  QString error;
  std::vector<store::RunInfo> runs;          // every run in the store
  QList<qint64> shown;                       // the runs read: the selected ones, or the latest three
  std::vector<std::string> keys;             // the metric keys of the shown runs not settled
  std::map<SeriesKey, std::vector<store::MetricPoint>> points;  // each series read: its points after those held
  std::map<qint64, RunTokens> tokens;        // the shown runs not in MetricsQuery::withTokens
};
using MetricsReadPtr = std::shared_ptr<MetricsRead>;

class MetricsPoller : public StorePoller {
  Q_OBJECT
 public:
  MetricsPoller();

  // Call it on the poller's thread (QMetaObject::invokeMethod); done() follows.
  void read(const MetricsQueryPtr& query);

 signals:
  void done(tsr::studio::MetricsReadPtr result);
};

}  // namespace tsr::studio

Q_DECLARE_METATYPE(tsr::studio::MetricsReadPtr)
