// What 2 ranks started by mpirun settle before NCCL connects them, over the MPI communicator and with mpirun's
// own environment, with NCCL and the GPUs stubbed (CTest runs this under mpirun -np 2; no GPU is needed): each
// rank's GPU from its local rank; the bootstrap records all-gathered in member order (both orders), rank 0's
// unique id reaching rank 1 byte for byte; two GPUs for two ranks accepted, one GPU for both refused with the
// error naming the ranks; a rank that cannot take part failing both.
// Exits 0 when every check passes on every rank, 1 otherwise, 77 (CTest's skip) when not started by mpirun.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/backends/cuda/device.h"
#include "engine/backends/cuda/nccl_bootstrap.h"
#include "engine/core/env_options.h"
#include "engine/dist/communicator.h"

using namespace tsr;
using namespace tsr::cuda;

namespace {

int g_rank = 0;
int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: %s\n", g_rank, what.c_str());
}

// This rank's record as a rank on a machine with `gpus` GPUs makes it: the GPU its local rank gives, that GPU's
// UUID (one per GPU number), rank 0's unique id.
RankRecord record(int rank, int gpus) {
  RankRecord r;
  r.position = rank;
  auto gpu = chooseGpu(GpuChoice{std::nullopt, envOptions().localRank, 0, gpus});
  expect(gpu.ok(), gpu.ok() ? "" : gpu.error().message);
  r.gpu = gpu.ok() ? *gpu : -1;
  r.gpus = gpus;
  r.localRanks = envOptions().localRanks;
  setText(r.host, "node");
  r.gpuUuid.fill(static_cast<uint8_t>(0x40 + r.gpu));
  if (rank == 0)
    for (size_t i = 0; i < kNcclIdBytes; ++i) r.uniqueId[i] = static_cast<char>(255 - i);
  return r;
}

}  // namespace

int main() {
  if (!dist::launchedUnderMpi()) {
    std::printf("mpi_nccl_bootstrap_check: not started by mpirun; run it as: mpirun -np 2 mpi_nccl_bootstrap_check\n");
    return 77;
  }
  auto made = dist::makeMpiCommunicator();
  if (!made.ok()) {
    std::fprintf(stderr, "mpi_nccl_bootstrap_check: %s\n", made.error().message.c_str());
    return 1;
  }
  dist::Communicator& comm = **made;
  const int r = comm.localDevices().at(0);
  g_rank = r;
  if (comm.numDevices() != 2) {
    std::fprintf(stderr, "mpi_nccl_bootstrap_check: needs 2 ranks, got %d\n", comm.numDevices());
    return 1;
  }
  // mpirun on one machine: the local rank is the rank, and there are 2 ranks here.
  expect(envOptions().localRank == r, "local rank " + std::to_string(envOptions().localRank));
  expect(envOptions().localRanks == 2, "local ranks " + std::to_string(envOptions().localRanks));

  // Two GPUs: ranks 0 and 1 take GPUs 0 and 1; every member gets both records in member order.
  const std::vector<int> both = {0, 1}, reversed = {1, 0};
  auto records = exchangeRecords(comm, r, both, record(r, 2));
  expect(records.ok(), records.ok() ? "" : records.error().message);
  if (records.ok()) {
    expect(records->size() == 2 && (*records)[0].position == 0 && (*records)[1].position == 1, "records in order");
    expect((*records)[0].gpu == 0 && (*records)[1].gpu == 1, "GPUs by local rank");
    bool same = true;
    for (size_t i = 0; i < kNcclIdBytes; ++i) same = same && (*records)[0].uniqueId[i] == static_cast<char>(255 - i);
    expect(same, "rank 0's unique id arrived changed");
    Status st = checkOneGpuPerRank(*records);
    expect(st.ok(), st.ok() ? "" : st.error().message);
  }
  auto flipped = exchangeRecords(comm, r, reversed, record(r, 2));
  expect(flipped.ok() && (*flipped)[0].position == 1 && (*flipped)[1].position == 0, "records in member order [1,0]");

  // One GPU for two ranks: both land on GPU 0, and both refuse it, naming the ranks and the count.
  auto shared = exchangeRecords(comm, r, both, record(r, 1));
  expect(shared.ok(), shared.ok() ? "" : shared.error().message);
  if (shared.ok()) {
    Status st = checkOneGpuPerRank(*shared);
    expect(!st.ok(), "two ranks on one GPU were accepted");
    if (!st.ok())
      expect(st.error().message.find("ranks 0 and 1 both run on GPU 0 of node (1 GPUs there for 2 ranks)") !=
                 std::string::npos,
             "unexpected message: " + st.error().message);
  }

  // Rank 1 cannot take part: both fail with its reason.
  RankRecord mine = record(r, 2);
  if (r == 1) setText(mine.error, "no CUDA GPU: the driver reports no device");
  auto failed = exchangeRecords(comm, r, both, mine);
  expect(!failed.ok() && failed.error().message.find("rank 1 could not take part: no CUDA GPU") != std::string::npos,
         failed.ok() ? "rank 1's failure was not reported" : "unexpected message: " + failed.error().message);

  // Every rank's verdict.
  int32_t mineFailed = g_failures > 0 ? 1 : 0, anyFailed = 0;
  Status st = comm.allReduce(r, both, &mineFailed, &anyFailed, 1, DType::I32);
  if (!st.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", r, st.error().message.c_str());
    return 1;
  }
  if (r == 0) std::printf("mpi_nccl_bootstrap_check: %s\n", anyFailed ? "FAILED" : "ok");
  return anyFailed ? 1 : 0;
}
