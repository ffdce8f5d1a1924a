#pragma once
// The run store: one SQLite database (WAL mode, so the IDE reads while a training process writes) holding
// runs, their hyperparameters, metric series, artifacts (IR per pass, DOT, reports) and profiles.
// The schema is versioned (PRAGMA user_version) and migrated forward on open.
#include <cstdint>
#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/result.h"

struct sqlite3;

namespace tsr::store {

class Stmt;

// Stopped: by the user (Ctrl-C, the IDE's Stop, --stop-at), checkpointed and resumable. Crashed: the training
// process died (the message holds its last lines of stderr). Diverged: stopped on a NaN or Inf loss, gradient or
// state (the message names the step and the value).
enum class RunStatus { Running, Finished, Failed, Stopped, Crashed, Diverged };
const char* runStatusName(RunStatus s);

struct RunInfo {
  int64_t id = 0;
  std::string name;
  std::string project;     // project folder or example name
  std::string config;      // the resolved project.toml (text), for reproduction
  RunStatus status = RunStatus::Running;
  double startTime = 0;    // unix seconds
  double endTime = 0;      // 0 while running
  std::string message;     // why it failed, or a closing note
  std::string notes;       // the user's notes (runs note, the IDE)
  std::vector<std::string> tags;  // sorted
  bool archived = false;   // hidden from lists unless asked for
};

struct MetricPoint {
  int64_t step = 0;
  double time = 0;  // unix seconds
  double value = 0;
};

// The scalars one training step logs, for logMetricsBatch.
struct StepMetrics {
  int64_t step = 0;
  double time = 0;  // unix seconds; 0: now
  std::vector<std::pair<std::string, double>> values;
};

struct Artifact {
  std::string name;  // "ir/03_fusion.tir"
  std::string kind;  // "ir", "dot", "json", "text"
  std::string data;
};

// One kernel launch of a profile: where it ran, which fusion of the graph it executed, when and what it did.
struct KernelEvent {
  std::string device;   // "cpu:0", "cuda:0"
  int64_t stream = 0;   // stream, or host thread
  std::string name;     // kernel name
  int64_t fusion = -1;  // fusion id, linking back to the graph's nodes; -1: none
  int64_t startNs = 0;
  int64_t durationNs = 0;
  double flops = 0;
  double bytes = 0;
};

// One kernel of a profiled executable: the graph nodes it runs. Events link to it by fusion id.
struct KernelInfo {
  int64_t fusion = -1;
  std::string executable;         // the compiled graph's name, e.g. "train_step"
  std::string name;
  std::string kind;               // "loop", "reduction", "gemm", "opaque", "copy"
  std::vector<int> nodes;         // node ids in the executable's graph
  std::vector<std::string> ops;   // their op names, in order
  std::string modulePath;
  bool operator==(const KernelInfo&) const = default;
};

// A named host span of a profile, such as "step 3", of the process of rank `rank` (schema 8; 0 before).
struct ProfileMarkInfo {
  std::string name;
  int64_t startNs = 0;
  int64_t durationNs = 0;
  int rank = 0;
  bool operator==(const ProfileMarkInfo&) const = default;
};

// The bytes of buffers in use at a moment of a profile in the process of rank `rank` (runtime::MemorySample).
struct MemorySampleInfo {
  int64_t tNs = 0;
  int64_t bytes = 0;
  int rank = 0;
  bool operator==(const MemorySampleInfo&) const = default;
};

// A device of a profile (schema 7): the rank of the process that ran it and how its clock was aligned with rank
// 0's (offset subtracted from its times, and the bound on its error; 0 and 0 for rank 0 and its devices).
struct ProfileDeviceInfo {
  std::string device;
  int rank = 0;
  int64_t offsetNs = 0;
  int64_t errorNs = 0;
  bool operator==(const ProfileDeviceInfo&) const = default;
};

// A collective's launch on one device (schema 7). (seq, group) names the collective across devices: the seq-th
// collective of every member of `group` is the same call.
struct CollectiveLaunch {
  std::string device;
  int64_t seq = 0;
  std::string group;  // member positions in group order, "0,1,2,3"
  std::string name;   // the kernel's name
  int64_t fusion = -1;
  int64_t startNs = 0;  // on rank 0's clock, as the launch's kernel event
  int64_t durationNs = 0;
  bool operator==(const CollectiveLaunch&) const = default;
};

// --- A profile's levels of detail (schema 6) ---------------------------------------------------------------
// A timeline of tens of millions of launches is never read whole: each row (device, stream) of a profile has a
// pyramid of buckets, level L's buckets 2^(baseShift + L) ns wide from the profile's first start, each summing
// the launches in it. A window of the timeline reads one level (about a bucket per pixel) or, when few enough
// launches are in it, the launches themselves through the span-class index (see profileWindow).

// One bucket of a row at one level. count, flops, bytes and the longest launch are of the launches that start in
// the bucket; busyNs is the time launches cover inside it (clipped to the bucket, so busyNs / width is the
// row's occupancy there). Two neighbouring buckets merge into their parent exactly.
struct LevelBucket {
  int64_t busyNs = 0;
  int64_t longestNs = 0;
  double flops = 0, bytes = 0;
  int32_t count = 0;
  int32_t longestFusion = -1;  // the fusion id of the longest launch
};

// One row of a profile: the launches of one device and stream.
struct ProfileRow {
  std::string device;
  int64_t stream = 0;
  int64_t events = 0;
  int64_t beginNs = 0, endNs = 0;  // first start, last end
};

// What profileWindow needs to know of a profile, read once when it opens.
struct ProfileSummary {
  int64_t profile = 0;
  int64_t events = 0;
  int64_t beginNs = 0, endNs = 0;  // of all rows; buckets start at beginNs
  int baseShift = 0;               // level 0's buckets are 2^baseShift ns wide
  int levels = 0;
  std::vector<ProfileRow> rows;    // by device, then stream
  int64_t bucketNs(int level) const { return int64_t{1} << (baseShift + level); }
};

// The buckets of one row at one level: bucket first + i covers [origin + (first + i) * width, ... + width).
struct RowBuckets {
  int64_t first = 0;
  std::vector<LevelBucket> buckets;
};

// A window of a profile: either every launch overlapping [fromNs, toNs] (raw) or, when more than the caller's
// limit are there, one level's buckets per row.
struct ProfileWindow {
  int64_t fromNs = 0, toNs = 0;
  bool raw = false;
  std::vector<KernelEvent> events;  // raw: by start
  int level = -1;                   // !raw: the level read
  int64_t bucketNs = 0;
  std::vector<RowBuckets> rows;     // !raw: one per ProfileSummary::rows entry
  int64_t estimatedEvents = 0;      // launches starting in the window, from the level's counts
};

struct ProfileInfo {
  int64_t id = 0;
  int64_t run = 0;
  std::string name;
  double created = 0;
  int64_t firstStep = 0, lastStep = 0;
};

class RunStore {
 public:
  ~RunStore();
  RunStore(RunStore&&) noexcept;
  RunStore& operator=(RunStore&&) noexcept;

  // Opens (creating if needed) and migrates the database at `path`. Errors name the file.
  static Result<RunStore> open(const std::string& path);
  // Opens an existing store to read it (runs list and show, the IDE): nothing is written, not even a schema.
  // An empty file or another program's database is "not a Tessera run store"; an older schema is read as is.
  static Result<RunStore> openReadOnly(const std::string& path);
  static constexpr int kSchemaVersion = 8;
  int schemaVersion() const;

  Result<int64_t> createRun(const std::string& name, const std::string& project, const std::string& config);
  Status finishRun(int64_t run, RunStatus status, const std::string& message = "");
  // A resumed run: running again, with no end time or message.
  Status reopenRun(int64_t run);
  Status setParams(int64_t run, const std::map<std::string, std::string>& params);
  Result<std::map<std::string, std::string>> params(int64_t run) const;

  // Metrics are written in one transaction per call; a step logs all its scalars at once.
  Status logMetrics(int64_t run, int64_t step, const std::vector<std::pair<std::string, double>>& values,
                    double time = 0);
  // Many steps in one transaction: training buffers its per-step scalars and writes them a few times a second.
  Status logMetricsBatch(int64_t run, const std::vector<StepMetrics>& steps);
  Result<std::vector<std::string>> metricKeys(int64_t run) const;
  // Points with step > afterStep, in step order (the IDE tails with the last step it has).
  Result<std::vector<MetricPoint>> metrics(int64_t run, const std::string& key, int64_t afterStep = -1) const;
  // The latest value of each metric of a run.
  Result<std::map<std::string, MetricPoint>> latestMetrics(int64_t run) const;
  // Each metric's point count, minimum, maximum and latest point, computed by SQLite (no point leaves the file).
  struct MetricSummary {
    int64_t points = 0;
    double min = 0, max = 0;
    MetricPoint latest;
  };
  Result<std::map<std::string, MetricSummary>> metricSummaries(int64_t run) const;

  Status putArtifact(int64_t run, const Artifact& artifact);
  Result<std::vector<std::string>> artifactNames(int64_t run) const;
  Result<Artifact> artifact(int64_t run, const std::string& name) const;

  // Profiles: kernel timelines recorded by the profiler, written in batches, read by time range.
  Result<int64_t> createProfile(int64_t run, const std::string& name, int64_t firstStep, int64_t lastStep);
  Result<std::vector<ProfileInfo>> profiles(int64_t run) const;
  // The store's newest profile, of any run (none when nothing was profiled).
  Result<std::optional<ProfileInfo>> latestProfile() const;
  Status addKernelEvents(int64_t profile, const std::vector<KernelEvent>& events);
  // Events overlapping [fromNs, toNs], by start time.
  Result<std::vector<KernelEvent>> kernelEvents(int64_t profile, int64_t fromNs = 0,
                                                int64_t toNs = INT64_MAX) const;
  // The earliest start of a profile's launches (an index lookup); nullopt when it has none.
  Result<std::optional<int64_t>> firstKernelStart(int64_t profile) const;
  // How many launches a profile recorded (counted by SQLite).
  Result<int64_t> kernelEventCount(int64_t profile) const;
  // Calls `row` for each event of a profile, in no particular order, without holding them all: export and
  // summaries of profiles of any size. `row` may stop the walk by returning an error.
  Status eachKernelEvent(int64_t profile, const std::function<Status(const KernelEvent&)>& row) const;
  // Builds a profile's levels of detail (profileWindow's buckets) from its events, replacing any built before.
  // `progress` gets the fraction of events read (0..1). The profile writer calls it once its events are in.
  Status buildProfileLevels(int64_t profile, const std::function<void(double)>& progress = {});
  // The profile's rows and levels; nullopt when they were never built (a profile written before schema 6).
  Result<std::optional<ProfileSummary>> profileSummary(int64_t profile) const;
  // The launches overlapping [fromNs, toNs] (start <= toNs and end >= fromNs) when no more than maxEvents start
  // in it (by the levels' counts), else the level whose buckets are at most nsPerPx wide (the coarsest such; the
  // finest level when every level is wider), over the same window. Reads only what the window holds: each span
  // class (launches of 16^(c-1) to 16^c ns) is one index range start in (fromNs - 16^c, toNs].
  Result<ProfileWindow> profileWindow(const ProfileSummary& summary, int64_t fromNs, int64_t toNs, double nsPerPx,
                                      int64_t maxEvents) const;
  // The launches overlapping [fromNs, toNs) (start < toNs and end > fromNs) summed by SQLite per name and
  // fusion: their count, their time inside the range, their work. Reads only the range (the span classes).
  struct KernelTotal {
    std::string name;
    int64_t fusion = -1;
    int64_t count = 0;
    int64_t insideNs = 0;
    double flops = 0, bytes = 0;
  };
  Result<std::vector<KernelTotal>> kernelTotals(int64_t profile, int64_t fromNs, int64_t toNs) const;
  // The kernel table of a profile (what its events' fusion ids mean), by fusion id.
  Status addProfileKernels(int64_t profile, const std::vector<KernelInfo>& kernels);
  Result<std::vector<KernelInfo>> profileKernels(int64_t profile) const;
  // Step marks, by start time.
  Status addProfileMarks(int64_t profile, const std::vector<ProfileMarkInfo>& marks);
  Result<std::vector<ProfileMarkInfo>> profileMarks(int64_t profile) const;
  // Live buffer bytes over the profile, by time (none in stores from before schema 5).
  Status addProfileMemory(int64_t profile, const std::vector<MemorySampleInfo>& samples);
  Result<std::vector<MemorySampleInfo>> profileMemory(int64_t profile) const;
  // The devices of a profile with their ranks and clock offsets (none before schema 7, or when not recorded).
  Status addProfileDevices(int64_t profile, const std::vector<ProfileDeviceInfo>& devices);
  Result<std::vector<ProfileDeviceInfo>> profileDevices(int64_t profile) const;
  // The collectives' launches, by (seq, group, device) (none before schema 7).
  Status addProfileCollectives(int64_t profile, const std::vector<CollectiveLaunch>& launches);
  Result<std::vector<CollectiveLaunch>> profileCollectives(int64_t profile) const;

  // Every run, archived ones included (RunInfo::archived says which).
  Result<std::vector<RunInfo>> runs() const;
  Result<RunInfo> run(int64_t id) const;
  // Deletes the run and everything it logged, in one statement (the tables cascade), so all of it or none (its
  // checkpoint folder is the caller's: train::deleteRunAndCheckpoints).
  Status deleteRun(int64_t id);
  Status renameRun(int64_t id, const std::string& name);
  Status setNotes(int64_t id, const std::string& notes);
  Status addTags(int64_t id, const std::vector<std::string>& tags);
  Status removeTags(int64_t id, const std::vector<std::string>& tags);
  // The run's tags become exactly `tags`, in one transaction: another connection sees the old tags or the new
  // ones, and a failure leaves the old ones.
  Status setTags(int64_t id, const std::vector<std::string>& tags);
  Status setArchived(int64_t id, bool archived);

  const std::string& path() const { return m_path; }

 private:
  RunStore(sqlite3* db, std::string path) : m_db(db), m_path(std::move(path)) {}
  Status exec(const std::string& sql) const;
  Status execWhileBusy(const std::string& sql) const;
  // Runs body inside BEGIN IMMEDIATE/COMMIT; an error rolls everything back. Every body writes: the write lock is
  // taken (waited for, up to the limit) before the body runs, so a body may read what it then changes, where a
  // deferred transaction that read first fails at its first write, without waiting, while another connection
  // writes (SQLITE_BUSY), or once another connection has written since its read (SQLITE_BUSY_SNAPSHOT).
  Status transaction(const std::function<Status()>& body);
  Status migrate();
  Result<int> readSchemaVersion() const;  // PRAGMA user_version, or SQLite's error
  std::string runColumns() const;
  Result<std::vector<std::string>> tagsOf(int64_t run) const;
  // One UPDATE or DELETE of run `id`; an error when no run has that id.
  Status updateRun(int64_t id, const char* sql, const std::function<void(Stmt&)>& bind);
  Status eachTag(int64_t id, const char* sql, const std::vector<std::string>& tags);

  sqlite3* m_db = nullptr;
  std::string m_path;
};

}  // namespace tsr::store
