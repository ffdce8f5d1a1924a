#pragma once
// The process that trains a run, recorded with the run when it starts or resumes (the artifact run/process.json),
// so that any reader (tessera runs, a sweep's summary, the IDE) tells a run whose process is gone (SIGKILL, a
// crash that skipped the run's closing) from one still training.
#include <optional>
#include <string>
#include <vector>

#include "engine/store/run_lease.h"
#include "engine/store/run_store.h"

namespace tsr::train {

inline constexpr const char* kRunProcessArtifact = "run/process.json";

// This process as the artifact records it: host, pid, boot id and the pid's start time since boot.
store::Artifact thisProcessArtifact();

// Whether the process a run recorded is gone: it ran on this host since its last boot and no process has its pid
// and start time now (a reused pid is another process). False when the run recorded none or ran elsewhere: that
// cannot be known from here, and the run is left as stored.
bool recordedProcessGone(const std::string& processJson);

// The runs as a reader should see them: a run stored as running whose lease is free (no process trains it, on any
// machine) is crashed, its message saying so. Nothing is written: the store keeps "running" until a writer
// (resume, the IDE) settles it.
void settleOrphanedRuns(const store::RunStore& db, std::vector<store::RunInfo>& runs);
void settleOrphanedRun(const store::RunStore& db, store::RunInfo& run);

// One process trains a run at a time (engine/store/run_lease.h): the lease of run `run` of the store at
// storePath, taken for this process, which trains it (a new run, a resume) while the lease lives. When another
// process holds it, the error names that process as the run recorded it (its pid and host) and how to stop it.
Result<store::RunLease> takeRunLease(const std::string& storePath, int64_t run);
// The lease of the run a job resumes, for every process of the job (collective under mpirun: each rank calls it
// at the same point, before anything is built). Rank 0 takes it and holds it (the returned lease); the other ranks
// hold none (nullopt) but get rank 0's refusal as an error of their own, so that a second job on a run is refused at
// every rank, where they went on to wait for the refused rank 0 in their first collective for ever.
Result<std::optional<store::RunLease>> takeRunLeaseForJob(const std::string& storePath, int64_t run);
inline constexpr const char* kThenResume = "then resume; two processes would both write its metrics and its checkpoint";
// The same question without taking the lease (the IDE asks before it launches a resume, `tessera train` before it
// builds the model, runs delete before it deletes): an error naming the process that trains the run, none when no
// process does; `then` says what to do once it stopped.
Status checkRunNotTrainedElsewhere(const std::string& storePath, int64_t run, const std::string& then = kThenResume);

}  // namespace tsr::train
