#include "views/runs_poller.h"

namespace tsr::studio {

RunsPoller::RunsPoller() {
  qRegisterMetaType<RunsReadPtr>();
  qRegisterMetaType<ProfileDiffReadPtr>();
}

void RunsPoller::read(const QString& path, quint64 generation) {
  auto out = std::make_shared<RunsRead>();
  out->path = path;
  out->generation = generation;
  const inspect::RunsReader* reader = openChanged(path, generation, out->error, out->opened, out->changed);
  if (!reader) {
    emit done(out);
    return;
  }
  auto runs = reader->runs();
  if (!runs.ok()) {
    out->error = QString::fromStdString(runs.error().message);
    emit done(out);
    return;
  }
  markRead();
  out->runs = std::move(runs).value();
  emit done(out);
}

void RunsPoller::diffProfiles(const QString& path, quint64 request, qint64 runA, qint64 runB) {
  // Its own connection, once per Compare: the profiles are read when asked, whatever the store's version.
  emit profilesDiffed(std::make_shared<const ProfileDiffRead>(
      ProfileDiffRead{request, runA, runB, inspect::diffRunProfiles(path.toStdString(), runA, runB)}));
}

}  // namespace tsr::studio
