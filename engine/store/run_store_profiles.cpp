// The run store's profiles: their listing and what a profile holds (kernel events, the kernels and their graph
// nodes, step marks, memory samples, devices and their clocks, collective launches). The store, its schema and
// its runs are run_store.cpp's.
#include "engine/store/run_store.h"

#include <algorithm>

#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "engine/store/stmt.h"

namespace tsr::store {

Result<std::vector<ProfileInfo>> RunStore::profiles(int64_t run) const {
  Stmt st(m_db, "SELECT id, run, name, created, first_step, last_step FROM profiles WHERE run = ? ORDER BY id");
  if (!st.ok()) return st.error();
  st.bind(1, run);
  std::vector<ProfileInfo> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(ProfileInfo{st.i64(0), st.i64(1), st.text(2), st.f64(3), st.i64(4), st.i64(5)});
    return {};
  }));
  return out;
}

Result<std::optional<ProfileInfo>> RunStore::latestProfile() const {
  // Every profile belongs to a run (deleting a run deletes its profiles).
  Stmt st(m_db, "SELECT id, run, name, created, first_step, last_step FROM profiles ORDER BY id DESC LIMIT 1");
  if (!st.ok()) return st.error();
  std::optional<ProfileInfo> out;
  TSR_TRY(st.each([&]() -> Status {
    out = ProfileInfo{st.i64(0), st.i64(1), st.text(2), st.f64(3), st.i64(4), st.i64(5)};
    return {};
  }));
  return out;
}

Status RunStore::addKernelEvents(int64_t profile, const std::vector<KernelEvent>& events) {
  return transaction([&]() -> Status {
    Stmt st(m_db,
            "INSERT INTO kernel_events(profile, device, stream, name, fusion, start_ns, duration_ns, flops, bytes) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& e : events) {
      st.bind(1, profile).bind(2, e.device).bind(3, e.stream).bind(4, e.name).bind(5, e.fusion);
      st.bind(6, e.startNs).bind(7, e.durationNs).bind(8, e.flops).bind(9, e.bytes);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::vector<KernelEvent>> RunStore::kernelEvents(int64_t profile, int64_t fromNs, int64_t toNs) const {
  Stmt st(m_db,
          "SELECT device, stream, name, fusion, start_ns, duration_ns, flops, bytes FROM kernel_events "
          "WHERE profile = ? AND start_ns + duration_ns >= ? AND start_ns <= ? ORDER BY start_ns");
  if (!st.ok()) return st.error();
  st.bind(1, profile).bind(2, fromNs).bind(3, toNs);
  std::vector<KernelEvent> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(KernelEvent{st.text(0), st.i64(1), st.text(2), st.i64(3), st.i64(4), st.i64(5), st.f64(6), st.f64(7)});
    return {};
  }));
  return out;
}

Status RunStore::addProfileKernels(int64_t profile, const std::vector<KernelInfo>& kernels) {
  return transaction([&]() -> Status {
    Stmt st(m_db,
            "INSERT OR REPLACE INTO profile_kernels(profile, fusion, executable, name, kind, nodes, ops, module_path) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& k : kernels) {
      // Node ids and op names as JSON arrays: readable in any SQLite browser.
      st.bind(1, profile).bind(2, k.fusion).bind(3, k.executable).bind(4, k.name).bind(5, k.kind);
      st.bind(6, nlohmann::json(k.nodes).dump()).bind(7, nlohmann::json(k.ops).dump()).bind(8, k.modulePath);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::vector<KernelInfo>> RunStore::profileKernels(int64_t profile) const {
  Stmt st(m_db,
          "SELECT fusion, executable, name, kind, nodes, ops, module_path FROM profile_kernels WHERE profile = ? "
          "ORDER BY fusion");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  std::vector<KernelInfo> out;
  TSR_TRY(st.each([&]() -> Status {
    KernelInfo k{st.i64(0), st.text(1), st.text(2), st.text(3), {}, {}, st.text(6)};
    auto nodes = nlohmann::json::parse(st.text(4), nullptr, false);
    auto ops = nlohmann::json::parse(st.text(5), nullptr, false);
    auto isArrayOf = [](const nlohmann::json& j, auto pred) {
      return j.is_array() && std::all_of(j.begin(), j.end(), pred);
    };
    if (!isArrayOf(nodes, [](const auto& v) { return v.is_number_integer(); }) ||
        !isArrayOf(ops, [](const auto& v) { return v.is_string(); }))
      return makeError("run store {}: profile {} kernel {} has damaged nodes or ops", m_path, profile, k.fusion);
    k.nodes = nodes.get<std::vector<int>>();
    k.ops = ops.get<std::vector<std::string>>();
    out.push_back(std::move(k));
    return {};
  }));
  return out;
}

Status RunStore::addProfileMarks(int64_t profile, const std::vector<ProfileMarkInfo>& marks) {
  return transaction([&]() -> Status {
    Stmt st(m_db, "INSERT INTO profile_marks(profile, name, start_ns, duration_ns, rank) VALUES(?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& m : marks) {
      st.bind(1, profile).bind(2, m.name).bind(3, m.startNs).bind(4, m.durationNs).bind(5, int64_t{m.rank});
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::vector<ProfileMarkInfo>> RunStore::profileMarks(int64_t profile) const {
  // A store opened read-only may predate schema 8: its marks are rank 0's.
  Stmt st(m_db, schemaVersion() >= 8
                    ? "SELECT name, start_ns, duration_ns, rank FROM profile_marks WHERE profile = ? ORDER BY start_ns, rowid"
                    : "SELECT name, start_ns, duration_ns, 0 FROM profile_marks WHERE profile = ? ORDER BY start_ns, rowid");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  std::vector<ProfileMarkInfo> out;
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(ProfileMarkInfo{st.text(0), st.i64(1), st.i64(2), static_cast<int>(st.i64(3))});
    return {};
  }));
  return out;
}

Status RunStore::addProfileMemory(int64_t profile, const std::vector<MemorySampleInfo>& samples) {
  return transaction([&]() -> Status {
    Stmt st(m_db, "INSERT INTO profile_memory(profile, t_ns, bytes, rank) VALUES(?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& m : samples) {
      st.bind(1, profile).bind(2, m.tNs).bind(3, m.bytes).bind(4, int64_t{m.rank});
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Status RunStore::addProfileDevices(int64_t profile, const std::vector<ProfileDeviceInfo>& devices) {
  return transaction([&]() -> Status {
    Stmt st(m_db, "INSERT OR REPLACE INTO profile_devices(profile, device, rank, offset_ns, error_ns) VALUES(?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& d : devices) {
      st.bind(1, profile).bind(2, d.device).bind(3, int64_t{d.rank}).bind(4, d.offsetNs).bind(5, d.errorNs);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::vector<ProfileDeviceInfo>> RunStore::profileDevices(int64_t profile) const {
  std::vector<ProfileDeviceInfo> out;
  if (schemaVersion() < 7) return out;
  Stmt st(m_db, "SELECT device, rank, offset_ns, error_ns FROM profile_devices WHERE profile = ? ORDER BY rank, device");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(ProfileDeviceInfo{st.text(0), static_cast<int>(st.i64(1)), st.i64(2), st.i64(3)});
    return {};
  }));
  return out;
}

Status RunStore::addProfileCollectives(int64_t profile, const std::vector<CollectiveLaunch>& launches) {
  return transaction([&]() -> Status {
    Stmt st(m_db,
            "INSERT OR REPLACE INTO profile_collectives(profile, device, seq, grp, name, fusion, start_ns, duration_ns) "
            "VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
    if (!st.ok()) return st.error();
    for (const auto& c : launches) {
      st.bind(1, profile).bind(2, c.device).bind(3, c.seq).bind(4, c.group).bind(5, c.name).bind(6, c.fusion);
      st.bind(7, c.startNs).bind(8, c.durationNs);
      if (st.step() != SQLITE_DONE) return st.error();
      st.reset();
    }
    return {};
  });
}

Result<std::vector<CollectiveLaunch>> RunStore::profileCollectives(int64_t profile) const {
  std::vector<CollectiveLaunch> out;
  if (schemaVersion() < 7) return out;
  Stmt st(m_db,
          "SELECT device, seq, grp, name, fusion, start_ns, duration_ns FROM profile_collectives WHERE profile = ? "
          "ORDER BY seq, grp, device");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(CollectiveLaunch{st.text(0), st.i64(1), st.text(2), st.text(3), st.i64(4), st.i64(5), st.i64(6)});
    return {};
  }));
  return out;
}

Result<std::vector<MemorySampleInfo>> RunStore::profileMemory(int64_t profile) const {
  std::vector<MemorySampleInfo> out;
  if (schemaVersion() < 5) return out;
  Stmt st(m_db, schemaVersion() >= 8 ? "SELECT t_ns, bytes, rank FROM profile_memory WHERE profile = ? ORDER BY t_ns, rowid"
                                      : "SELECT t_ns, bytes, 0 FROM profile_memory WHERE profile = ? ORDER BY t_ns, rowid");
  if (!st.ok()) return st.error();
  st.bind(1, profile);
  TSR_TRY(st.each([&]() -> Status {
    out.push_back(MemorySampleInfo{st.i64(0), st.i64(1), static_cast<int>(st.i64(2))});
    return {};
  }));
  return out;
}

// The columns readRun reads. A store opened read-only may predate schema 4: it has no notes or archived column.

}  // namespace tsr::store
