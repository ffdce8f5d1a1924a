#include "engine/inspect/runs_reader.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <string_view>

#include "engine/project/model_family.h"
#include "engine/train/run_process.h"

namespace tsr::inspect {

Result<RunsReader> RunsReader::open(const std::string& dbPath) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dbPath, ec)) return makeError("{}: no run store yet", dbPath);
  TSR_ASSIGN(store::RunStore s, store::RunStore::openReadOnly(dbPath));
  return RunsReader(std::move(s));
}

Result<std::vector<RunRow>> RunsReader::runs() const {
  TSR_ASSIGN(std::vector<store::RunInfo> infos, m_store.runs());
  train::settleOrphanedRuns(m_store, infos);  // a killed run's process is gone: crashed, not running
  std::vector<RunRow> rows;
  for (store::RunInfo& info : infos) {
    RunRow row;
    // A run that has ended does not change: its params and metric summaries are read once.
    auto cached = m_ended.find(info.id);
    if (cached != m_ended.end() && cached->second.info.endTime == info.endTime &&
        cached->second.info.status == info.status) {
      row = cached->second;
      row.info = std::move(info);
      rows.push_back(std::move(row));
      continue;
    }
    TSR_ASSIGN(row.params, m_store.params(info.id));
    TSR_ASSIGN(auto summaries, m_store.metricSummaries(info.id));
    for (const auto& [k, m] : summaries) {
      MetricStats st;
      st.points = m.points;
      st.lastStep = m.latest.step;
      st.latest = m.latest.value;
      st.min = m.min;
      st.max = m.max;
      row.metrics[k] = st;
    }
    row.info = std::move(info);
    if (row.info.status != store::RunStatus::Running) m_ended[row.info.id] = row;
    rows.push_back(std::move(row));
  }
  return rows;
}

Result<std::vector<store::RunInfo>> RunsReader::runInfos() const {
  TSR_ASSIGN(std::vector<store::RunInfo> infos, m_store.runs());
  train::settleOrphanedRuns(m_store, infos);
  return infos;
}

Result<std::vector<std::string>> RunsReader::keys(int64_t run) const { return m_store.metricKeys(run); }

Result<std::map<std::string, std::string>> RunsReader::params(int64_t run) const { return m_store.params(run); }

Result<std::vector<store::MetricPoint>> RunsReader::points(int64_t run, const std::string& key, int64_t afterStep) const {
  return m_store.metrics(run, key, afterStep);
}

void MetricColumns::append(const std::vector<store::MetricPoint>& points) {
  steps.reserve(steps.size() + points.size());
  times.reserve(times.size() + points.size());
  values.reserve(values.size() + points.size());
  for (const store::MetricPoint& p : points) {
    steps.push_back(p.step);
    times.push_back(p.time);
    values.push_back(p.value);
  }
}

Result<double> tokensPerStep(const std::map<std::string, std::string>& params) {
  auto family = params.find("model.family");
  if (family == params.end()) return makeError("the run recorded no model.family");
  const project::ModelFamily* f = project::findModelFamily(family->second);
  if (!f) return makeError("model family '{}' is not loaded", family->second);
  if (!f->languageModel) return makeError("{} is not a language model", family->second);
  double tokens = 1;
  for (const char* key : {"train.batch_size", "train.seq_len", "train.accumulate"}) {
    auto it = params.find(key);
    if (it == params.end() && std::string_view(key) == "train.accumulate") continue;  // runs from before it: 1
    if (it == params.end()) return makeError("the run recorded no {}", key);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
    if (ec != std::errc() || end != it->second.data() + it->second.size() || v <= 0)
      return makeError("{} = '{}' is not a positive integer", key, it->second);
    tokens *= static_cast<double>(v);
  }
  return tokens;
}

std::vector<double> smooth(const std::vector<double>& values, double weight) {
  std::vector<double> out(values.size());
  double last = 0;
  double debias = 1;
  for (size_t i = 0; i < values.size(); ++i) {
    last = last * weight + (1 - weight) * values[i];
    debias *= weight;
    out[i] = weight > 0 ? last / (1 - debias) : values[i];
  }
  return out;
}

Result<train::ProfileDiff> diffRunProfiles(const std::string& dbPath, int64_t runA, int64_t runB) {
  TSR_ASSIGN(store::RunStore db, store::RunStore::openReadOnly(dbPath));
  return train::diffProfiles(db, runA, db, runB);
}

}  // namespace tsr::inspect
