// Virtual devices as threads of one process. The members of a group meet at a rendezvous, publish their in and
// out pointers, and read each other's buffers directly: no copy through a shared staging buffer.
//
// A rendezvous is keyed by the group's member list and a per-group call number: the k-th call a member makes
// on a group meets the k-th call of every other member on the same group, since all of them run the same
// program. Rendezvous and call numbers are kept per SPMD run (RunState::collectives, found through the calling
// thread's DeviceContext): runs that overlap in the process, started from two host threads or from inside a
// device's program (a host callback that runs a sharded function while the outer run's other devices wait),
// each meet only their own calls. Callers outside any run (a thread of their own that calls with its position)
// share one more set of call numbers.
//
// Aborts follow the same split. A device's failure (abort on a thread that runs a device of a run) ends that
// run's calls only: the other runs in flight go on, and the run's state goes with it, so nothing is left to
// recover. An abort from outside any run ends every call, of every run and of the callers outside runs, until
// recover, which runOnDevices calls once no run is in flight.
//
// Two barriers per call:
//   1. arrival: every member has published (this wait is abortable: a member may never come);
//   2. departure: every member has finished reading the others' inputs and writing the others' outputs, so
//      each may reuse its buffers. Not abortable: once everyone has arrived, the work is plain memory traffic
//      that finishes, and a member leaving early would have its buffers written after it returned.
// all_reduce is a shared-memory reduce-scatter + all-gather: member i sums its 1/n slice of the elements over
// every member, in group order, and writes the sums into every member's output. Each element is summed once,
// by one member, so all members get the same bits; a block of every input is read before it is written, so
// in == out works without scratch.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/dist/communicator.h"
#include "engine/dist/group_sum.h"
#include "engine/dist/run_state.h"

namespace tsr::dist {
namespace {

// What a member called, so that members which disagree (another collective, size or dtype) all fail instead
// of reading past each other's buffers.
struct Call {
  const char* op = "";
  DType dtype = DType::U8;
  int64_t amount = 0;  // elements or bytes
  bool operator==(const Call& o) const { return std::strcmp(op, o.op) == 0 && dtype == o.dtype && amount == o.amount; }
};

struct Rendezvous {
  std::vector<int> members;
  std::vector<const void*> in;
  std::vector<void*> out;
  std::vector<Call> calls;
  std::atomic<int> arrived{0};   // written under the communicator's mutex, read by spinning waiters
  std::atomic<int> departed{0};
  std::condition_variable cv;
  int size() const { return static_cast<int>(members.size()); }
};

using Key = std::pair<std::vector<int>, uint64_t>;  // member list, call number

// The calls of one run, or of the callers outside any run: rendezvous some member has not reached, each
// position's call numbers per member list, and an abort of these calls only. Guarded by the communicator's mutex
// (aborted is also read by spinning waiters).
struct Calls {
  explicit Calls(int numDevices) : numbers(static_cast<size_t>(numDevices)) {}
  std::map<Key, std::shared_ptr<Rendezvous>> pending;
  std::vector<std::map<std::vector<int>, uint64_t>> numbers;
  std::atomic<bool> aborted{false};
  std::string why;
};

std::string groupText(std::span<const int> group) { return fmt::format("[{}]", fmt::join(group, ",")); }

// memcpy and memset with a zero size and a null pointer (an empty buffer) are undefined: skip them.
void copyBytes(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, static_cast<size_t>(bytes));
}
void zeroBytes(void* dst, int64_t bytes) {
  if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
}

char* bytePtr(void* p, int64_t offset) { return static_cast<char*>(p) + offset; }
const char* bytePtr(const void* p, int64_t offset) { return static_cast<const char*>(p) + offset; }

class InProcessCommunicator final : public Communicator {
 public:
  explicit InProcessCommunicator(int numDevices) : m_numDevices(numDevices), m_outside(numDevices) {
    // Spinning before sleeping saves the wake-up latency (tens of microseconds) when every device has a core;
    // with more devices than cores a spinning waiter only delays the member it waits for.
    auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    m_spins = numDevices <= cores ? 2000 : 0;
  }

  std::string kind() const override { return "in-process"; }
  int numDevices() const override { return m_numDevices; }
  std::vector<int> localDevices() const override {
    std::vector<int> all(static_cast<size_t>(m_numDevices));
    for (int i = 0; i < m_numDevices; ++i) all[static_cast<size_t>(i)] = i;
    return all;
  }

  Status allReduce(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                   DType dtype) override {
    TSR_TRY(checkSummable(dtype, "all_reduce"));
    TSR_ASSIGN(int me, memberIndex("all_reduce", self, group));
    const int64_t es = dtypeSize(dtype);
    if (group.size() == 1) {
      copyBytes(out, in, count * es);
      return {};
    }
    TSR_ASSIGN(auto r, arrive("all_reduce", self, me, group, in, out, Call{"all_reduce", dtype, count}));
    const int n = r->size();
    const int64_t lo = count * me / n, hi = count * (me + 1) / n;
    std::vector<const void*> ins(static_cast<size_t>(n));
    std::vector<void*> outs(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      ins[static_cast<size_t>(k)] = bytePtr(r->in[static_cast<size_t>(k)], lo * es);
      outs[static_cast<size_t>(k)] = bytePtr(r->out[static_cast<size_t>(k)], lo * es);
    }
    sumInGroupOrder(dtype, ins, outs, hi - lo);
    depart(*r);
    return {};
  }

  Status allGather(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(int me, memberIndex("all_gather", self, group));
    if (group.size() == 1) {
      copyBytes(out, in, bytes);
      return {};
    }
    TSR_ASSIGN(auto r, arrive("all_gather", self, me, group, in, out, Call{"all_gather", DType::U8, bytes}));
    for (int j = 0; j < r->size(); ++j)
      copyBytes(bytePtr(out, j * bytes), r->in[static_cast<size_t>(j)], bytes);
    depart(*r);
    return {};
  }

  Status reduceScatter(int self, std::span<const int> group, const void* in, void* out, int64_t count,
                       DType dtype) override {
    TSR_TRY(checkSummable(dtype, "reduce_scatter"));
    TSR_ASSIGN(int me, memberIndex("reduce_scatter", self, group));
    const int64_t es = dtypeSize(dtype);
    if (group.size() == 1) {
      copyBytes(out, in, count * es);
      return {};
    }
    TSR_ASSIGN(auto r, arrive("reduce_scatter", self, me, group, in, out, Call{"reduce_scatter", dtype, count}));
    std::vector<const void*> ins;
    for (const void* p : r->in) ins.push_back(bytePtr(p, me * count * es));
    void* outs[1] = {out};
    sumInGroupOrder(dtype, ins, outs, count);
    depart(*r);
    return {};
  }

  Status allToAll(int self, std::span<const int> group, const void* in, void* out, int64_t bytes) override {
    TSR_ASSIGN(int me, memberIndex("all_to_all", self, group));
    if (group.size() == 1) {
      copyBytes(out, in, bytes);
      return {};
    }
    TSR_ASSIGN(auto r, arrive("all_to_all", self, me, group, in, out, Call{"all_to_all", DType::U8, bytes}));
    for (int j = 0; j < r->size(); ++j)
      copyBytes(bytePtr(out, j * bytes), bytePtr(r->in[static_cast<size_t>(j)], me * bytes), bytes);
    depart(*r);
    return {};
  }

  Status permute(int self, std::span<const std::pair<int, int>> pairs, const void* in, void* out,
                 int64_t bytes) override {
    // The participants: every position named in a pair, sorted; they meet like a group.
    std::vector<int> members;
    int source = -1;
    for (auto [s, t] : pairs) {
      members.push_back(s);
      members.push_back(t);
      if (t == self) source = s;
    }
    std::sort(members.begin(), members.end());
    members.erase(std::unique(members.begin(), members.end()), members.end());
    TSR_TRY(checkPairs(pairs));
    auto mine = std::find(members.begin(), members.end(), self);
    if (mine == members.end()) {
      zeroBytes(out, bytes);
      return {};
    }
    TSR_ASSIGN(int me, memberIndex("collective_permute", self, members));
    TSR_ASSIGN(auto r, arrive("collective_permute", self, me, members, in, out,
                              Call{"collective_permute", DType::U8, bytes}));
    if (source < 0) {
      zeroBytes(out, bytes);
    } else {
      auto s = std::find(members.begin(), members.end(), source) - members.begin();
      copyBytes(out, r->in[static_cast<size_t>(s)], bytes);
    }
    depart(*r);
    return {};
  }

  // On a device of a run on this communicator: that run's calls; elsewhere: every call (see the top).
  void abort(const std::string& why) override {
    std::lock_guard lock(m_mutex);
    if (RunState* run = runOfThisThread()) {
      Calls& calls = callsOf(*run);
      if (calls.aborted.load()) return;
      calls.why = why;
      calls.aborted.store(true);
      wake(calls);
      return;
    }
    if (m_aborted.load()) return;
    m_why = why;
    m_aborted.store(true);
    wake(m_outside);
    for (RunCalls* calls : m_runs) wake(*calls);
  }

  bool recover() override {
    std::lock_guard lock(m_mutex);
    if (!m_aborted.load()) return true;
    // No run is in flight and the callers outside runs have returned: nobody waits at a pending rendezvous, and
    // their call numbers, which the abort left apart, start again from 0 together.
    m_outside.pending.clear();
    for (auto& numbers : m_outside.numbers) numbers.clear();
    m_why.clear();
    m_aborted.store(false);
    return true;
  }

 private:
  // A run's calls, owned by its RunState and so dropped with the run; listed here while they exist, for an abort
  // of every call.
  struct RunCalls : Calls {
    explicit RunCalls(InProcessCommunicator& owner) : Calls(owner.m_numDevices), owner(owner) {}
    ~RunCalls() {
      std::lock_guard lock(owner.m_mutex);
      owner.m_runs.erase(this);
    }
    InProcessCommunicator& owner;
  };

  // The run whose device the calling thread runs, when that run is on this communicator.
  RunState* runOfThisThread() const {
    DeviceContext* d = currentDevice();
    if (!d || d->comm != this || !d->run || d->run->comm != this) return nullptr;
    return d->run;
  }

  // The calls of `run`, made on its first use (m_mutex held).
  Calls& callsOf(RunState& run) {
    if (!run.collectives) {
      auto calls = std::make_shared<RunCalls>(*this);
      m_runs.insert(calls.get());
      run.collectives = calls;
    }
    return *static_cast<RunCalls*>(run.collectives.get());
  }

  // The calls a collective on the calling thread belongs to (m_mutex held).
  Calls& callsOfThisThread() {
    RunState* run = runOfThisThread();
    return run ? callsOf(*run) : m_outside;
  }

  bool aborted(const Calls& calls) const { return m_aborted.load() || calls.aborted.load(); }

  static void wake(Calls& calls) {
    for (auto& [key, r] : calls.pending) r->cv.notify_all();
  }

  // self's index in the group, after checking the group (positions in range, no repeats, self a member).
  Result<int> memberIndex(const char* op, int self, std::span<const int> group) const {
    if (group.empty()) return makeError("{}: empty group", op);
    if (self < 0 || self >= m_numDevices)
      return makeError("{}: device {} is not one of the {} devices", op, self, m_numDevices);
    int me = -1;
    for (size_t i = 0; i < group.size(); ++i) {
      int p = group[i];
      if (p < 0 || p >= m_numDevices)
        return makeError("{}: group {} names device {}, not one of the {} devices", op, groupText(group), p,
                         m_numDevices);
      for (size_t j = 0; j < i; ++j)
        if (group[j] == p) return makeError("{}: group {} names device {} twice", op, groupText(group), p);
      if (p == self) me = static_cast<int>(i);
    }
    if (me < 0) return makeError("{}: device {} is not in its group {}", op, self, groupText(group));
    return me;
  }

  Status checkPairs(std::span<const std::pair<int, int>> pairs) const {
    std::vector<int> sources, targets;
    for (auto [s, t] : pairs) {
      if (s < 0 || s >= m_numDevices || t < 0 || t >= m_numDevices)
        return makeError("collective_permute: pair ({}, {}) names a device outside the {} devices", s, t,
                         m_numDevices);
      sources.push_back(s);
      targets.push_back(t);
    }
    for (auto* v : {&sources, &targets}) {
      std::sort(v->begin(), v->end());
      auto dup = std::adjacent_find(v->begin(), v->end());
      if (dup != v->end())
        return makeError("collective_permute: device {} is a {} of more than one pair", *dup,
                         v == &sources ? "source" : "target");
    }
    return {};
  }

  // The run's own abort names its root cause; an abort of every call names what made it.
  Error abortedError(const char* op, std::span<const int> group, const Calls& calls) const {
    return makeError("{} over {}: the run was aborted: {}", op, groupText(group),
                     calls.aborted.load() ? calls.why : m_why);
  }

  // Waits (spinning briefly, then on the rendezvous' condition variable) until pred() holds or, where
  // `abortable` is given, those calls are aborted.
  template <class Pred>
  void wait(std::unique_lock<std::mutex>& lock, Rendezvous& r, Pred pred, const Calls* abortable) {
    auto done = [&] { return pred() || (abortable && aborted(*abortable)); };
    if (m_spins > 0 && !done()) {
      lock.unlock();
      for (int i = 0; i < m_spins && !done(); ++i) __builtin_ia32_pause();
      lock.lock();
    }
    r.cv.wait(lock, done);
  }

  // Joins self's next call on `group` among the calling thread's calls (its run's), publishes its buffers and
  // waits for every member.
  Result<std::shared_ptr<Rendezvous>> arrive(const char* op, int self, int me, std::span<const int> group,
                                             const void* in, void* out, const Call& call) {
    std::unique_lock lock(m_mutex);
    Calls& calls = callsOfThisThread();
    if (aborted(calls)) return abortedError(op, group, calls);
    std::vector<int> members(group.begin(), group.end());
    uint64_t number = calls.numbers[static_cast<size_t>(self)][members]++;
    Key key{members, number};
    auto& slot = calls.pending[key];
    if (!slot) {
      slot = std::make_shared<Rendezvous>();
      slot->members = members;
      slot->in.resize(members.size());
      slot->out.resize(members.size());
      slot->calls.resize(members.size());
    }
    std::shared_ptr<Rendezvous> r = slot;
    r->in[static_cast<size_t>(me)] = in;
    r->out[static_cast<size_t>(me)] = out;
    r->calls[static_cast<size_t>(me)] = call;
    const int n = r->size();
    if (r->arrived.fetch_add(1) + 1 == n) {
      calls.pending.erase(key);  // complete: later calls on this group make a new one
      r->cv.notify_all();
    } else {
      wait(lock, *r, [&] { return r->arrived.load(std::memory_order_acquire) == n; }, &calls);
      // Once everyone has arrived the call completes, abort or not: the others are already reading our buffers.
      if (r->arrived.load() != n) return abortedError(op, group, calls);
    }
    for (const Call& c : r->calls)
      if (!(c == call)) {
        lock.unlock();
        depart(*r);
        return makeError("{} over {}: members disagree: device {} calls {} of {} {}, another {} of {} {}", op,
                         groupText(group), self, call.op, call.amount, dtypeName(call.dtype), c.op, c.amount,
                         dtypeName(c.dtype));
      }
    return r;
  }

  void depart(Rendezvous& r) {
    std::unique_lock lock(m_mutex);
    const int n = r.size();
    if (r.departed.fetch_add(1) + 1 == n) {
      r.cv.notify_all();
      return;
    }
    wait(lock, r, [&] { return r.departed.load(std::memory_order_acquire) == n; }, nullptr);
  }

  const int m_numDevices;
  int m_spins = 0;
  std::mutex m_mutex;
  Calls m_outside;                      // the calls made outside any run
  std::set<RunCalls*> m_runs;           // the calls of every run that has made one and not yet ended
  std::atomic<bool> m_aborted{false};  // every call, of every run: an abort from outside any run
  std::string m_why;
};

}  // namespace

std::shared_ptr<Communicator> makeInProcessCommunicator(int numDevices) {
  return std::make_shared<InProcessCommunicator>(std::max(1, numDevices));
}

}  // namespace tsr::dist
