#pragma once
// Collectives behind one interface. Each device of a mesh (a mesh *position*, 0..numDevices()-1) runs the same
// per-device program on its own thread (virtual CPU devices in one process) or in its own process (MPI), and
// calls these with its own position as `self`. Every member of a group makes the same call, in the same
// program order; a call returns when the member's result is complete and its input may be reused.
//
// Groups list member positions in order: that order is the order of the chunks (all_gather's output,
// reduce_scatter's and all_to_all's input). Buffers are dense row-major bytes; the ops that gather or scatter
// along a dimension other than 0 transpose around these calls.
//
// Sums: element e of a result is ((x_g0[e] + x_g1[e]) + x_g2[e]) + ... over the members g0, g1, ... in group
// order; bf16 and f16 are summed in f32 and rounded once; integers wrap modulo 2^bits. Both communicators compute
// exactly this, so every member gets bit-identical values, and the in-process and MPI results agree bit for bit.
// Summable dtypes: every numeric one (f32 f64 bf16 f16 i32 i64 u8 u32); bool is an error.
//
// Errors (a position out of range, self not in the group, members disagreeing on the size, an aborted
// communicator) are returned, never raised; a mismatch is seen by every member, so nobody waits forever.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"

namespace tsr::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string kind() const = 0;  // "in-process", "mpi"
  virtual int numDevices() const = 0;    // positions of the global mesh
  // Positions whose programs run in this process: all of them in one process, this rank's under MPI.
  virtual std::vector<int> localDevices() const = 0;

  // out = the sum over the group of the members' `in` (count elements of dtype). Every member gets a
  // bit-identical result: the sum runs in group order on each. in == out is allowed.
  virtual Status allReduce(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                           DType dtype) = 0;
  // out = the members' `in` (bytes each) concatenated in group order. in and out must not overlap.
  virtual Status allGather(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) = 0;
  // in: group.size() chunks of `count` elements; out = the sum over members of their chunk at self's index in
  // the group (summed in group order). in and out must not overlap.
  virtual Status reduceScatter(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                               DType dtype) = 0;
  // in: group.size() chunks of `bytes`; out chunk j = member j's chunk at self's index. in and out must not
  // overlap.
  virtual Status allToAll(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) = 0;
  // pairs: (source, target) positions; a position is a source at most once and a target at most once. self
  // sends `in` to its target, if any, and out receives its source's `in`, or zeros when no pair targets self.
  // Every position named in a pair makes the call (a position named in none need not; the call only zeroes
  // out). in and out must not overlap.
  virtual Status permute(int self, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                         int64_t bytes) = 0;

  // A device failed: every waiting and later call returns an error carrying `why`, so that no device waits
  // forever for a member that will not come. Under MPI only this rank's calls fail; a peer blocked waiting for
  // this rank ends when this process exits (an aborted rank calls MPI_Abort at exit, which ends the whole job).
  virtual void abort(const std::string& why) = 0;
  // Once every device of an aborted run has returned (runOnDevices calls it, with no other run in flight):
  // forgets the abort and the calls the run left half met, so that the next run starts as on a new communicator.
  // Returns false where an abort is for good (MPI: the job ends).
  virtual bool recover() { return false; }

  // State a backend keeps with this communicator for one of its local positions (the NCCL communicators of the
  // position's GPU): made by `make` on the first call for (key, position), kept until the communicator goes, so
  // that it never outlives the ranks it was made with. Only the position's own thread asks for its state; `make`
  // runs without a lock held, so it may call the communicator's collectives (every member's `make` meets in
  // them). A failed `make` is returned and nothing is kept.
  using Attachment = std::shared_ptr<void>;
  Result<Attachment> attachment(const std::string& key, int position,
                                const std::function<Result<Attachment>()>& make);

 private:
  std::mutex m_attachmentMutex;
  std::map<std::pair<std::string, int>, Attachment> m_attachments;
};

// numDevices virtual devices in this process (threads, shared memory).
std::shared_ptr<Communicator> makeInProcessCommunicator(int numDevices);

// Whether this process was started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK set).
bool launchedUnderMpi();
// One device per MPI rank: position = rank, numDevices = world size. Initialises MPI on first use (finalised at
// exit) unless the program initialised it; calling it is the explicit request to start MPI (outside mpirun, a
// one-rank singleton). One communicator per process (later calls return the same one). An error when the build
// has no MPI or MPI fails to start.
Result<std::shared_ptr<Communicator>> makeMpiCommunicator();

// The most virtual CPU devices a process may have.
inline constexpr int kMaxCpuDevices = 256;
// Parses a device count ("8"): an integer in [1, kMaxCpuDevices]; anything else is an error saying why.
Result<int> parseCpuDeviceCount(std::string_view text);
// The number of virtual CPU devices: TESSERA_CPU_DEVICES (default 1). An invalid value is reported on stderr
// once and 1 is used.
int configuredCpuDevices();

// The device a kernel runs for, set on each device's thread by runOnDevices. Collective kernels read it;
// outside an SPMD run it is null: the program runs as position 0 of a one-device mesh, so collectives over
// groups of one are the identity and a larger group is an error.
struct RunState;
struct DeviceContext {
  int position = 0;
  Communicator* comm = nullptr;
  // A kernel cannot return an error: it records the first one here and aborts the run (the communicator, so
  // that the other devices return too); collective kernels then raise it, which the interpreter and the CPU
  // executable turn into the program's error. runOnDevices reports a recorded error even if the program
  // returned success.
  void fail(const Error& e);
  std::string error;
  RunState* run = nullptr;  // runOnDevices' shared state (which error came first); null outside a run
  // The group of the collective kernel that ran last, in group order, when it had more than one member: set by
  // the collective kernels, read and cleared by the executable that ran it (a profile links the members' spans).
  std::vector<int> collectiveGroup;
};
DeviceContext* currentDevice();

// Runs fn(position) for every local device of comm concurrently, one thread per device (the calling thread
// runs the first), each with its DeviceContext set. Returns the first error, naming the device ("device 3:
// ..."): the root cause, not the "aborted" errors it caused elsewhere. When one device fails (an error
// returned, recorded with DeviceContext::fail, or an exception thrown), the communicator is aborted so that the
// others return too; when all have returned, a communicator that can recovers (Communicator::recover), so that
// one failed run (a user's callback that raised, an interrupted step) leaves the devices usable for the next.
// The worker threads persist between calls (a training step calls this every step).
Status runOnDevices(Communicator& comm, const std::function<Status(int position)>& fn);

}  // namespace tsr::dist
