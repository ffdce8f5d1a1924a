#pragma once
// Runs and metric series read from a project's runs.db while a training process writes it (WAL: readers never
// block the writer). A reader opens an existing store only; it never creates one.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_diff.h"

namespace tsr::inspect {

struct MetricStats {
  int64_t points = 0;
  int64_t lastStep = 0;
  double latest = 0, min = 0, max = 0;
};

struct RunRow {
  store::RunInfo info;
  std::map<std::string, std::string> params;
  std::map<std::string, MetricStats> metrics;  // by key: "loss", "val_loss", "lr", ...
};

// One metric of one run at full resolution, in step order, as columns: a million points take 24 MB, and the
// level-of-detail reduction (metric_lod.h) scans the values contiguously.
struct MetricColumns {
  std::vector<int64_t> steps;
  std::vector<double> times;  // unix seconds
  std::vector<double> values;

  size_t size() const { return steps.size(); }
  bool empty() const { return steps.empty(); }
  void append(const std::vector<store::MetricPoint>& points);
};

class RunsReader {
 public:
  // Fails when the file does not exist (nothing has been run yet) or is not a run store.
  static Result<RunsReader> open(const std::string& dbPath);

  // Every run with its hyperparameters and latest/min/max of each metric.
  Result<std::vector<RunRow>> runs() const;
  // The runs alone, without reading their metrics (cheap enough to poll).
  Result<std::vector<store::RunInfo>> runInfos() const;
  Result<std::vector<std::string>> keys(int64_t run) const;
  // The hyperparameters the run recorded ("train.batch_size" -> "8", ...).
  Result<std::map<std::string, std::string>> params(int64_t run) const;
  // Points after `afterStep` (all with -1): the IDE tails a series with the last step it holds.
  Result<std::vector<store::MetricPoint>> points(int64_t run, const std::string& key, int64_t afterStep = -1) const;

  const std::string& path() const { return m_store.path(); }

 private:
  explicit RunsReader(store::RunStore s) : m_store(std::move(s)) {}
  store::RunStore m_store;
  mutable std::map<int64_t, RunRow> m_ended;  // runs that have ended, as last read
};

// The tokens one step (one optimizer update) of a run trains on, for an x axis in tokens: train.batch_size *
// train.seq_len * train.accumulate of its recorded hyperparameters (accumulate is 1 where a run did not record
// it). An error says why there is no such figure: the run's model family is not a language model (or is not
// registered here), or a key is missing or not a positive integer.
Result<double> tokensPerStep(const std::map<std::string, std::string>& params);

// Exponential moving average with TensorBoard's debiasing, over the full-resolution values; weight in [0, 1).
std::vector<double> smooth(const std::vector<double>& values, double weight);

// Two runs' latest profiles compared by kernel and by graph node (train::diffProfiles), from the store at
// dbPath, opened read-only.
Result<train::ProfileDiff> diffRunProfiles(const std::string& dbPath, int64_t runA, int64_t runB);

}  // namespace tsr::inspect
