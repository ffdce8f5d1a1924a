#pragma once
// Runs and metric series read from a project's runs.db while a training process writes it (WAL: readers never
// block the writer). A reader opens an existing store only; it never creates one.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/store/run_store.h"

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

struct MetricSeries {
  int64_t run = 0;
  std::string key;
  std::vector<store::MetricPoint> points;  // full resolution, in step order
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
  // Points after `afterStep` (all with -1): the IDE tails a series with the last step it holds.
  Result<std::vector<store::MetricPoint>> points(int64_t run, const std::string& key, int64_t afterStep = -1) const;

  const std::string& path() const { return m_store.path(); }

 private:
  explicit RunsReader(store::RunStore s) : m_store(std::move(s)) {}
  store::RunStore m_store;
};

// Exponential moving average with TensorBoard's debiasing, over the full-resolution values; weight in [0, 1).
std::vector<double> smooth(const std::vector<double>& values, double weight);

}  // namespace tsr::inspect
