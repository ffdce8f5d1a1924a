// The MPI communicator on 2 ranks (CTest runs this under mpirun -np 2): each collective against values worked
// out by hand, groups in both orders, a group of one, in-place all-reduce, runOnDevices on the MPI
// communicator, and all-reduce bits equal to the in-process communicator's on the same random data.
// Exits 0 when every check passes, 1 otherwise, 77 (CTest's skip) when not started by mpirun.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/dist/communicator.h"

using namespace tsr;
using namespace tsr::dist;

namespace {

int g_rank = 0;
int g_failures = 0;
int g_checks = 0;

template <class T>
void expect(const char* what, const std::vector<T>& got, const std::vector<T>& want) {
  ++g_checks;
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0) return;
  ++g_failures;
  std::string g, w;
  for (const T& v : got) g += std::to_string(static_cast<double>(v)) + " ";
  for (const T& v : want) w += std::to_string(static_cast<double>(v)) + " ";
  std::fprintf(stderr, "rank %d: %s: got [%s], expected [%s]\n", g_rank, what, g.c_str(), w.c_str());
}

void expectOk(const char* what, const Status& st) {
  ++g_checks;
  if (st.ok()) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, st.error().message.c_str());
}

}  // namespace

int main() {
  if (!launchedUnderMpi()) {
    std::printf("mpi_collectives_check: not started by mpirun; run it as: mpirun -np 2 mpi_collectives_check\n");
    return 77;
  }
  auto made = makeMpiCommunicator();
  if (!made.ok()) {
    std::fprintf(stderr, "mpi_collectives_check: %s\n", made.error().message.c_str());
    return 1;
  }
  Communicator& comm = **made;
  const int r = comm.localDevices().at(0);
  g_rank = r;
  if (comm.numDevices() != 2) {
    std::fprintf(stderr, "mpi_collectives_check: needs 2 ranks, got %d\n", comm.numDevices());
    return 1;
  }
  const std::vector<int> both = {0, 1}, reversed = {1, 0}, alone = {r};
  const int other = 1 - r;

  // all_reduce: rank r holds (r + 1) * [1, 2, 0.5]; the sum is 3 * [1, 2, 0.5] = [3, 6, 1.5].
  {
    std::vector<float> in = {1.0f * (r + 1), 2.0f * (r + 1), 0.5f * (r + 1)}, out(3);
    expectOk("all_reduce f32", comm.allReduce(r, both, in.data(), out.data(), 3, DType::F32));
    expect("all_reduce f32", out, {3.0f, 6.0f, 1.5f});
    expectOk("all_reduce f32 in place", comm.allReduce(r, reversed, in.data(), in.data(), 3, DType::F32));
    expect("all_reduce f32 in place", in, {3.0f, 6.0f, 1.5f});
    std::vector<int32_t> i = {r == 0 ? 2147483647 : 1, -5 * (r + 1)}, io(2);
    expectOk("all_reduce i32", comm.allReduce(r, both, i.data(), io.data(), 2, DType::I32));
    expect("all_reduce i32 (wraps)", io, {-2147483647 - 1, -15});
    std::vector<double> a = {0.25 * r}, ao(1);
    expectOk("all_reduce group of one", comm.allReduce(r, alone, a.data(), ao.data(), 1, DType::F64));
    expect("all_reduce group of one", ao, {0.25 * r});
  }
  // all_gather: rank r holds [10r + 1, 10r + 2]; in group order [0, 1]: [1, 2, 11, 12]; in [1, 0]: [11, 12, 1, 2].
  {
    std::vector<int32_t> in = {10 * r + 1, 10 * r + 2}, out(4);
    expectOk("all_gather", comm.allGather(r, both, in.data(), out.data(), 8));
    expect("all_gather [0,1]", out, {1, 2, 11, 12});
    expectOk("all_gather", comm.allGather(r, reversed, in.data(), out.data(), 8));
    expect("all_gather [1,0]", out, {11, 12, 1, 2});
  }
  // reduce_scatter: rank 0 holds [1, 2, 3, 4], rank 1 [10, 20, 30, 40]; rank 0 gets chunk 0 summed: [11, 22],
  // rank 1 chunk 1: [33, 44]. In group [1, 0] rank 1 is member 0 and gets chunk 0.
  {
    std::vector<float> in = r == 0 ? std::vector<float>{1, 2, 3, 4} : std::vector<float>{10, 20, 30, 40}, out(2);
    expectOk("reduce_scatter", comm.reduceScatter(r, both, in.data(), out.data(), 2, DType::F32));
    expect("reduce_scatter [0,1]", out, r == 0 ? std::vector<float>{11, 22} : std::vector<float>{33, 44});
    expectOk("reduce_scatter", comm.reduceScatter(r, reversed, in.data(), out.data(), 2, DType::F32));
    expect("reduce_scatter [1,0]", out, r == 1 ? std::vector<float>{11, 22} : std::vector<float>{33, 44});
  }
  // all_to_all: rank r holds [r0, r1] = [100r, 100r + 1]; rank j gets chunk j of everyone: rank 0 [0, 100],
  // rank 1 [1, 101].
  {
    std::vector<int32_t> in = {100 * r, 100 * r + 1}, out(2);
    expectOk("all_to_all", comm.allToAll(r, both, in.data(), out.data(), 4));
    expect("all_to_all", out, {r, 100 + r});
  }
  // collective_permute: a swap, then 0 -> 1 only (rank 0 receives zeros).
  {
    std::vector<int32_t> in = {7 + r, 70 + r}, out(2, -1);
    std::vector<std::pair<int, int>> swap = {{0, 1}, {1, 0}}, oneWay = {{0, 1}};
    expectOk("permute swap", comm.permute(r, swap, in.data(), out.data(), 8));
    expect("permute swap", out, {7 + other, 70 + other});
    expectOk("permute one way", comm.permute(r, oneWay, in.data(), out.data(), 8));
    expect("permute one way", out, r == 1 ? std::vector<int32_t>{7, 70} : std::vector<int32_t>{0, 0});
  }
  // runOnDevices on the MPI communicator: one device here, position = rank.
  {
    std::vector<float> out(1);
    expectOk("runOnDevices", runOnDevices(comm, [&](int p) -> Status {
               if (p != r || !currentDevice() || currentDevice()->position != r) return makeError("wrong device");
               float x = 1.0f + static_cast<float>(p);
               return currentDevice()->comm->allReduce(p, both, &x, out.data(), 1, DType::F32);
             }));
    expect("runOnDevices all_reduce", out, {3.0f});
  }
  // The same bits as the in-process communicator: both ranks build both ranks' random data with one seed and
  // sum it in-process; the MPI all-reduce of their own part must match bit for bit (group order [1, 0]).
  {
    const int64_t count = 100003;
    std::vector<std::vector<float>> data(2, std::vector<float>(count));
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-10, 10);
    for (auto& d : data)
      for (auto& v : d) v = std::ldexp(mant(rng), expo(rng));
    std::vector<std::vector<float>> local(2, std::vector<float>(count));
    auto inProcess = makeInProcessCommunicator(2);
    expectOk("in-process reference", runOnDevices(*inProcess, [&](int p) -> Status {
               return currentDevice()->comm->allReduce(p, reversed, data[p].data(), local[p].data(), count,
                                                       DType::F32);
             }));
    std::vector<float> mpi(count);
    expectOk("all_reduce large", comm.allReduce(r, reversed, data[r].data(), mpi.data(), count, DType::F32));
    expect("all_reduce bits equal the in-process communicator's", mpi, local[0]);
  }

  if (g_failures) {
    std::fprintf(stderr, "mpi_collectives_check: rank %d: %d of %d checks failed\n", r, g_failures, g_checks);
    return 1;
  }
  std::printf("mpi_collectives_check: rank %d: %d checks passed\n", r, g_checks);
  return 0;
}
