#include "engine/train/run_process.h"

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/dist/communicator.h"
#include "engine/spmd/spmd.h"

namespace tsr::train {

namespace {

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

std::string bootId() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot; -1 when there is no such
// process (or no /proc), and -2 when it has ended but is not reaped yet (a zombie: state Z or X). The command
// name (field 2) may hold spaces and parentheses: fields are counted after its last ')'.
long long processStartTicks(long long pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(fields >> field)) return -1;
    if (i == 3 && (field == "Z" || field == "X")) return -2;
  }
  try {
    return std::stoll(field);
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

store::Artifact thisProcessArtifact() {
  const long long pid = ::getpid();
  nlohmann::json j = {{"host", hostName()}, {"pid", pid}, {"boot_id", bootId()}, {"start_ticks", processStartTicks(pid)}};
  return {kRunProcessArtifact, "json", j.dump()};
}

bool recordedProcessGone(const std::string& processJson) {
  const nlohmann::json j = nlohmann::json::parse(processJson, nullptr, false);
  if (!j.is_object()) return false;
  const auto text = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
  const auto number = [&](const char* key) {
    return j.contains(key) && j[key].is_number_integer() ? j[key].get<long long>() : -1;
  };
  const std::string host = text("host"), boot = text("boot_id");
  const long long pid = number("pid"), start = number("start_ticks");
  if (host.empty() || host != hostName() || pid <= 0) return false;
  if (!boot.empty() && boot != bootId()) return true;  // the machine has restarted since
  const long long now = processStartTicks(pid);
  if (now == -2) return true;
  if (now >= 0) return start >= 0 && now != start;  // a process of that pid: the run's own, or a later one
  // No /proc entry: gone, where /proc shows this process at all (else ask the kernel).
  if (processStartTicks(::getpid()) >= 0) return true;
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

void settleOrphanedRun(const store::RunStore& db, store::RunInfo& run) {
  if (run.status != store::RunStatus::Running) return;
  auto process = db.artifact(run.id, kRunProcessArtifact);
  if (!process.ok()) return;  // a run from before the record, or one starting now: left as stored
  // The run's lease (run_lease.h) answers for a process on any machine that shares the store, where a pid answers
  // only on this one: a run is orphaned when its lease is free. A store without a lock file was written before
  // leases: its record's pid is all there is to ask.
  std::error_code ec;
  if (std::filesystem::exists(store::leaseFilePath(db.path()), ec)) {
    auto held = store::RunLease::held(db.path(), run.id);
    if (!held.ok() || *held) return;
  } else if (!recordedProcessGone(process->data)) {
    return;
  }
  const nlohmann::json j = nlohmann::json::parse(process->data, nullptr, false);
  run.status = store::RunStatus::Crashed;
  run.message = fmt::format("its process (pid {} on {}) ended without closing the run (killed, as by SIGKILL, or "
                            "crashed)", j.value("pid", 0LL), j.value("host", std::string("?")));
}

void settleOrphanedRuns(const store::RunStore& db, std::vector<store::RunInfo>& runs) {
  for (store::RunInfo& run : runs) settleOrphanedRun(db, run);
}

namespace {

// Run `run` is leased by a process other than this one: who, as the run recorded it when that process started
// or resumed it (run/process.json), how to stop it, and `then`, what to do after.
Error trainedElsewhere(const std::string& storePath, int64_t run, const std::string& then) {
  std::string who = "another process", stop = "Ctrl-C where it runs";
  if (auto db = store::RunStore::openReadOnly(storePath); db.ok())
    if (auto process = db->artifact(run, kRunProcessArtifact); process.ok()) {
      const nlohmann::json j = nlohmann::json::parse(process->data, nullptr, false);
      const long long pid = j.is_object() && j.contains("pid") && j["pid"].is_number_integer() ? j["pid"].get<long long>() : 0;
      const std::string host = j.is_object() && j.contains("host") && j["host"].is_string() ? j["host"].get<std::string>() : "";
      if (pid > 0) {
        const bool here = host.empty() || host == hostName();
        who = here ? fmt::format("another process (pid {})", pid) : fmt::format("another process (pid {} on {})", pid, host);
        stop = here ? fmt::format("Ctrl-C where it runs, or kill -INT {}", pid)
                    : fmt::format("Ctrl-C where it runs, or kill -INT {} on {}", pid, host);
      }
    }
  return Error{fmt::format("run {} of {} is being trained by {}: stop it first ({}), {}", run, storePath, who, stop, then)};
}

}  // namespace

Result<store::RunLease> takeRunLease(const std::string& storePath, int64_t run) {
  TSR_ASSIGN(std::optional<store::RunLease> lease, store::RunLease::tryTake(storePath, run));
  if (!lease) return trainedElsewhere(storePath, run, kThenResume);
  return std::move(*lease);
}

Result<std::optional<store::RunLease>> takeRunLeaseForJob(const std::string& storePath, int64_t run) {
  // Rank 0 alone writes the run store and the checkpoints (run.h), so it alone needs the lease; the other ranks
  // write nothing of the run, on a store their machine may not even share, and take none (an exclusive lock held
  // by rank 0 would refuse them anyway).
  TSR_ASSIGN(const bool primary, spmd::isPrimaryProcess());
  std::optional<store::RunLease> lease;
  std::optional<Error> refused;
  if (primary) {
    auto taken = takeRunLease(storePath, run);
    if (taken.ok()) lease = std::move(taken).value();
    else refused = taken.takeError();
  }
  if (dist::launchedUnderMpi()) {  // rank 0's answer to every rank: the number of ranks refused
    TSR_ASSIGN(auto comm, spmd::devices());
    std::vector<int> group(static_cast<size_t>(comm->numDevices()));
    std::iota(group.begin(), group.end(), 0);
    int32_t mine = refused ? 1 : 0, sum = 0;
    TSR_TRY(comm->allReduce(comm->localDevices().front(), group, &mine, &sum, 1, DType::I32));
    if (sum > 0 && !refused)
      return makeError("run {} of {} is being trained by another process: rank 0 of this job was refused its lease "
                       "(it says by whom); this rank stops with it",
                       run, storePath);
  }
  if (refused) return std::move(*refused);
  return lease;
}

Status checkRunNotTrainedElsewhere(const std::string& storePath, int64_t run, const std::string& then) {
  TSR_ASSIGN(const bool held, store::RunLease::held(storePath, run));
  if (held) return trainedElsewhere(storePath, run, then);
  return {};
}

}  // namespace tsr::train
