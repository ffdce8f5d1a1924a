#pragma once
// A profile of the run store read a window at a time, for profiles too large to hold: the Timeline panel asks
// for the window it shows (with a margin) as the user pans and zooms, off the UI thread, and draws the last
// answer meanwhile. An answer is a Timeline with the profile's rows, kernel table and step spans and the
// launches of the window (when few enough are there), or else each row's density: the run store's level of
// detail whose buckets are about a pixel wide (count, busy time and longest launch per bucket).
//
// Memory is bounded by the window: at most kWindowLaunches launches, or two buckets per pixel per row.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/inspect/timeline.h"

namespace tsr::store {
class RunStore;
struct ProfileSummary;
}  // namespace tsr::store

namespace tsr::inspect {

// A window with more launches than this comes as density (the queries stay under a frame: bench_profile_store).
constexpr int64_t kWindowLaunches = 6000;
// Profiles with at most this many launches are read whole (loadProfileTimeline): every view works on all of
// them at once and a frame folds them itself.
constexpr int64_t kWholeProfileLaunches = 500'000;

// One bucket of a row's density.
struct DensityBucket {
  float busy = 0;      // the share of the bucket's time that launches cover, 0..1
  int32_t count = 0;   // launches that start in it
  int32_t kernel = -1; // its longest launch's kernel (index into Timeline::kernels), -1: none
};

struct TimelineWindow {
  std::shared_ptr<const Timeline> timeline;  // times in ns from the profile's start, as a whole timeline's
  int64_t fromNs = 0, toNs = 0;              // what the answer covers
  double nsPerPx = 0;                        // the scale it was asked for
  bool raw = true;                           // timeline->events are every launch of [fromNs, toNs]
  int64_t launches = 0;                      // launches starting in the window (raw: exact; else from the levels)
  // Density (raw == false): bucket i of row r covers [firstNs + i * bucketNs, + bucketNs).
  int64_t bucketNs = 0, firstNs = 0;
  std::vector<std::vector<DensityBucket>> density;  // per row of timeline->rows

  // Whether this answer serves a view of [startNs, endNs] at nsPerPx: it covers the view, and its density (if
  // that is what it holds) is within a factor of two of the view's scale.
  bool serves(double startNs, double endNs, double viewNsPerPx) const;
};

class ProfileWindows {
 public:
  ~ProfileWindows();
  // The profile `profileId` of the store at dbPath (0: the latest). A profile written before the store had
  // levels of detail gets them now (the store is migrated and they are built once: progress 0..1).
  static Result<std::shared_ptr<ProfileWindows>> open(const std::string& dbPath, int64_t profileId = 0,
                                                      const std::function<void(double)>& progress = {});
  int64_t launches() const;
  int64_t profileId() const { return m_profile; }
  // The window [fromNs, toNs] (ns from the profile's start) at nsPerPx. Safe to call from one thread at a time.
  Result<TimelineWindow> window(double fromNs, double toNs, double nsPerPx, int64_t maxLaunches = kWindowLaunches) const;
  // The whole profile, fitted to widthPx pixels: what the panel shows first.
  Result<TimelineWindow> whole(double widthPx) const;
  // Per kernel name over [fromNs, toNs), as rangeStats() computes it on a whole timeline, summed by SQLite over
  // the launches of the range only.
  Result<RangeStats> rangeStats(int64_t fromNs, int64_t toNs) const;

 private:
  ProfileWindows() = default;
  std::unique_ptr<store::RunStore> m_db;
  std::unique_ptr<store::ProfileSummary> m_summary;
  int64_t m_profile = 0;
  int64_t m_origin = 0;      // store ns of the timeline's 0
  std::shared_ptr<const Timeline> m_skeleton;  // rows, kernels, spans; no launches
  std::vector<int> m_rowOf;  // summary row -> timeline row
  std::vector<store::CollectiveInstance> m_collectives;  // every call of the profile (a few per kernel of a step)
  std::vector<std::pair<std::string, int>> m_ranks;      // device -> rank of its process
};

// What the Timeline panel opens: the profile read whole when it has at most kWholeProfileLaunches launches,
// else read a window at a time (windows and the first window, the whole profile fitted to widthPx).
struct OpenedProfile {
  std::shared_ptr<const Timeline> whole;
  std::shared_ptr<ProfileWindows> windows;
  std::shared_ptr<const TimelineWindow> first;
  const std::shared_ptr<const Timeline>& timeline() const { return first ? first->timeline : whole; }
};
Result<OpenedProfile> openProfile(const std::string& dbPath, int64_t profileId, double widthPx,
                                  const std::function<void(double)>& progress = {},
                                  int64_t wholeBelow = kWholeProfileLaunches);

}  // namespace tsr::inspect
