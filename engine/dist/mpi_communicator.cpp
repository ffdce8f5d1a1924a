// One device per MPI rank (built only when CMake finds MPI). Every transfer is raw bytes (MPI_BYTE); the sums
// are computed here with sumInGroupOrder, never by MPI's reductions, so the result is the group-order sum of
// communicator.h on every rank, bit-identical to the in-process communicator, whatever algorithm the MPI
// library picks:
//   all_reduce     = MPI_Alltoallv (member j gets everyone's slice j) + a local group-order sum of my slice
//                    + MPI_Allgatherv of the sums: a reduce-scatter + all-gather, the bandwidth of a ring;
//   reduce_scatter = MPI_Alltoall of the chunks + a local group-order sum;
//   all_gather     = MPI_Allgather; all_to_all = MPI_Alltoall; permute = MPI_Isend/MPI_Irecv on world ranks.
// A group becomes an MPI communicator (MPI_Comm_create_group, which only the members call, ranks in group
// order), cached per member list. MPI calls return error codes (MPI_ERRORS_RETURN), turned into errors.
//
// MPI is started with MPI_THREAD_SERIALIZED: one device per rank, so only one thread calls at a time (the one
// runOnDevices runs the device on: its caller). Message sizes are C ints: a call moving 2 GiB or more in one
// message is an error.
//
// One SPMD run at a time per process. MPI matches a rank's collectives on a communicator by their order alone,
// and unlike the in-process communicator this one keeps no calls per run: runs that overlap in a process (two
// host threads, or a run started inside a device's program while the rank's device waits in the outer run) would
// meet each other's calls on the peers, and would call MPI from two threads at once. The host-side calls outside
// runs (spmd::processBarrier, the run lease's answer to every rank) come from the host thread between runs. An
// abort is the rank's, whichever run it came from (see abort).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/dist/communicator.h"
#include "engine/dist/group_sum.h"

namespace tsr::dist {
namespace {

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

Status mpiCheck(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return {};
  return makeError("{}: MPI error: {}", what, mpiErrorText(rc));
}

Result<int> messageSize(int64_t bytes, std::string_view op) {
  if (bytes < 0 || bytes > INT_MAX)
    return makeError("{}: {} bytes in one MPI message (at most {})", op, bytes, INT_MAX);
  return static_cast<int>(bytes);
}

// memcpy and memset with a zero size and a null pointer (an empty buffer) are undefined: skip them.
void copyBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}
void zeroBytes(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

std::string groupText(std::span<const int> group) { return fmt::format("[{}]", fmt::join(group, ",")); }

// Set when a communicator was aborted: at exit the peers may be blocked in a collective this rank will never
// join, and only MPI_Abort ends them (it ends this process too, with exit code 1).
bool g_aborted = false;
int g_worldSize = 1;

void finishMpiAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_aborted && g_worldSize > 1) {
    std::fflush(nullptr);  // MPI_Abort kills the process: what it printed must be out first
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm world, int rank, int size) : m_world(world), m_rank(rank), m_size(size) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (auto& [members, comm] : m_groups) MPI_Comm_free(&comm);
    MPI_Comm_free(&m_world);
  }

  std::string kind() const override { return "mpi"; }
  int numDevices() const override { return m_size; }
  std::vector<int> localDevices() const override { return {m_rank}; }

  Status allReduce(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                   DType dtype) override {
    TSR_TRY(checkSummable(dtype, "all_reduce"));
    TSR_ASSIGN(int me, memberIndex("all_reduce", self, group));
    const int64_t es = dtypeSize(dtype);
    const int n = static_cast<int>(group.size());
    if (n == 1) {
      copyBytes(out, in, count * es);
      return {};
    }
    TSR_ASSIGN(MPI_Comm comm, commFor(group));
    TSR_TRY(messageSize(count * es, "all_reduce"));
    // Slice j of the elements: [count * j / n, count * (j + 1) / n).
    std::vector<int> sliceBytes(static_cast<size_t>(n)), sliceStart(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) {
      int64_t lo = count * j / n, hi = count * (j + 1) / n;
      sliceStart[static_cast<size_t>(j)] = static_cast<int>(lo * es);
      sliceBytes[static_cast<size_t>(j)] = static_cast<int>((hi - lo) * es);
    }
    const int mine = sliceBytes[static_cast<size_t>(me)];
    std::vector<char> received(static_cast<size_t>(mine) * static_cast<size_t>(n));
    std::vector<int> recvBytes(static_cast<size_t>(n), mine), recvStart(static_cast<size_t>(n));
    for (int j = 0; j < n; ++j) recvStart[static_cast<size_t>(j)] = j * mine;
    TSR_TRY(mpiCheck(MPI_Alltoallv(in, sliceBytes.data(), sliceStart.data(), MPI_BYTE, received.data(),
                                   recvBytes.data(), recvStart.data(), MPI_BYTE, comm),
                     "all_reduce"));
    std::vector<const void*> ins;
    for (int j = 0; j < n; ++j) ins.push_back(received.data() + static_cast<size_t>(j) * static_cast<size_t>(mine));
    std::vector<char> sum(static_cast<size_t>(mine));
    void* outs[1] = {sum.data()};
    sumInGroupOrder(dtype, ins, outs, mine / es);
    return mpiCheck(MPI_Allgatherv(sum.data(), mine, MPI_BYTE, out, sliceBytes.data(), sliceStart.data(), MPI_BYTE,
                                   comm),
                    "all_reduce");
  }

  Status allGather(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(int me, memberIndex("all_gather", self, group));
    (void)me;
    if (group.size() == 1) {
      copyBytes(out, in, bytes);
      return {};
    }
    TSR_ASSIGN(MPI_Comm comm, commFor(group));
    TSR_ASSIGN(int b, messageSize(bytes * static_cast<int64_t>(group.size()), "all_gather"));
    b /= static_cast<int>(group.size());
    return mpiCheck(MPI_Allgather(in, b, MPI_BYTE, out, b, MPI_BYTE, comm), "all_gather");
  }

  Status reduceScatter(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                       DType dtype) override {
    TSR_TRY(checkSummable(dtype, "reduce_scatter"));
    TSR_ASSIGN(int me, memberIndex("reduce_scatter", self, group));
    (void)me;
    const int64_t es = dtypeSize(dtype);
    const auto n = static_cast<int64_t>(group.size());
    if (n == 1) {
      copyBytes(out, in, count * es);
      return {};
    }
    TSR_ASSIGN(MPI_Comm comm, commFor(group));
    TSR_ASSIGN(int chunk, messageSize(count * es * n, "reduce_scatter"));
    chunk /= static_cast<int>(n);
    std::vector<char> received(static_cast<size_t>(chunk) * static_cast<size_t>(n));
    TSR_TRY(mpiCheck(MPI_Alltoall(in, chunk, MPI_BYTE, received.data(), chunk, MPI_BYTE, comm), "reduce_scatter"));
    std::vector<const void*> ins;
    for (int64_t j = 0; j < n; ++j)
      ins.push_back(received.data() + static_cast<size_t>(j) * static_cast<size_t>(chunk));
    void* outs[1] = {out};
    sumInGroupOrder(dtype, ins, outs, count);
    return {};
  }

  Status allToAll(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(int me, memberIndex("all_to_all", self, group));
    (void)me;
    if (group.size() == 1) {
      copyBytes(out, in, bytes);
      return {};
    }
    TSR_ASSIGN(MPI_Comm comm, commFor(group));
    TSR_ASSIGN(int b, messageSize(bytes * static_cast<int64_t>(group.size()), "all_to_all"));
    b /= static_cast<int>(group.size());
    return mpiCheck(MPI_Alltoall(in, b, MPI_BYTE, out, b, MPI_BYTE, comm), "all_to_all");
  }

  Status permute(int self, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                 int64_t bytes) override {
    if (m_aborted) return abortedError("collective_permute");
    TSR_ASSIGN(int b, messageSize(bytes, "collective_permute"));
    int source = -1, target = -1;
    for (auto [s, t] : pairs) {
      if (s < 0 || s >= m_size || t < 0 || t >= m_size)
        return makeError("collective_permute: pair ({}, {}) names a device outside the {} ranks", s, t, m_size);
      if (t == self) source = s;
      if (s == self) target = t;
    }
    if (source == self) {
      copyBytes(out, in, bytes);
      return {};
    }
    MPI_Request requests[2];
    int numRequests = 0;
    if (source >= 0)
      TSR_TRY(mpiCheck(MPI_Irecv(out, b, MPI_BYTE, source, kPermuteTag, m_world, &requests[numRequests++]),
                       "collective_permute"));
    else
      zeroBytes(out, bytes);
    if (target >= 0)
      TSR_TRY(mpiCheck(MPI_Isend(in, b, MPI_BYTE, target, kPermuteTag, m_world, &requests[numRequests++]),
                       "collective_permute"));
    return mpiCheck(MPI_Waitall(numRequests, requests, MPI_STATUSES_IGNORE), "collective_permute");
  }

  // Marks this rank failed: its later calls return errors. A peer blocked in a collective waiting for this
  // rank cannot be woken by anything but MPI_Abort, which runs at exit (finishMpiAtExit), not here: the
  // caller first gets its error back and can report it.
  void abort(const std::string& why) override {
    std::lock_guard lock(m_mutex);
    if (m_aborted) return;
    m_aborted = true;
    m_why = why;
    g_aborted = true;
  }

 private:
  static constexpr int kPermuteTag = 7301;

  Error abortedError(const char* op) const { return makeError("{}: the run was aborted: {}", op, m_why); }

  Result<int> memberIndex(const char* op, int self, std::span<const int> group) const {
    if (m_aborted) return abortedError(op);
    if (self != m_rank) return makeError("{}: device {} called on rank {} (one device per rank)", op, self, m_rank);
    if (group.empty()) return makeError("{}: empty group", op);
    int me = -1;
    for (size_t i = 0; i < group.size(); ++i) {
      int p = group[i];
      if (p < 0 || p >= m_size)
        return makeError("{}: group {} names device {}, not one of the {} ranks", op, groupText(group), p, m_size);
      for (size_t j = 0; j < i; ++j)
        if (group[j] == p) return makeError("{}: group {} names device {} twice", op, groupText(group), p);
      if (p == self) me = static_cast<int>(i);
    }
    if (me < 0) return makeError("{}: device {} is not in its group {}", op, self, groupText(group));
    return me;
  }

  // The group's communicator, whose rank i is group[i]; created by the members on their first call.
  Result<MPI_Comm> commFor(std::span<const int> group) {
    std::vector<int> members(group.begin(), group.end());
    auto it = m_groups.find(members);
    if (it != m_groups.end()) return it->second;
    MPI_Group worldGroup, sub;
    TSR_TRY(mpiCheck(MPI_Comm_group(m_world, &worldGroup), "creating a group"));
    int rc = MPI_Group_incl(worldGroup, static_cast<int>(members.size()), members.data(), &sub);
    MPI_Group_free(&worldGroup);
    TSR_TRY(mpiCheck(rc, "creating group " + groupText(group)));
    MPI_Comm comm = MPI_COMM_NULL;
    rc = MPI_Comm_create_group(m_world, sub, 0, &comm);
    MPI_Group_free(&sub);
    TSR_TRY(mpiCheck(rc, "creating a communicator for group " + groupText(group)));
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    m_groups.emplace(std::move(members), comm);
    return comm;
  }

  MPI_Comm m_world;  // a duplicate of MPI_COMM_WORLD: our messages never match the program's own
  const int m_rank, m_size;
  std::map<std::vector<int>, MPI_Comm> m_groups;
  std::mutex m_mutex;
  bool m_aborted = false;
  std::string m_why;
};

}  // namespace

Result<std::shared_ptr<Communicator>> makeMpiCommunicator() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> instance;
  std::lock_guard lock(mutex);
  if (instance) return instance;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) return makeError("MPI was already finalised");
  if (!initialized) {
    int provided = 0;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    TSR_TRY(mpiCheck(rc, "MPI_Init_thread"));
    std::atexit(finishMpiAtExit);
  }
  MPI_Comm world = MPI_COMM_NULL;
  TSR_TRY(mpiCheck(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup"));
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  g_worldSize = size;
  instance = std::make_shared<MpiCommunicator>(world, rank, size);
  return instance;
}

}  // namespace tsr::dist
