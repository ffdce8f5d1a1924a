#include "views/store_poller.h"

#include <sqlite3.h>

#include <QThread>

namespace tsr::studio {

StorePoller::~StorePoller() { close(); }

void StorePoller::close() {
  m_reader.reset();
  if (m_probe) sqlite3_close(m_probe);
  m_probe = nullptr;
  m_version.reset();
  m_asked.reset();
}

const inspect::RunsReader* StorePoller::open(const QString& path, quint64 generation, QString& error) {
  if (path != m_path) {
    close();
    m_path = path;
  }
  if (generation != m_generation) {
    m_generation = generation;
    m_version.reset();
  }
  if (!m_reader) {
    auto r = inspect::RunsReader::open(path.toStdString());
    if (!r.ok()) {
      error = QString::fromStdString(r.error().message);
      return nullptr;
    }
    m_reader.emplace(std::move(r).value());
  }
  return &*m_reader;
}

const inspect::RunsReader* StorePoller::openChanged(const QString& path, quint64 generation, QString& error,
                                                    bool& opened, bool& changed) {
  const inspect::RunsReader* reader = open(path, generation, error);
  if (!reader) return nullptr;
  opened = true;
  if (unchanged()) {
    changed = false;
    return nullptr;
  }
  return reader;
}

std::optional<int64_t> StorePoller::dataVersion() {
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

bool StorePoller::unchanged() {
  m_asked = dataVersion();
  return m_asked && m_version && *m_asked == *m_version;
}

bool PollGate::ask() {
  if (m_inFlight) {
    m_again = true;
    return false;
  }
  m_inFlight = true;
  return true;
}

bool PollGate::answered(quint64 generation, bool& current) {
  m_inFlight = false;
  current = generation == m_generation;
  const bool again = m_again || !current;
  m_again = false;
  return again;
}

PollerThread::PollerThread(StorePoller* poller, const QString& name) : m_thread(new QThread), m_poller(poller) {
  m_thread->setObjectName(name);
  m_poller->moveToThread(m_thread);
  m_thread->start();
}

PollerThread::~PollerThread() {
  m_thread->quit();
  m_thread->wait();
  delete m_poller;
  delete m_thread;
}

}  // namespace tsr::studio
