#include "views/metrics_poller.h"

#include <algorithm>

namespace tsr::studio {

MetricsPoller::MetricsPoller() { qRegisterMetaType<MetricsReadPtr>(); }

void MetricsPoller::read(const MetricsQueryPtr& query) {
  const MetricsQuery& q = *query;
  auto out = std::make_shared<MetricsRead>();
  out->generation = q.generation;
  const inspect::RunsReader* reader = openChanged(q.path, q.generation, out->error, out->opened, out->changed);
  if (!reader) {
    emit done(out);
    return;
  }
  auto infos = reader->runInfos();
  if (!infos.ok()) {
    out->error = QString::fromStdString(infos.error().message);
    emit done(out);
    return;
  }
  out->runs = std::move(infos).value();
  out->shown = q.selected;
  if (out->shown.isEmpty()) {
    std::vector<qint64> ids;
    for (const store::RunInfo& r : out->runs) ids.push_back(r.id);
    std::sort(ids.begin(), ids.end());
    for (size_t i = ids.size() > 3 ? ids.size() - 3 : 0; i < ids.size(); ++i) out->shown << ids[i];
  }
  // The keys of every shown run go into the panel's list; only the checked ones are read (only what is new). A
  // run that had ended when it was last read has nothing new: its keys are not asked again, nor the metrics read
  // already (asking a run's keys reads an index entry per point: slow with a million of them).
  for (qint64 run : out->shown) {
    const bool settled = q.settled.count(run) > 0;
    if (!settled) {
      if (auto k = reader->keys(run); k.ok()) out->keys.insert(out->keys.end(), k->begin(), k->end());
    }
    for (const std::string& key : q.keys) {
      auto held = q.held.find({run, key});
      if (settled && held != q.held.end()) continue;
      auto points = reader->points(run, key, held == q.held.end() ? -1 : held->second);
      std::vector<store::MetricPoint>& read = out->points[{run, key}];
      if (points.ok()) read = std::move(points).value();
    }
    if (!q.withTokens.count(run)) {
      RunTokens& t = out->tokens[run];
      auto params = reader->params(run);
      Result<double> perStep = params.ok() ? inspect::tokensPerStep(*params) : Result<double>(params.takeError());
      if (perStep.ok()) t.perStep = *perStep;
      else t.error = QString::fromStdString(perStep.error().message);
    }
  }
  markRead();
  emit done(out);
}

}  // namespace tsr::studio
