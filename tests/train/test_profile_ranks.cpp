// A profile of a step sharded over 4 virtual CPU devices (a 2x2 mesh: data parallel pairs of tensor-parallel
// pairs): every device is its own row group of one process, on one clock; each collective launch carries its
// number on its device and its group, so that every call has exactly its group's members, each device numbers
// the same calls, and the store gives back the same calls. Waits are measured, so only their invariants are
// checked here (the straggler waits 0, every other member straggler's arrival - its own).
#include "tests/check.h"

#include <map>
#include <set>

#include "engine/store/collective_instances.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;

TEST_CASE("virtualDevicesProfileLinksCollectives") {
  test::TempDir dir;
  const std::string toml =
      "[model]\nfamily = \"mlp\"\nsizes = [16, 32, 32, 4]\n[data]\nkind = \"synthetic-digits\"\n"
      "[train]\nbatch_size = 32\nsteps = 3\noptimizer = \"adamw\"\nloss = \"mse\"\n"
      "[mesh]\nshape = [2, 2]\naxes = [\"data\", \"model\"]\n"
      "[sharding]\n'layers\\.0\\.weight' = \"None, model\"\n'layers\\.0\\.bias' = \"model\"\n"
      "'layers\\.1\\.weight' = \"model, None\"\n";
  auto p = test::writeProject(dir.path(), toml);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  train::ProfileOptions o;
  o.steps = 2;
  o.storePath = dir.path() + "/runs.db";
  auto report = train::profileTraining(*p, o);
  REQUIRE_MESSAGE(report.ok(), report.error().message);
  const runtime::Trace& t = report->trace;

  // Four devices of one process, one clock.
  REQUIRE(t.devices.size() == 4);
  for (const auto& d : t.devices) {
    TSR_COMPARE(d.rank, 0);
    TSR_COMPARE(d.offsetNs, int64_t{0});
    TSR_COMPARE(d.errorNs, int64_t{0});
  }

  // Each device numbers its collectives 0, 1, 2, ... and all four number the same count.
  std::map<std::string, std::vector<int64_t>> seqs;
  for (const auto& e : t.events)
    if (e.collective >= 0) seqs[e.device].push_back(e.collective);
  REQUIRE(seqs.size() == 4);
  for (auto& entry : seqs) {
    const auto device = entry.first;  // clang 14 captures no structured binding (the message)
    auto& s = entry.second;
    std::sort(s.begin(), s.end());
    for (size_t i = 0; i < s.size(); ++i) REQUIRE_MESSAGE(s[i] == static_cast<int64_t>(i), device << " call " << i);
    TSR_COMPARE(s.size(), seqs.begin()->second.size());
  }

  std::vector<store::CollectiveInstance> calls = store::collectiveInstances(train::collectiveLaunches(t));
  REQUIRE(!calls.empty());
  std::set<std::string> groups;
  for (const auto& c : calls) {
    groups.insert(c.group);
    REQUIRE_MESSAGE(c.complete, "call " << c.seq << " over " << c.group);
    TSR_COMPARE(c.members.size(), store::parseGroup(c.group).size());
    const int64_t last = c.members[static_cast<size_t>(c.straggler)].arrivalNs;
    TSR_COMPARE(c.members[static_cast<size_t>(c.straggler)].waitNs, int64_t{0});
    for (const auto& m : c.members) {
      REQUIRE(m.arrivalNs <= last);
      TSR_COMPARE(m.waitNs, last - m.arrivalNs);
      // A member cannot finish before the straggler arrived: the call needs every member's data.
      REQUIRE_MESSAGE(m.endNs >= last, "call " << c.seq << ": " << m.device << " ended before the straggler came");
    }
  }
  // Tensor-parallel pairs and data-parallel pairs of the 2x2 mesh: more than one group.
  MESSAGE(calls.size() << " calls over " << groups.size() << " groups");
  REQUIRE(groups.size() >= 2);

  // The store gives back the same calls.
  auto db = store::RunStore::openReadOnly(o.storePath);
  REQUIRE(db.ok());
  auto stored = store::collectiveInstances(*db, report->profileId);
  REQUIRE_MESSAGE(stored.ok(), stored.error().message);
  REQUIRE(stored->size() == calls.size());
  for (size_t i = 0; i < calls.size(); ++i) REQUIRE((*stored)[i].members == calls[i].members);
  auto devices = db->profileDevices(report->profileId);
  REQUIRE(devices.ok());
  TSR_COMPARE(devices->size(), size_t{4});
}
