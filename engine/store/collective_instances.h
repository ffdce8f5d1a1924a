#pragma once
// The collectives of a profile across devices: each call (the seq-th collective of every member of one group)
// with every member's arrival (its launch's start on rank 0's clock), end and wait. The straggler is the member
// that arrived last: the call could not complete before it came, so each other member waited
//
//   wait = straggler's arrival - its own arrival
//
// (the straggler's own wait is 0). `tessera profile` lists the worst calls by wait; the Timeline links the
// members' spans and marks the straggler.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/store/run_store.h"

namespace tsr::store {

struct CollectiveMember {
  std::string device;
  int64_t arrivalNs = 0;  // its launch's start
  int64_t endNs = 0;
  int64_t waitNs = 0;     // straggler's arrival - arrivalNs
  bool operator==(const CollectiveMember&) const = default;
};

struct CollectiveInstance {
  int64_t seq = 0;
  std::string group;  // "0,1"
  std::string name;   // the kernel's name (its first member's)
  std::vector<CollectiveMember> members;  // in the group's order of devices present
  int straggler = 0;        // index into members: the last to arrive (the first such in member order)
  int64_t maxWaitNs = 0;    // the longest wait: straggler's arrival - the first arrival
  int64_t totalWaitNs = 0;  // summed over the members
  bool complete = false;    // every position of the group has a launch in the profile
};

// Launches grouped into calls, in (seq, group) order.
std::vector<CollectiveInstance> collectiveInstances(const std::vector<CollectiveLaunch>& launches);
Result<std::vector<CollectiveInstance>> collectiveInstances(const RunStore& db, int64_t profile);
// The calls with the longest waits first (ties: earlier first), at most `top`.
std::vector<CollectiveInstance> worstByWait(std::vector<CollectiveInstance> instances, size_t top);

// "0,1,3" for a group, and back (an empty list for text that is not one).
std::string groupText(const std::vector<int>& group);
std::vector<int> parseGroup(const std::string& text);

}  // namespace tsr::store
