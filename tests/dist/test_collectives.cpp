// The in-process communicator and runOnDevices: every collective on 1, 2, 4 and 8 devices, over a 4x2 mesh's
// rows and columns and over permuted groups, on random data, against a naive single-threaded reference written
// here (sums in group order, element by element); plus in-place all-reduce, bit-identical results across
// members, many interleaved collectives, and failures that must end the run instead of hanging it.
#include "tests/check.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <random>

#include <fmt/ranges.h>

#include "engine/dist/communicator.h"

using namespace tsr;
using namespace tsr::dist;

namespace {

using Bytes = std::vector<uint8_t>;
using Group = std::vector<int>;
using Grouping = std::vector<Group>;  // groups that cover every device once

// Groupings of n devices: everyone in order, everyone in a shuffled order, and for n >= 4 the rows (pairs of
// neighbours) and columns of an (n/2)x2 mesh, the column groups listed in reverse.
std::vector<Grouping> groupingsFor(int n, std::mt19937& rng) {
  std::vector<Grouping> out;
  Group all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  out.push_back({all});
  if (n > 1) {
    Group shuffled = all;
    while (shuffled == all) std::shuffle(shuffled.begin(), shuffled.end(), rng);
    out.push_back({shuffled});
  }
  if (n >= 4) {
    Grouping rows, cols(2);
    for (int r = 0; r < n / 2; ++r) rows.push_back({2 * r, 2 * r + 1});
    for (int r = n / 2 - 1; r >= 0; --r) {
      cols[0].push_back(2 * r);
      cols[1].push_back(2 * r + 1);
    }
    out.push_back(rows);
    out.push_back(cols);
  }
  return out;
}

const Group& groupOf(const Grouping& g, int position) {
  for (const Group& group : g)
    if (std::find(group.begin(), group.end(), position) != group.end()) return group;
  TSR_FATAL("device " << position << " is in no group");
}

int indexIn(const Group& g, int position) {
  return static_cast<int>(std::find(g.begin(), g.end(), position) - g.begin());
}

// Random elements: floats spread over several binades (so that the order of a sum shows in its bits), integers
// over their whole range (so that sums wrap).
Bytes randomBytes(DType t, int64_t count, std::mt19937& rng) {
  Bytes b(static_cast<size_t>(count * dtypeSize(t)));
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-8, 8);
  for (int64_t i = 0; i < count; ++i) {
    double v = std::ldexp(mant(rng), expo(rng));
    uint64_t bits = (static_cast<uint64_t>(rng()) << 32) | rng();
    dispatchDType(t, [&]<class T>() {
      T x;
      if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) x = T(static_cast<float>(v));
      else if constexpr (std::is_floating_point_v<T>) x = static_cast<T>(v);
      else std::memcpy(&x, &bits, sizeof(T));
      std::memcpy(b.data() + i * sizeof(T), &x, sizeof(T));
    });
  }
  return b;
}

// The reference sum: element by element, members in group order, bf16/f16 in float, integers wrapping.
template <class T, class Acc>
Bytes naiveSumAs(const std::vector<const uint8_t*>& ins, int64_t count) {
  Bytes out(static_cast<size_t>(count) * sizeof(T));
  for (int64_t e = 0; e < count; ++e) {
    Acc acc{};
    for (size_t m = 0; m < ins.size(); ++m) {
      T x;
      std::memcpy(&x, ins[m] + e * sizeof(T), sizeof(T));
      acc = m == 0 ? static_cast<Acc>(x) : static_cast<Acc>(acc + static_cast<Acc>(x));
    }
    T y = T(acc);
    std::memcpy(out.data() + e * sizeof(T), &y, sizeof(T));
  }
  return out;
}

Bytes naiveSum(DType t, const std::vector<const uint8_t*>& ins, int64_t count) {
  switch (t) {
    case DType::F32: return naiveSumAs<float, float>(ins, count);
    case DType::F64: return naiveSumAs<double, double>(ins, count);
    case DType::BF16: return naiveSumAs<bf16, float>(ins, count);
    case DType::F16: return naiveSumAs<f16, float>(ins, count);
    case DType::I32: return naiveSumAs<uint32_t, uint32_t>(ins, count);
    case DType::U32: return naiveSumAs<uint32_t, uint32_t>(ins, count);
    case DType::I64: return naiveSumAs<uint64_t, uint64_t>(ins, count);
    case DType::U8: return naiveSumAs<uint8_t, uint8_t>(ins, count);
    default: TSR_FATAL("no reference sum for " << std::string(dtypeName(t)));
  }
}

const std::vector<DType> kSummable = {DType::F32, DType::F64, DType::BF16, DType::F16,
                                      DType::I32, DType::I64, DType::U8,   DType::U32};

// Runs fn on n in-process devices and fails the test with the run's error.
void runOrFail(int n, const std::function<Status(int)>& fn) {
  auto comm = makeInProcessCommunicator(n);
  Status st = runOnDevices(*comm, fn);
  if (!st.ok()) FAIL(st.error().message.c_str());
}

Status expectBytes(const Bytes& got, const Bytes& want, const std::string& what) {
  if (got.size() != want.size()) return makeError("{}: {} bytes, expected {}", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return makeError("{}: byte {} is {}, expected {}", what, i, got[i], want[i]);
  return {};
}

std::string label(const char* op, int n, const Group& g, DType t, int64_t count) {
  return fmt::format("{} on {} devices, group [{}], {} x {}", op, n, fmt::join(g, ","), count, dtypeName(t));
}

}  // namespace

TEST_CASE("allReduceMatchesReference") {
  std::mt19937 rng(1);
  int checks = 0;
  for (int n : {1, 2, 4, 8})
    for (const Grouping& grouping : groupingsFor(n, rng))
      for (DType t : kSummable)
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{4099}}) {
          std::vector<Bytes> in(static_cast<size_t>(n));
          for (auto& b : in) b = randomBytes(t, count, rng);
          runOrFail(n, [&](int p) -> Status {
            const Group& g = groupOf(grouping, p);
            Bytes out(in[static_cast<size_t>(p)].size());
            TSR_TRY(currentDevice()->comm->allReduce(p, g, in[static_cast<size_t>(p)].data(), out.data(), count, t));
            std::vector<const uint8_t*> ins;
            for (int m : g) ins.push_back(in[static_cast<size_t>(m)].data());
            return expectBytes(out, naiveSum(t, ins, count), label("all_reduce", n, g, t, count));
          });
          ++checks;
        }
  MESSAGE(checks << " all-reduce configurations matched the reference bit for bit");
}

TEST_CASE("allReduceInPlace") {
  std::mt19937 rng(2);
  for (int n : {2, 4, 8})
    for (const Grouping& grouping : groupingsFor(n, rng))
      for (DType t : {DType::F32, DType::BF16, DType::I32}) {
        const int64_t count = 3001;
        std::vector<Bytes> in(static_cast<size_t>(n));
        for (auto& b : in) b = randomBytes(t, count, rng);
        std::vector<Bytes> buf = in;  // each device sums into its own input
        runOrFail(n, [&](int p) -> Status {
          const Group& g = groupOf(grouping, p);
          void* data = buf[static_cast<size_t>(p)].data();
          TSR_TRY(currentDevice()->comm->allReduce(p, g, data, data, count, t));
          std::vector<const uint8_t*> ins;
          for (int m : g) ins.push_back(in[static_cast<size_t>(m)].data());
          return expectBytes(buf[static_cast<size_t>(p)], naiveSum(t, ins, count),
                             "in-place " + label("all_reduce", n, g, t, count));
        });
      }
}

// Every member of a group holds the same bits, whichever member summed each element (f32 values whose sums
// round differently in another order).
TEST_CASE("allReduceIsBitIdenticalAcrossMembers") {
  std::mt19937 rng(3);
  const int n = 8;
  const int64_t count = 10007;
  std::vector<Bytes> in(n), out(n);
  for (int p = 0; p < n; ++p) in[p] = randomBytes(DType::F32, count, rng);
  const Group g = {6, 1, 7, 0, 3, 2, 5, 4};
  runOrFail(n, [&](int p) -> Status {
    out[p].resize(in[p].size());
    return currentDevice()->comm->allReduce(p, g, in[p].data(), out[p].data(), count, DType::F32);
  });
  for (int p = 1; p < n; ++p) REQUIRE(out[p] == out[0]);
  // The order matters for these values: a sum in position order differs somewhere.
  std::vector<const uint8_t*> inOrder;
  for (int p = 0; p < n; ++p) inOrder.push_back(in[p].data());
  REQUIRE(naiveSum(DType::F32, inOrder, count) != out[0]);
}

TEST_CASE("allGatherMatchesReference") {
  std::mt19937 rng(4);
  for (int n : {1, 2, 4, 8})
    for (const Grouping& grouping : groupingsFor(n, rng))
      for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{4096}}) {
        std::vector<Bytes> in(static_cast<size_t>(n));
        for (auto& b : in) b = randomBytes(DType::U8, bytes, rng);
        runOrFail(n, [&](int p) -> Status {
          const Group& g = groupOf(grouping, p);
          Bytes out(static_cast<size_t>(bytes) * g.size());
          TSR_TRY(currentDevice()->comm->allGather(p, g, in[static_cast<size_t>(p)].data(), out.data(), bytes));
          Bytes want;
          for (int m : g) {
            const Bytes& chunk = in[static_cast<size_t>(m)];
            want.insert(want.end(), chunk.begin(), chunk.end());
          }
          return expectBytes(out, want, label("all_gather", n, g, DType::U8, bytes));
        });
      }
}

TEST_CASE("reduceScatterMatchesReference") {
  std::mt19937 rng(5);
  for (int n : {1, 2, 4, 8})
    for (const Grouping& grouping : groupingsFor(n, rng))
      for (DType t : kSummable)
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{777}}) {
          std::vector<Bytes> in(static_cast<size_t>(n));
          for (int p = 0; p < n; ++p)
            in[static_cast<size_t>(p)] =
                randomBytes(t, count * static_cast<int64_t>(groupOf(grouping, p).size()), rng);
          runOrFail(n, [&](int p) -> Status {
            const Group& g = groupOf(grouping, p);
            Bytes out(static_cast<size_t>(count * dtypeSize(t)));
            const uint8_t* mine = in[static_cast<size_t>(p)].data();
            TSR_TRY(currentDevice()->comm->reduceScatter(p, g, mine, out.data(), count, t));
            // My chunk of every member, in group order.
            const int64_t chunk = count * dtypeSize(t);
            std::vector<const uint8_t*> ins;
            for (int m : g) ins.push_back(in[static_cast<size_t>(m)].data() + indexIn(g, p) * chunk);
            return expectBytes(out, naiveSum(t, ins, count), label("reduce_scatter", n, g, t, count));
          });
        }
}

TEST_CASE("allToAllMatchesReference") {
  std::mt19937 rng(6);
  for (int n : {1, 2, 4, 8})
    for (const Grouping& grouping : groupingsFor(n, rng))
      for (int64_t bytes : {int64_t{0}, int64_t{3}, int64_t{1024}}) {
        std::vector<Bytes> in(static_cast<size_t>(n));
        for (int p = 0; p < n; ++p)
          in[static_cast<size_t>(p)] =
              randomBytes(DType::U8, bytes * static_cast<int64_t>(groupOf(grouping, p).size()), rng);
        runOrFail(n, [&](int p) -> Status {
          const Group& g = groupOf(grouping, p);
          Bytes out(in[static_cast<size_t>(p)].size());
          TSR_TRY(currentDevice()->comm->allToAll(p, g, in[static_cast<size_t>(p)].data(), out.data(), bytes));
          // Chunk j of mine is member j's chunk at my index.
          Bytes want;
          const int me = indexIn(g, p);
          for (int m : g) {
            auto from = in[static_cast<size_t>(m)].begin() + me * bytes;
            want.insert(want.end(), from, from + bytes);
          }
          return expectBytes(out, want, label("all_to_all", n, g, DType::U8, bytes));
        });
      }
}

// Rings both ways, a chain whose head receives zeros, pairs inside the rows of a 4x2 mesh, and devices named
// in no pair.
TEST_CASE("permuteMatchesReference") {
  std::mt19937 rng(7);
  for (int n : {1, 2, 4, 8}) {
    std::vector<std::vector<std::pair<int, int>>> patterns;
    std::vector<std::pair<int, int>> right, left, chain, rows, some;
    for (int p = 0; p < n; ++p) {
      right.push_back({p, (p + 1) % n});
      left.push_back({p, (p + n - 1) % n});
      if (p + 1 < n) chain.push_back({p, p + 1});
      if (p % 2 == 0 && p + 1 < n) rows.push_back({p, p + 1}), rows.push_back({p + 1, p});
    }
    if (n >= 4) some = {{3, 0}, {1, 1}};
    patterns = {right, left, chain, rows, some};
    for (const auto& pairs : patterns) {
      const int64_t bytes = 257;
      std::vector<Bytes> in(static_cast<size_t>(n));
      for (auto& b : in) b = randomBytes(DType::U8, bytes, rng);
      runOrFail(n, [&](int p) -> Status {
        Bytes out(static_cast<size_t>(bytes), 0xab);
        TSR_TRY(currentDevice()->comm->permute(p, pairs, in[static_cast<size_t>(p)].data(), out.data(), bytes));
        Bytes want(static_cast<size_t>(bytes), 0);
        for (auto [s, t] : pairs)
          if (t == p) want = in[static_cast<size_t>(s)];
        return expectBytes(out, want, fmt::format("permute on {} devices, device {}", n, p));
      });
    }
  }
}

// Row and column groups of a 4x2 mesh, the whole mesh, and every kind of collective, back to back: every
// device makes 6 calls per round for 150 rounds, each checked, with no deadlock and no call meeting another.
TEST_CASE("interleavedCollectivesDoNotMix") {
  const int n = 8, rounds = 150;
  std::mt19937 seedRng(8);
  std::vector<Grouping> groupings = groupingsFor(n, seedRng);
  const uint32_t seed = seedRng();
  std::atomic<int> calls{0};
  runOrFail(n, [&](int p) -> Status {
    Communicator& comm = *currentDevice()->comm;
    for (int round = 0; round < rounds; ++round) {
      for (size_t gi = 0; gi < groupings.size(); ++gi) {
        const Group& g = groupOf(groupings[gi], p);
        // Every device's value this round is a function of (round, grouping, position): the reference is
        // computed without communication.
        auto valueOf = [&](int device, int64_t e) {
          return static_cast<int32_t>((round * 131 + static_cast<int>(gi) * 17 + device * 7 + e) ^ seed);
        };
        const int64_t count = 1 + (round % 5) * 33;
        std::vector<int32_t> x(static_cast<size_t>(count)), sum(static_cast<size_t>(count));
        for (int64_t e = 0; e < count; ++e) x[static_cast<size_t>(e)] = valueOf(p, e);
        if ((round + static_cast<int>(gi)) % 2 == 0) {
          TSR_TRY(comm.allReduce(p, g, x.data(), sum.data(), count, DType::I32));
          for (int64_t e = 0; e < count; ++e) {
            uint32_t want = 0;
            for (int m : g) want += static_cast<uint32_t>(valueOf(m, e));
            if (static_cast<uint32_t>(sum[static_cast<size_t>(e)]) != want)
              return makeError("round {} grouping {}: all_reduce element {} mixed up", round, gi, e);
          }
        } else {
          std::vector<int32_t> gathered(static_cast<size_t>(count) * g.size());
          TSR_TRY(comm.allGather(p, g, x.data(), gathered.data(), count * 4));
          for (size_t j = 0; j < g.size(); ++j)
            for (int64_t e = 0; e < count; ++e)
              if (gathered[j * static_cast<size_t>(count) + static_cast<size_t>(e)] != valueOf(g[j], e))
                return makeError("round {} grouping {}: all_gather chunk {} mixed up", round, gi, j);
        }
        calls.fetch_add(1);
      }
    }
    return Status{};
  });
  TSR_COMPARE(calls.load(), n * rounds * static_cast<int>(groupings.size()));
}

TEST_CASE("largeAllReduce") {
  std::mt19937 rng(9);
  const int n = 8;
  const int64_t count = (1 << 20) + 3;
  std::vector<Bytes> in(n);
  for (auto& b : in) b = randomBytes(DType::F32, count, rng);
  std::vector<const uint8_t*> ins;
  for (auto& b : in) ins.push_back(b.data());
  const Bytes want = naiveSum(DType::F32, ins, count);
  for (int repeat = 0; repeat < 3; ++repeat)
    runOrFail(n, [&](int p) -> Status {
      Bytes out(in[p].size());
      TSR_TRY(currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3, 4, 5, 6, 7}, in[p].data(), out.data(), count,
                                               DType::F32));
      return expectBytes(out, want, "large all_reduce");
    });
}

// Device 3 fails before its first collective: the others, blocked in an all-reduce that will never complete,
// return, and the run reports device 3's error (not the aborts it caused).
TEST_CASE("failingDeviceEndsTheRun") {
  for (int when : {0, 5}) {
    auto comm = makeInProcessCommunicator(8);
    std::atomic<int> returned{0};
    Status st = runOnDevices(*comm, [&](int p) -> Status {
      float x = 1, y = 0;
      for (int step = 0;; ++step) {
        if (p == 3 && step == when) return makeError("out of memory in step {}", step);
        Status s = currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3, 4, 5, 6, 7}, &x, &y, 1, DType::F32);
        if (!s.ok()) {
          returned.fetch_add(1);
          if (s.error().message.find("aborted") == std::string::npos)
            return makeError("unexpected: {}", s.error().message);
          return s;
        }
      }
    });
    REQUIRE(!st.ok());
    TSR_COMPARE(st.error().message, "device 3: out of memory in step " + std::to_string(when));
    TSR_COMPARE(returned.load(), 7);
    // The run is over: the next one starts clean, its collectives met call for call though the failed run left
    // device 3 `when` calls behind the others (the sums would mix steps, or wait forever, otherwise).
    std::vector<float> sums(8, 0);
    Status next = runOnDevices(*comm, [&](int p) -> Status {
      float x = static_cast<float>(p + 1);
      for (int step = 0; step < 3; ++step)
        TSR_TRY(currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3, 4, 5, 6, 7}, &x, &x, 1, DType::F32));
      sums[static_cast<size_t>(p)] = x;
      return {};
    });
    REQUIRE(next.ok());
    for (float v : sums) TSR_COMPARE(v, 36.0f * 64.0f);  // 1 + ... + 8, then times 8 twice
  }
}

// The other ways a device fails: an exception, and an error a kernel records with DeviceContext::fail while
// the program goes on to return success.
TEST_CASE("exceptionsAndRecordedErrorsEndTheRun") {
  {
    auto comm = makeInProcessCommunicator(4);
    Status st = runOnDevices(*comm, [&](int p) -> Status {
      if (p == 2) throw std::runtime_error("bad alloc");
      float x = 1;
      return currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3}, &x, &x, 1, DType::F32);
    });
    REQUIRE(!st.ok());
    TSR_COMPARE(st.error().message, std::string("device 2: bad alloc"));
  }
  {
    auto comm = makeInProcessCommunicator(4);
    Status st = runOnDevices(*comm, [&](int p) -> Status {
      if (p == 1) {
        currentDevice()->fail(Error{"kernel failed"});
        return Status{};
      }
      float x = 1;
      return currentDevice()->comm->allReduce(p, Group{0, 1, 2, 3}, &x, &x, 1, DType::F32);
    });
    REQUIRE(!st.ok());
    TSR_COMPARE(st.error().message, std::string("device 1: kernel failed"));
  }
}

// Members that disagree on the call all get an error instead of reading past each other's buffers; a group
// that does not name the caller, or names a device twice, is refused; bool cannot be summed.
TEST_CASE("mismatchedCallsFailOnEveryMember") {
  auto comm = makeInProcessCommunicator(2);
  std::vector<std::string> errors(2);
  Status st = runOnDevices(*comm, [&](int p) -> Status {
    float x[4] = {1, 2, 3, 4};
    Status s = currentDevice()->comm->allReduce(p, Group{0, 1}, x, x, p == 0 ? 4 : 3, DType::F32);
    errors[static_cast<size_t>(p)] = s.ok() ? "" : s.error().message;
    return Status{};
  });
  REQUIRE(st.ok());
  for (const auto& e : errors) REQUIRE_MESSAGE(e.find("members disagree") != std::string::npos, e.c_str());

  auto c = makeInProcessCommunicator(4);
  float x = 0;
  auto expectError = [](const Status& s, const char* part) {
    REQUIRE(!s.ok());
    REQUIRE_MESSAGE(s.error().message.find(part) != std::string::npos, s.error().message.c_str());
  };
  expectError(c->allReduce(0, Group{1, 2}, &x, &x, 1, DType::F32), "device 0 is not in its group [1,2]");
  expectError(c->allReduce(0, Group{0, 0}, &x, &x, 1, DType::F32), "names device 0 twice");
  expectError(c->allReduce(0, Group{0, 9}, &x, &x, 1, DType::F32), "names device 9, not one of the 4 devices");
  expectError(c->allReduce(0, Group{0}, &x, &x, 1, DType::Bool), "cannot sum bool");
  std::vector<std::pair<int, int>> twice = {{0, 1}, {0, 2}};
  expectError(c->permute(0, twice, &x, &x, 4), "device 0 is a source of more than one pair");
}

// Threads persist between runs; each device sees its own context, and the caller's is restored after.
TEST_CASE("runOnDevicesSetsEachContext") {
  auto comm = makeInProcessCommunicator(8);
  REQUIRE(currentDevice() == nullptr);
  for (int run = 0; run < 300; ++run) {
    std::vector<int> seen(8, -1);
    Status st = runOnDevices(*comm, [&](int p) -> Status {
      DeviceContext* ctx = currentDevice();
      if (!ctx || ctx->comm != comm.get()) return makeError("no context");
      seen[static_cast<size_t>(p)] = ctx->position;
      return Status{};
    });
    REQUIRE(st.ok());
    for (int p = 0; p < 8; ++p) TSR_COMPARE(seen[static_cast<size_t>(p)], p);
  }
  REQUIRE(currentDevice() == nullptr);
  // A run inside a run (the pool is busy) starts threads of its own.
  Status st = runOnDevices(*comm, [&](int p) -> Status {
    if (p != 0) return Status{};
    auto inner = makeInProcessCommunicator(3);
    return runOnDevices(*inner, [&](int q) -> Status {
      float x = 1;
      TSR_TRY(currentDevice()->comm->allReduce(q, Group{0, 1, 2}, &x, &x, 1, DType::F32));
      return x == 3 ? Status{} : makeError("inner sum {}", x);
    });
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
}

TEST_CASE("deviceCountIsValidated") {
  TSR_COMPARE(*parseCpuDeviceCount("8"), 8);
  TSR_COMPARE(*parseCpuDeviceCount("1"), 1);
  TSR_COMPARE(*parseCpuDeviceCount("256"), 256);
  for (const char* bad : {"0", "-2", "257", "eight", "8x", "", " 8"}) {
    auto r = parseCpuDeviceCount(bad);
    REQUIRE_MESSAGE(!r.ok(), bad);
  }
  TSR_COMPARE(parseCpuDeviceCount("0").error().message, std::string("0 devices: the count must be from 1 to 256"));
}
