// What the ranks of a GPU program settle before NCCL connects them, without a GPU or NCCL: which GPU each local
// device takes, how a collective's groups map to NCCL communicators (gpt2_tp's 'data' and 'model' pairs on its
// 2x2 mesh), the records exchanged over the host communicator (4 in-process devices standing in for 4 ranks),
// the check that no two ranks share a GPU, and where a GPU program's collectives run.
#include "tests/check.h"

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backends/cuda/device.h"
#include "engine/backends/cuda/nccl_bootstrap.h"
#include "engine/dist/communicator.h"

using namespace tsr;
using namespace tsr::cuda;

TEST_CASE("gpuPerLocalRank") {
  struct Row {
    const char* name;
    GpuChoice choice;
    int want;
  };
  const Row rows[] = {
      {"one process", {std::nullopt, -1, 0, 8}, 0},
      {"local rank 3 of 4 GPUs", {std::nullopt, 3, 0, 4}, 3},
      {"local rank 5 wraps on 4 GPUs", {std::nullopt, 5, 0, 4}, 1},
      {"a rank that sees one GPU (CUDA_VISIBLE_DEVICES per rank)", {std::nullopt, 3, 0, 1}, 0},
      {"TESSERA_CUDA_DEVICE wins over the local rank", {std::string("2"), 1, 0, 4}, 2},
      {"virtual devices take consecutive GPUs", {std::nullopt, -1, 2, 4}, 2},
      {"virtual devices from TESSERA_CUDA_DEVICE, wrapping", {std::string("3"), -1, 1, 4}, 0},
  };
  for (const Row& r : rows) {
    SUBCASE(r.name) {
      auto gpu = chooseGpu(r.choice);
      REQUIRE_MESSAGE(gpu.ok(), gpu.error().message);
      TSR_COMPARE(*gpu, r.want);
    }
  }
}

TEST_CASE("gpuChoiceErrors") {
  for (const char* bad : {"4", "-1", "x", "1x", ""}) {
    auto gpu = chooseGpu(GpuChoice{std::string(bad), 0, 0, 4});
    REQUIRE_MESSAGE(!gpu.ok(), "TESSERA_CUDA_DEVICE='" << bad << "' gave GPU " << *gpu);
    REQUIRE_MESSAGE(gpu.error().message.find("TESSERA_CUDA_DEVICE") != std::string::npos, gpu.error().message);
    REQUIRE_MESSAGE(gpu.error().message.find("sees 4") != std::string::npos, gpu.error().message);
  }
  REQUIRE(!chooseGpu(GpuChoice{std::nullopt, 0, 0, 0}).ok());
}

// gpt2_tp's mesh: Mesh('data': 2, 'model': 2) over devices 0..3, device = 2 * data + model. An all_reduce over
// 'model' has groups [0,1], [2,3]; over 'data' [0,2], [1,3]; the gradient norm's over both axes one group.
TEST_CASE("groupsToCommunicators") {
  struct Row {
    const char* name;
    std::vector<int64_t> groups;
    int64_t size;
    int self;
    GroupPlan want;
  };
  const Row rows[] = {
      {"model pairs, device 3", {0, 1, 2, 3}, 2, 3, {{0, 1, 2, 3}, true, 1, 1}},
      {"model pairs, device 0", {0, 1, 2, 3}, 2, 0, {{0, 1, 2, 3}, true, 0, 0}},
      {"data pairs, device 1", {0, 2, 1, 3}, 2, 1, {{0, 1, 2, 3}, true, 1, 0}},
      {"data pairs, device 2", {0, 2, 1, 3}, 2, 2, {{0, 1, 2, 3}, true, 0, 1}},
      {"the whole mesh in order: no split", {0, 1, 2, 3}, 4, 2, {{0, 1, 2, 3}, false, 0, 2}},
      {"the whole mesh reordered: a split of one group", {2, 0, 3, 1}, 4, 0, {{0, 1, 2, 3}, true, 0, 1}},
      {"a sub-mesh (devices 4..7 of 8)", {4, 6, 5, 7}, 2, 7, {{4, 5, 6, 7}, true, 1, 1}},
      {"one rank", {0}, 1, 0, {{0}, false, 0, 0}},
  };
  for (const Row& r : rows) {
    SUBCASE(r.name) {
      auto plan = planGroup(r.groups, r.size, r.self);
      REQUIRE_MESSAGE(plan.ok(), plan.error().message);
      TSR_COMPARE(plan->members, r.want.members);
      TSR_COMPARE(plan->split, r.want.split);
      if (r.want.split) TSR_COMPARE(plan->color, r.want.color);
      TSR_COMPARE(plan->key, r.want.key);
    }
  }
  REQUIRE(!planGroup(std::vector<int64_t>{0, 1, 2, 3}, 2, 5).ok());   // in no group
  REQUIRE(!planGroup(std::vector<int64_t>{0, 1, 2}, 2, 0).ok());      // not pairs
  REQUIRE(!planGroup(std::vector<int64_t>{0, 1, 1, 3}, 2, 0).ok());   // a device twice
}

namespace {

RankRecord fakeRecord(int position, const std::string& host, int gpu, int gpus) {
  RankRecord r;
  r.position = position;
  setText(r.host, host);
  r.gpu = gpu;
  r.gpus = gpus;
  r.gpuUuid.fill(static_cast<uint8_t>(0xa0 + gpu));  // one UUID per GPU of a host
  return r;
}

}  // namespace

// Four in-process devices stand in for four ranks: device 0 brings the unique id, every device gets every record
// in member order, for the whole mesh and for a group of two.
TEST_CASE("recordsExchangedInMemberOrder") {
  auto comm = dist::makeInProcessCommunicator(4);
  std::mutex mutex;
  std::vector<std::vector<RankRecord>> seen(4), pairSeen(4);
  Status st = dist::runOnDevices(*comm, [&](int position) -> Status {
    const std::vector<int> all = {0, 1, 2, 3};
    RankRecord mine = fakeRecord(position, "node" + std::to_string(position / 2), position % 2, 2);
    if (position == 0)
      for (size_t i = 0; i < kNcclIdBytes; ++i) mine.uniqueId[i] = static_cast<char>(i * 7 + 1);
    TSR_ASSIGN(std::vector<RankRecord> records, exchangeRecords(*comm, position, all, mine));
    TSR_TRY(checkOneGpuPerRank(records));
    std::vector<RankRecord> pair;
    if (position == 1 || position == 3) {
      const std::vector<int> members = {3, 1};
      TSR_ASSIGN(pair, exchangeRecords(*comm, position, members, mine));
    }
    std::lock_guard lock(mutex);
    seen[static_cast<size_t>(position)] = std::move(records);
    pairSeen[static_cast<size_t>(position)] = std::move(pair);
    return {};
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  for (int p = 0; p < 4; ++p) {
    const auto& records = seen[static_cast<size_t>(p)];
    REQUIRE(records.size() == 4);
    for (int m = 0; m < 4; ++m) {
      TSR_COMPARE(records[static_cast<size_t>(m)].position, m);
      TSR_COMPARE(textOf(records[static_cast<size_t>(m)].host), "node" + std::to_string(m / 2));
    }
    for (size_t i = 0; i < kNcclIdBytes; ++i) REQUIRE(records[0].uniqueId[i] == static_cast<char>(i * 7 + 1));
  }
  for (int p : {1, 3}) {
    const auto& pair = pairSeen[static_cast<size_t>(p)];
    REQUIRE(pair.size() == 2);
    TSR_COMPARE(pair[0].position, 3);
    TSR_COMPARE(pair[1].position, 1);
  }
}

// A member that cannot take part (no GPU, no NCCL id) says why in its record: every member fails with it, none
// is left waiting.
TEST_CASE("aMembersFailureReachesEveryone") {
  auto comm = dist::makeInProcessCommunicator(3);
  std::mutex mutex;
  std::vector<std::string> errors(3);
  Status st = dist::runOnDevices(*comm, [&](int position) -> Status {
    RankRecord mine = fakeRecord(position, "node", position, 3);
    if (position == 2) setText(mine.error, "no CUDA GPU: the driver reports no device");
    const std::vector<int> all = {0, 1, 2};
    auto records = exchangeRecords(*comm, position, all, mine);
    std::lock_guard lock(mutex);
    errors[static_cast<size_t>(position)] = records.ok() ? "" : records.error().message;
    return {};
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  for (const std::string& e : errors) {
    REQUIRE_MESSAGE(e.find("rank 2") != std::string::npos, e);
    REQUIRE_MESSAGE(e.find("no CUDA GPU") != std::string::npos, e);
  }
}

TEST_CASE("ranksSharingAGpuAreRefused") {
  // 4 ranks on one machine with 2 GPUs: local ranks 0..3 take GPUs 0, 1, 0, 1.
  std::vector<RankRecord> records;
  for (int r = 0; r < 4; ++r) {
    auto gpu = chooseGpu(GpuChoice{std::nullopt, r, 0, 2});
    REQUIRE(gpu.ok());
    records.push_back(fakeRecord(r, "gpu-node", *gpu, 2));
  }
  records[3].localRanks = 4;
  Status st = checkOneGpuPerRank(records);
  REQUIRE(!st.ok());
  const std::string& e = st.error().message;
  for (const char* part : {"ranks 0 and 2", "GPU 0 of gpu-node", "2 GPUs there for 4 ranks", "at most 2 ranks",
                           "TESSERA_CUDA_DEVICE", "TESSERA_NCCL=off"})
    REQUIRE_MESSAGE(e.find(part) != std::string::npos, "'" << part << "' not in: " << e);

  // The same GPU numbers on two machines are two GPUs each.
  std::vector<RankRecord> twoHosts = {fakeRecord(0, "a", 0, 1), fakeRecord(1, "b", 0, 1)};
  twoHosts[1].gpuUuid.fill(0x11);
  Status ok = checkOneGpuPerRank(twoHosts);
  REQUIRE_MESSAGE(ok.ok(), ok.error().message);
}

TEST_CASE("whereCollectivesRun") {
  auto route = [](std::string_view kind, bool wanted, bool built) { return collectiveRoute(kind, wanted, built); };
  TSR_COMPARE(*route("mpi", true, true), CollectiveRoute::Nccl);
  TSR_COMPARE(*route("mpi", false, true), CollectiveRoute::Host);        // TESSERA_NCCL=off
  TSR_COMPARE(*route("in-process", true, true), CollectiveRoute::Host);  // virtual devices of one process
  TSR_COMPARE(*route("in-process", true, false), CollectiveRoute::Host);
  TSR_COMPARE(*route("mpi", false, false), CollectiveRoute::Host);
  auto none = route("mpi", true, false);
  REQUIRE(!none.ok());
  REQUIRE_MESSAGE(none.error().message.find("no NCCL") != std::string::npos, none.error().message);
  REQUIRE_MESSAGE(none.error().message.find("TESSERA_NCCL=off") != std::string::npos, none.error().message);
}
