#include "views/runs_poller.h"

#include "engine/inspect/run_edits.h"

namespace tsr::studio {

RunsPoller::RunsPoller() {
  qRegisterMetaType<RunsReadPtr>();
  qRegisterMetaType<ProfileDiffReadPtr>();
  qRegisterMetaType<RunEditDonePtr>();
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

void RunsPoller::edit(const RunEdit& edit) {
  auto out = std::make_shared<RunEditDone>();
  out->edit = edit;
  const std::string path = edit.path.toStdString();
  Status st;
  switch (edit.kind) {
    case RunEdit::Kind::Rename: st = inspect::renameRun(path, edit.run, edit.text.trimmed().toStdString()); break;
    case RunEdit::Kind::Notes: st = inspect::setRunNotes(path, edit.run, edit.text.toStdString()); break;
    case RunEdit::Kind::Tags: {
      std::vector<std::string> tags;
      for (const QString& t : edit.tags) tags.push_back(t.trimmed().toStdString());
      st = inspect::setRunTags(path, edit.run, tags);
      break;
    }
    case RunEdit::Kind::Archive: st = inspect::setRunArchived(path, edit.run, edit.archived); break;
    case RunEdit::Kind::DescribeDeletion: {
      auto what = inspect::describeDeletion(path, edit.run);
      if (what.ok()) out->description = QString::fromStdString(*what);
      else st = what.takeError();
      break;
    }
    case RunEdit::Kind::Delete: st = inspect::deleteRun(path, edit.run); break;
  }
  if (!st.ok()) out->error = QString::fromStdString(st.error().message);
  emit edited(out);
}

}  // namespace tsr::studio
