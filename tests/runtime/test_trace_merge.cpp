// engine/runtime/trace_merge: a rank's trace survives its bytes unchanged, and merging puts its launches on rank
// 0's clock by the offset given (times worked out by hand), keeps each rank's steps and memory as that rank's,
// shares equal kernel table entries and renumbers clashing ones.
#include "tests/check.h"

#include "engine/runtime/trace_merge.h"

using namespace tsr;
using namespace tsr::runtime;

namespace {

FusionInfo kernel(int64_t id, const std::string& name, std::vector<int> nodes) {
  return {id, "train_step", name, "loop", nodes, std::vector<std::string>(nodes.size(), "add"), "h.0"};
}

ProfileEvent event(const std::string& device, const std::string& name, int64_t fusion, int64_t start, int64_t dur,
                   int64_t collective = -1, std::vector<int> group = {}) {
  ProfileEvent e;
  e.device = device;
  e.name = name;
  e.fusion = fusion;
  e.startNs = start;
  e.durationNs = dur;
  e.flops = 1e3;
  e.bytes = 64;
  e.collective = collective;
  e.group = std::move(group);
  return e;
}

bool sameEvent(const ProfileEvent& a, const ProfileEvent& b) {
  return a.device == b.device && a.stream == b.stream && a.name == b.name && a.fusion == b.fusion &&
         a.startNs == b.startNs && a.durationNs == b.durationNs && a.flops == b.flops && a.bytes == b.bytes &&
         a.collective == b.collective && a.group == b.group;
}

}  // namespace

TEST_CASE("encodeDecodeRoundTrip") {
  Trace t;
  t.events = {event("cpu:1", "fusion.3 loop[add]", 3, 1000, 50), event("cpu:1", "all_reduce", 4, 1100, 900, 0, {0, 1})};
  t.events[1].stream = 2;
  t.marks = {{"step 2", 900, 5000, 3}};
  t.kernels = {kernel(3, "fusion.3 loop[add]", {1, 2}), kernel(4, "all_reduce", {7})};
  t.memory = {{950, 4096, 0}, {1200, 8192, 2}};
  t.devices = {{"cpu:1", 1, -250, 12}};
  auto back = decodeTrace(encodeTrace(t));
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  REQUIRE(back->events.size() == 2);
  for (size_t i = 0; i < 2; ++i) REQUIRE(sameEvent(back->events[i], t.events[i]));
  REQUIRE(back->marks.size() == 1);
  TSR_COMPARE(back->marks[0].name, std::string("step 2"));
  TSR_COMPARE(back->marks[0].rank, 3);
  REQUIRE(back->kernels.size() == 2);
  TSR_COMPARE(back->kernels[0].nodes, (std::vector<int>{1, 2}));
  TSR_COMPARE(back->kernels[1].ops, std::vector<std::string>{"add"});
  REQUIRE(back->memory.size() == 2);
  TSR_COMPARE(back->memory[1].bytes, int64_t{8192});
  TSR_COMPARE(back->memory[1].rank, 2);
  REQUIRE(back->devices == t.devices);
}

TEST_CASE("decodeRefusesDamagedBytes") {
  Trace t;
  t.events = {event("cpu:1", "fusion.3", 3, 1000, 50)};
  std::string bytes = encodeTrace(t);
  for (size_t cut : {size_t{0}, size_t{3}, size_t{9}, bytes.size() - 1}) REQUIRE(!decodeTrace(bytes.substr(0, cut)).ok());
  std::string huge = bytes;
  huge[4] = '\x7f';  // an event count far beyond the bytes left
  REQUIRE(!decodeTrace(huge).ok());
}

TEST_CASE("mergeShiftsOntoRankZerosClock") {
  // Rank 0 ran kernel 3 at 1000 and entered the all-reduce at 1100. Rank 1's clock is 5000 ns ahead of rank 0's
  // (offset +5000): its times 6050 and 6400 are 1050 and 1400 on rank 0's clock.
  Trace rank0;
  rank0.events = {event("cpu:0", "fusion.3", 3, 1000, 50), event("cpu:0", "all_reduce", 4, 1100, 400, 0, {0, 1})};
  rank0.kernels = {kernel(3, "fusion.3", {1, 2}), kernel(4, "all_reduce", {7})};
  rank0.marks = {{"step 2", 900, 700}};
  rank0.memory = {{1000, 64}, {1300, 128}};
  setDeviceClocks(rank0, 0, 0, 0);
  Trace rank1;
  // Kernel 3 is the same on rank 1; its id 4 is another kernel here (a clash), and 9 is new.
  rank1.events = {event("cpu:1", "fusion.3", 3, 6050, 60), event("cpu:1", "other", 4, 6100, 10),
                  event("cpu:1", "all_reduce", 9, 6400, 100, 0, {0, 1})};
  rank1.kernels = {kernel(3, "fusion.3", {1, 2}), kernel(4, "other", {8}), kernel(9, "all_reduce", {7})};
  rank1.marks = {{"step 2", 5900, 800}};
  rank1.memory = {{6000, 1}};
  mergeRankTrace(rank0, rank1, 1, 5000, 20);

  REQUIRE(rank0.events.size() == 5);
  TSR_COMPARE(rank0.events[2].startNs, int64_t{1050});
  TSR_COMPARE(rank0.events[3].startNs, int64_t{1100});
  TSR_COMPARE(rank0.events[4].startNs, int64_t{1400});
  TSR_COMPARE(rank0.events[4].durationNs, int64_t{100});
  TSR_COMPARE(rank0.events[4].collective, int64_t{0});
  // The straggler of call 0 is rank 1 (1400 > 1100): rank 0 waited 300 ns.
  TSR_COMPARE(rank0.events[4].startNs - rank0.events[1].startNs, int64_t{300});
  // Fusion ids: 3 shared, 4 of rank 1 renumbered above every id of both sides (10), 9 kept.
  TSR_COMPARE(rank0.events[2].fusion, int64_t{3});
  TSR_COMPARE(rank0.events[3].fusion, int64_t{10});
  TSR_COMPARE(rank0.events[4].fusion, int64_t{9});
  REQUIRE(rank0.kernels.size() == 4);
  REQUIRE(rank0.kernel(10) != nullptr);
  TSR_COMPARE(rank0.kernel(10)->name, std::string("other"));
  TSR_COMPARE(rank0.kernel(4)->name, std::string("all_reduce"));
  // Rank 1's step (5900 - 5000 = 900) and memory sample (6000 - 5000 = 1000) join rank 0's as its own, in time
  // order; both devices with their ranks and clocks.
  REQUIRE(rank0.marks.size() == 2);
  TSR_COMPARE(rank0.marks[0].startNs, int64_t{900});
  TSR_COMPARE(rank0.marks[0].rank, 0);
  TSR_COMPARE(rank0.marks[1].startNs, int64_t{900});
  TSR_COMPARE(rank0.marks[1].durationNs, int64_t{800});
  TSR_COMPARE(rank0.marks[1].rank, 1);
  REQUIRE(rank0.memory.size() == 3);
  TSR_COMPARE(rank0.memory[0].rank, 0);
  TSR_COMPARE(rank0.memory[1].tNs, int64_t{1000});
  TSR_COMPARE(rank0.memory[1].bytes, int64_t{1});
  TSR_COMPARE(rank0.memory[1].rank, 1);
  TSR_COMPARE(rank0.memory[2].tNs, int64_t{1300});
  REQUIRE(rank0.devices == (std::vector<DeviceClock>{{"cpu:0", 0, 0, 0}, {"cpu:1", 1, 5000, 20}}));
}
