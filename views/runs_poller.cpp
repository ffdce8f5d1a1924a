#include "views/runs_poller.h"

#include <sqlite3.h>

namespace tsr::studio {

RunsPoller::RunsPoller() { qRegisterMetaType<RunsReadPtr>(); }

RunsPoller::~RunsPoller() { close(); }

void RunsPoller::close() {
  m_reader.reset();
  if (m_probe) sqlite3_close(m_probe);
  m_probe = nullptr;
  m_version.reset();
}

std::optional<int64_t> RunsPoller::dataVersion() {
  if (!m_probe) {
    const QByteArray path = m_path.toUtf8();
    if (sqlite3_open_v2(path.constData(), &m_probe, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      sqlite3_close(m_probe);
      m_probe = nullptr;
      return std::nullopt;
    }
    sqlite3_busy_timeout(m_probe, 1000);
  }
  sqlite3_stmt* st = nullptr;
  std::optional<int64_t> version;
  if (sqlite3_prepare_v2(m_probe, "PRAGMA data_version", -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    version = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return version;
}

void RunsPoller::read(const QString& path, quint64 generation) {
  auto out = std::make_shared<RunsRead>();
  out->path = path;
  out->generation = generation;
  if (path != m_path) {
    close();
    m_path = path;
  }
  if (generation != m_generation) {
    // The panel was given the store again (a project opened again): it shows nothing yet, so read whatever the
    // version says.
    m_generation = generation;
    m_version.reset();
  }
  if (!m_reader) {
    auto r = inspect::RunsReader::open(path.toStdString());
    if (!r.ok()) {
      out->error = QString::fromStdString(r.error().message);
      emit done(out);
      return;
    }
    m_reader.emplace(std::move(r).value());
  }
  out->opened = true;
  // Asked before reading: a commit while the runs are read changes it again, and the next poll reads.
  const std::optional<int64_t> version = dataVersion();
  if (version && m_version && *version == *m_version) {
    out->changed = false;
    emit done(out);
    return;
  }
  auto runs = m_reader->runs();
  if (!runs.ok()) {
    out->error = QString::fromStdString(runs.error().message);
    emit done(out);
    return;
  }
  m_version = version;
  out->runs = std::move(runs).value();
  emit done(out);
}

}  // namespace tsr::studio
