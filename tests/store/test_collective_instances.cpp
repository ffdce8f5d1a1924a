// engine/store/collective_instances: a crafted two-rank profile and a four-device one with two groups, whose
// stragglers and waits were worked out by hand; the launches and devices kept by the store (schema 7) read back
// the same; a profile without them reads as none.
#include "tests/check.h"

#include "engine/store/collective_instances.h"
#include "engine/store/run_store.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::store;

namespace {

// Two ranks, two all-reduces. Call 0: rank 0 arrives at 1000, rank 1 at 1750 -> rank 1 straggles, rank 0 waits
// 750. Call 1: rank 1 at 5000, rank 0 at 5200 -> rank 0 straggles, rank 1 waits 200.
std::vector<CollectiveLaunch> twoRanks() {
  return {{"cpu:1", 1, "0,1", "all_reduce f32[64]", 12, 5000, 400},
          {"cpu:0", 0, "0,1", "all_reduce f32[1024]", 11, 1000, 900},
          {"cpu:1", 0, "0,1", "all_reduce f32[1024]", 11, 1750, 150},
          {"cpu:0", 1, "0,1", "all_reduce f32[64]", 12, 5200, 200}};
}

}  // namespace

TEST_CASE("stragglerAndWaitsOfTwoRanks") {
  std::vector<CollectiveInstance> calls = collectiveInstances(twoRanks());
  REQUIRE(calls.size() == 2);
  const CollectiveInstance& c0 = calls[0];
  TSR_COMPARE(c0.seq, int64_t{0});
  TSR_COMPARE(c0.name, std::string("all_reduce f32[1024]"));
  REQUIRE(c0.complete);
  REQUIRE(c0.members.size() == 2);
  TSR_COMPARE(c0.members[0].device, std::string("cpu:0"));
  TSR_COMPARE(c0.members[c0.straggler].device, std::string("cpu:1"));
  TSR_COMPARE(c0.members[0].waitNs, int64_t{750});
  TSR_COMPARE(c0.members[1].waitNs, int64_t{0});
  TSR_COMPARE(c0.members[0].endNs, int64_t{1900});
  TSR_COMPARE(c0.maxWaitNs, int64_t{750});
  const CollectiveInstance& c1 = calls[1];
  TSR_COMPARE(c1.members[c1.straggler].device, std::string("cpu:0"));
  TSR_COMPARE(c1.members[1].waitNs, int64_t{200});
  TSR_COMPARE(c1.totalWaitNs, int64_t{200});
  std::vector<CollectiveInstance> worst = worstByWait(calls, 1);
  REQUIRE(worst.size() == 1);
  TSR_COMPARE(worst[0].seq, int64_t{0});
}

TEST_CASE("groupsOfFourDevicesAreSeparateCalls") {
  // Tensor-parallel pairs {0,1} and {2,3}: call 3 of each pair is its own, with its own straggler. Group order
  // lists 3 before 2, so members come in that order. Device 1's launch of pair {0,1} is missing.
  std::vector<CollectiveLaunch> launches = {{"cpu:0", 3, "0,1", "all_gather", 5, 100, 10},
                                            {"cpu:2", 3, "3,2", "all_gather", 5, 400, 10},
                                            {"cpu:3", 3, "3,2", "all_gather", 5, 250, 10}};
  std::vector<CollectiveInstance> calls = collectiveInstances(launches);
  REQUIRE(calls.size() == 2);
  TSR_COMPARE(calls[0].group, std::string("0,1"));
  REQUIRE(!calls[0].complete);
  TSR_COMPARE(calls[0].maxWaitNs, int64_t{0});
  TSR_COMPARE(calls[1].group, std::string("3,2"));
  REQUIRE(calls[1].complete);
  TSR_COMPARE(calls[1].members[0].device, std::string("cpu:3"));
  TSR_COMPARE(calls[1].members[calls[1].straggler].device, std::string("cpu:2"));
  TSR_COMPARE(calls[1].members[0].waitNs, int64_t{150});
}

TEST_CASE("groupText") {
  TSR_COMPARE(groupText({0, 1, 3}), std::string("0,1,3"));
  TSR_COMPARE(parseGroup("0,1,3"), (std::vector<int>{0, 1, 3}));
  REQUIRE(parseGroup("0,x").empty());
  REQUIRE(parseGroup("").empty());
}

TEST_CASE("storeKeepsDevicesAndCollectives") {
  test::TempDir dir;
  auto db = RunStore::open(dir.filePath("runs.db"));
  REQUIRE_MESSAGE(db.ok(), db.error().message);
  auto run = db->createRun("profile", "p", "");
  REQUIRE(run.ok());
  auto profile = db->createProfile(*run, "steps 2-3", 2, 3);
  REQUIRE(profile.ok());
  auto other = db->createProfile(*run, "steps 4-4", 4, 4);
  REQUIRE(other.ok());
  std::vector<ProfileDeviceInfo> devices = {{"cpu:0", 0, 0, 0}, {"cpu:1", 1, -3200, 45}};
  REQUIRE(db->addProfileDevices(*profile, devices).ok());
  REQUIRE(db->addProfileCollectives(*profile, twoRanks()).ok());
  auto back = db->profileDevices(*profile);
  REQUIRE(back.ok());
  REQUIRE(*back == devices);
  auto calls = collectiveInstances(*db, *profile);
  REQUIRE(calls.ok());
  REQUIRE(calls->size() == 2);
  TSR_COMPARE((*calls)[0].members[0].waitNs, int64_t{750});
  auto none = collectiveInstances(*db, *other);
  REQUIRE(none.ok());
  REQUIRE(none->empty());
  REQUIRE(db->deleteRun(*run).ok());
  auto gone = db->profileCollectives(*profile);
  REQUIRE(gone.ok());
  REQUIRE(gone->empty());
}
