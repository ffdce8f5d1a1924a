// host_callback (jax.pure_callback, io_callback, jax.debug.callback): C++ functions called by programs, checked
// against values computed here by hand and against counts of the calls made. Effects run once per call of a
// compiled program (never at compile time), in program order, even when nothing uses them and inside a loop
// body; pure calls are dropped when unused and merged when equal; vmap calls once per example (sequential) or
// once with the batch; reverse mode refuses a cotangent through one; a failing callback fails the run with its
// message; the text form names the callback and parses back only while it lives. In an SPMD program an effect
// with results runs once, on the mesh's first device, and every device gets its results (or its failure).
#include "tests/check.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "engine/backends/cpu/schedule.h"
#include "engine/compile/compile.h"
#include "engine/compile/jit.h"
#include "engine/dist/communicator.h"
#include "engine/ir/graph.h"
#include "engine/ir/host_callback.h"
#include "engine/ops/host_callback.h"
#include "engine/ops/registry.h"
#include "engine/runtime/interpreter.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/control_flow.h"
#include "engine/transform/trace.h"
#include "engine/transform/vmap.h"
#include "tests/transform/compare.h"

using namespace tsr;
using namespace tsr::test;

namespace {

struct Log {
  std::vector<std::string> events;
  int calls = 0;
};

// y = 2 x + 1 on f32 values of any shape (the shape the callback declares).
ir::HostCallbackPtr affine(const Aval& a, Log& log, bool effectful = false,
                           ir::VmapMethod vmap = ir::VmapMethod::Sequential) {
  ir::HostCallback cb;
  cb.name = "affine";
  cb.operands = {a};
  cb.results = {a};
  cb.effectful = effectful;
  cb.vmap = vmap;
  cb.fn = [&log](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> out) {
    ++log.calls;
    const float* x = in[0].as<float>();
    float* y = out[0].as<float>();
    for (int64_t i = 0; i < in[0].aval.numel(); ++i) y[i] = 2 * x[i] + 1;
  };
  return ir::makeHostCallback(std::move(cb));
}

// An effect with no results: appends "tag:<first value>" to the log.
ir::HostCallbackPtr note(const std::string& tag, const Aval& a, Log& log) {
  ir::HostCallback cb;
  cb.name = "note_" + tag;
  cb.operands = {a};
  cb.effectful = true;
  cb.fn = [&log, tag](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView>) {
    ++log.calls;
    log.events.push_back(fmt::format("{}:{}", tag, in[0].aval.numel() ? in[0].as<float>()[0] : 0.0f));
  };
  return ir::makeHostCallback(std::move(cb));
}

Array vec(std::vector<float> v) {
  auto n = static_cast<int64_t>(v.size());
  return Array::fromVector(std::move(v), Shape{n});
}

ir::Graph optimised(const std::function<std::vector<Array>(const std::vector<Array>&)>& f, std::vector<Aval> in) {
  auto traced = makeGraph(f, in, "callbacks");
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  ir::Graph g = traced->graph;
  auto st = compile::optimize(g);
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  return g;
}

// The positions of the devices that made the calls, in call order (calls come from the devices' threads).
struct DeviceLog {
  std::mutex mutex;
  std::vector<int> positions;
  void add() {
    const dist::DeviceContext* d = dist::currentDevice();
    std::lock_guard lock(mutex);
    positions.push_back(d ? d->position : -1);
  }
  std::vector<int> take() {
    std::lock_guard lock(mutex);
    return std::exchange(positions, {});
  }
};

// A sensor read (io_callback): x: f32[3] -> (f32[4]: x[0] + 0.5, -0.0, NaN, the call number; bool[2]: true,
// false; i32[]: -7 - the call number). Values a sum in f32 or a bool all_reduce would not carry bit for bit.
ir::HostCallbackPtr sensor(DeviceLog& log, std::atomic<int>& calls, bool fails = false) {
  ir::HostCallback cb;
  cb.name = "sensor";
  cb.operands = {Aval{Shape{3}, DType::F32}};
  cb.results = {Aval{Shape{4}, DType::F32}, Aval{Shape{2}, DType::Bool}, Aval{Shape{}, DType::I32}};
  cb.effectful = true;
  cb.fn = [&log, &calls, fails](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> out) {
    log.add();
    const int n = calls++;
    if (fails) throw std::runtime_error("sensor: the sensor is offline");
    float* f = out[0].as<float>();
    f[0] = in[0].as<float>()[0] + 0.5f;
    f[1] = -0.0f;
    f[2] = std::numeric_limits<float>::quiet_NaN();
    f[3] = static_cast<float>(n);
    bool* b = out[1].as<bool>();
    b[0] = true;
    b[1] = false;
    *out[2].as<int32_t>() = -7 - n;
  };
  return ir::makeHostCallback(std::move(cb));
}

// One SPMD run's outcome: runOnDevices' status, and each device's status and outputs (none outside the mesh).
struct MeshRun {
  Status status;
  std::vector<Status> device;
  std::vector<std::vector<Array>> outputs;
};

// Runs g as the SPMD runtime runs a partitioned program: compiled once, run at the same time by every device of
// a `numDevices`-device communicator, those of `mesh` inside a CallbackMeshScope, the others returning at once.
MeshRun runOnMesh(const ir::Graph& g, int numDevices, const std::vector<int>& mesh, const std::vector<Array>& in,
                  bool interpret = false) {
  std::unique_ptr<runtime::Executable> exe;
  if (!interpret) {
    ir::Graph program = g;
    auto st = compile::optimize(program);
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    auto made = compile::compileForDevice(program, compile::Options{});
    REQUIRE_MESSAGE(made.ok(), made.error().message);
    exe = std::move(*made);
  }
  std::vector<runtime::BufferPtr> buffers;
  for (const Array& a : in) buffers.push_back(a.buffer());
  MeshRun run;
  run.device.resize(static_cast<size_t>(numDevices));
  run.outputs.resize(static_cast<size_t>(numDevices));
  auto comm = dist::makeInProcessCommunicator(numDevices);
  run.status = dist::runOnDevices(*comm, [&](int p) -> Status {
    if (std::find(mesh.begin(), mesh.end(), p) == mesh.end()) return {};
    ops::CallbackMeshScope scope(mesh);
    auto r = exe ? exe->run(buffers) : runtime::interpret(g, ops::registry(), buffers);
    if (!r.ok()) {
      run.device[static_cast<size_t>(p)] = r.error();
      return r.takeError();
    }
    for (size_t o = 0; o < r->size(); ++o)
      run.outputs[static_cast<size_t>(p)].push_back(Array::fromBuffer((*r)[o], g.aval(g.outputs()[o])));
    return {};
  });
  return run;
}

// The bits of an array, for comparing -0.0 and NaN exactly.
std::vector<uint8_t> bitsOf(const Array& a) {
  const auto* p = static_cast<const uint8_t*>(a.buffer()->data());
  return {p, p + a.aval().bytes()};
}

ir::Graph traced(const std::function<std::vector<Array>(const std::vector<Array>&)>& f, std::vector<Aval> in) {
  auto t = makeGraph(f, in, "spmd_callbacks");
  REQUIRE_MESSAGE(t.ok(), t.error().message);
  REQUIRE(t->graph.inputs().size() == in.size());
  return t->graph;
}

}  // namespace

TEST_CASE("callbackEagerlyAndUnderJit") {
  Log log;
  Array x = vec({1, -2, 0.5f});
  auto cb = affine(x.aval(), log);
  TSR_COMPARE(hostCallback(cb, {x})[0].toDoubles(), (std::vector<double>{3, -3, 2}));
  CHECK(log.calls == 1);
  Jit j = jit([&](const std::vector<Array>& a) { return std::vector<Array>{hostCallback(cb, {a[0] * 2.0})[0] - 1.0}; });
  for (int call = 0; call < 2; ++call) {
    auto r = j({x});
    REQUIRE_MESSAGE(r.ok(), r.error().message);
    TSR_COMPARE((*r)[0].toDoubles(), (std::vector<double>{4, -8, 2}));  // 2 (2 x) + 1 - 1
  }
  CHECK(log.calls == 3);  // once per run, none while compiling
}

TEST_CASE("effectsRunInProgramOrderWhenNothingUsesThem") {
  Log log;
  Aval s{Shape{4}, DType::F32};
  auto a = note("a", s, log), b = note("b", s, log), c = note("c", s, log);
  Jit j = jit([&](const std::vector<Array>& in) {
    Array x = in[0];
    hostCallback(a, {x});
    Array big = broadcastTo(x, Shape{256, 4}) * 3.0;  // an intermediate the scheduler would like to free early
    hostCallback(b, {sum(big, {0}) / 256.0});
    hostCallback(c, {x + 1.0});
    return std::vector<Array>{x * 2.0};
  });
  for (int call = 0; call < 2; ++call) {
    auto r = j({vec({1, 2, 3, 4})});
    REQUIRE_MESSAGE(r.ok(), r.error().message);
  }
  REQUIRE(log.events.size() == 6);
  CHECK(log.events == std::vector<std::string>{"a:1", "b:3", "c:2", "a:1", "b:3", "c:2"});
}

TEST_CASE("theSchedulerKeepsEffectsInOrder") {
  // Two effects reading an input: the first allocates 1 MiB (read by a third kernel), the second 4 bytes. By
  // memory alone the second would run first; ordered, it waits for the first.
  std::vector<cpu::ScheduleItem> items(3);
  items[0] = {{0}, {1}, true};
  items[1] = {{1}, {2}, false};
  items[2] = {{0}, {3}, true};
  std::vector<int64_t> bytes{4, 1 << 20, 4, 4};
  std::vector<bool> pinned{true, false, false, false};
  auto position = [](const std::vector<int>& order, int i) {
    return std::find(order.begin(), order.end(), i) - order.begin();
  };
  std::vector<int> order = cpu::scheduleForMemory(items, bytes, pinned);
  CHECK(position(order, 0) < position(order, 2));
  items[0].ordered = items[2].ordered = false;
  order = cpu::scheduleForMemory(items, bytes, pinned);
  CHECK(position(order, 2) < position(order, 0));  // what the order above overrides
}

TEST_CASE("pureCallsAreDroppedWhenUnusedAndMergedWhenEqual") {
  Log log;
  Aval s{Shape{3}, DType::F32};
  auto pure = affine(s, log, false), effect = affine(s, log, true);
  ir::Graph unused = optimised([&](const std::vector<Array>& in) {
    hostCallback(pure, {in[0]});
    hostCallback(effect, {in[0]});
    return std::vector<Array>{in[0] + 1.0};
  }, {s});
  CHECK(countOf(unused, ir::OpCode::HostCallback) == 1);  // the effect stays
  ir::Graph twice = optimised([&](const std::vector<Array>& in) {
    Array p = hostCallback(pure, {in[0]})[0] + hostCallback(pure, {in[0]})[0];
    Array e = hostCallback(effect, {in[0]})[0] + hostCallback(effect, {in[0]})[0];
    return std::vector<Array>{p, e};
  }, {s});
  CHECK(countOf(twice, ir::OpCode::HostCallback) == 3);  // the pure pair merged, the effects not
  // Constants in, nothing folded at compile time: the callback has not run.
  ir::Graph constant = optimised([&](const std::vector<Array>&) {
    return std::vector<Array>{hostCallback(pure, {vec({1, 2, 3})})[0]};
  }, {s});
  CHECK(countOf(constant, ir::OpCode::HostCallback) == 1);
  CHECK(log.calls == 0);
}

TEST_CASE("anEffectInALoopBodyRunsEachIteration") {
  Log log;
  Aval s{Shape{}, DType::F32};
  auto tick = note("t", s, log);
  Jit j = jit([&](const std::vector<Array>& in) {
    auto [carry, ys] = scan([&](const Tree& c, const Tree&) {
      hostCallback(tick, {c.leaf()});
      return std::make_pair(Tree(c.leaf() + 1.0), Tree::list());
    }, Tree(in[0]), Tree::list(), 3);
    (void)carry;
    return std::vector<Array>{in[0] * 1.0};  // the scan's results are unused: its body's effect keeps it
  });
  auto r = j({Array::scalar(5.0)});
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  CHECK(log.events == std::vector<std::string>{"t:5", "t:6", "t:7"});
}

TEST_CASE("vmapCallsPerExampleOrWithTheBatch") {
  Log log;
  Array xs = Array::fromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{3, 2});
  auto seq = affine(Aval{Shape{2}, DType::F32}, log);
  auto out = vmap([&](const std::vector<Array>& a) { return hostCallback(seq, {a[0]}); })({xs});
  TSR_COMPARE(out[0].toDoubles(), (std::vector<double>{3, 5, 7, 9, 11, 13}));
  CHECK(log.calls == 3);
  // broadcast_all: one call with the whole batch (the function takes any shape).
  log.calls = 0;
  ir::HostCallback whole;
  whole.name = "scale_rows";
  whole.operands = {Aval{Shape{2}, DType::F32}};
  whole.results = {Aval{Shape{2}, DType::F32}};
  whole.vmap = ir::VmapMethod::BroadcastAll;
  whole.fn = [&log](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> o) {
    ++log.calls;
    REQUIRE(in[0].aval.shape == Shape{3, 2});
    for (int64_t i = 0; i < 6; ++i) o[0].as<float>()[i] = in[0].as<float>()[i] * 10;
  };
  auto batched = ir::makeHostCallback(std::move(whole));
  out = vmap([&](const std::vector<Array>& a) { return hostCallback(batched, {a[0]}); })({xs});
  TSR_COMPARE(out[0].toDoubles(), (std::vector<double>{10, 20, 30, 40, 50, 60}));
  CHECK(log.calls == 1);
  // Refused: JAX's default for pure_callback.
  auto refused = affine(Aval{Shape{2}, DType::F32}, log, false, ir::VmapMethod::Refused);
  auto callRefused = [&](const std::vector<Array>& a) { return hostCallback(refused, {a[0]}); };
  std::string e = errorOf([&] { vmap(callRefused)({xs}); });
  CHECK_MESSAGE(e.find("affine: vmap needs to know how to batch the call") != std::string::npos, e);
}

TEST_CASE("gradPassesEffectsAndRefusesCotangentsThroughCallbacks") {
  Log log;
  Aval s{Shape{3}, DType::F32};
  auto seen = note("x", s, log);
  auto loss = [&](const Tree& p) {
    hostCallback(seen, {p.leaf()});
    return sum(p.leaf() * p.leaf());
  };
  TSR_COMPARE(grad(loss)(Tree(vec({1, 2, 3}))).leaf().toDoubles(), (std::vector<double>{2, 4, 6}));
  CHECK(log.events == std::vector<std::string>{"x:1"});
  auto pure = affine(s, log);
  auto through = [&](const Tree& p) { return sum(hostCallback(pure, {p.leaf()})[0]); };
  std::string e = errorOf([&] { grad(through)(Tree(vec({1, 2, 3}))); });
  CHECK_MESSAGE(e.find("affine: a host callback has no derivative") != std::string::npos, e);
  CHECK_MESSAGE(e.find("custom_vjp") != std::string::npos, e);
}

TEST_CASE("aFailingCallbackFailsTheRunWithItsMessage") {
  ir::HostCallback cb;
  cb.name = "fails";
  cb.operands = {Aval{Shape{2}, DType::F32}};
  cb.results = {Aval{Shape{2}, DType::F32}};
  cb.fn = [](std::span<const ir::TensorView>, std::span<const ir::MutableTensorView>) {
    throw std::runtime_error("fails: the sensor is offline");
  };
  auto ptr = ir::makeHostCallback(std::move(cb));
  std::string e = errorOf([&] { hostCallback(ptr, {vec({1, 2})}); });
  CHECK_MESSAGE(e.find("the sensor is offline") != std::string::npos, e);
  Jit j = jit([&](const std::vector<Array>& a) { return hostCallback(ptr, {a[0] + 1.0}); });
  auto r = j({vec({1, 2})});
  REQUIRE(!r.ok());
  CHECK_MESSAGE(r.error().message.find("the sensor is offline") != std::string::npos, r.error().message);
  // Wrong operands for the callback: a shape error at the call, naming both.
  e = errorOf([&] { hostCallback(ptr, {vec({1, 2, 3})}); });
  const bool namesBoth = e.find("host_callback") != std::string::npos && e.find("f32[2]") != std::string::npos;
  CHECK_MESSAGE(namesBoth, e);
}

TEST_CASE("theTextFormNamesTheCallbackWhileItLives") {
  Log log;
  Aval s{Shape{3}, DType::F32};
  auto cb = affine(s, log);
  auto traced = makeGraph([&](const std::vector<Array>& a) { return hostCallback(cb, {a[0]}); }, {s}, "f");
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  std::string text = ir::print(traced->graph, ops::registry());
  CHECK_MESSAGE(text.find(fmt::format("host_callback(%0) {{callback={}}}", cb->id)) != std::string::npos, text);
  auto parsed = ir::parse(text, ops::registry());
  REQUIRE_MESSAGE(parsed.ok(), parsed.error().message);
  CHECK(ir::verify(*parsed, ops::registry()).ok());
  const int64_t id = cb->id;
  traced = Error{"dropped"};
  cb.reset();  // the last holder: the callback is gone
  CHECK(ir::hostCallbackOf(ir::HostCallbackAttrs{id, nullptr}) == nullptr);
  auto stale = ir::parse(text, ops::registry());
  Status st = stale.ok() ? ir::verify(*stale, ops::registry()) : Status(stale.error());
  REQUIRE(!st.ok());
  CHECK_MESSAGE(st.error().message.find(fmt::format("no callback {} in this process", id)) != std::string::npos,
                st.error().message);
}

TEST_CASE("anEffectWithResultsRunsOnceInAnSpmdProgramAndEveryDeviceGetsItsResults") {
  DeviceLog log;
  std::atomic<int> calls{0};
  auto cb = sensor(log, calls);
  Aval s{Shape{3}, DType::F32};
  ir::Graph g = traced([&](const std::vector<Array>& a) { return hostCallback(cb, {a[0] * 2.0}); }, {s});
  Array x = vec({1, 2, 3});
  // What a device gets: the first call's values, bit for bit.
  auto expectFirstCall = [&](const std::vector<Array>& out, int call) {
    REQUIRE(out.size() == 3);
    const float want[4] = {2.5f, -0.0f, std::numeric_limits<float>::quiet_NaN(), static_cast<float>(call)};
    std::vector<uint8_t> wantBits(16);
    std::memcpy(wantBits.data(), want, 16);
    CHECK(bitsOf(out[0]) == wantBits);
    CHECK(bitsOf(out[1]) == std::vector<uint8_t>{1, 0});
    CHECK(out[2].toDoubles() == std::vector<double>{-7.0 - call});
  };
  for (bool interpret : {false, true}) {
    CAPTURE(interpret);
    calls = 0;
    for (int call = 0; call < 2; ++call) {
      MeshRun run = runOnMesh(g, 4, {0, 1, 2, 3}, {x}, interpret);
      REQUIRE_MESSAGE(run.status.ok(), run.status.error().message);
      CHECK(log.take() == std::vector<int>{0});  // once per run, on the mesh's first device
      for (int p = 0; p < 4; ++p) expectFirstCall(run.outputs[static_cast<size_t>(p)], call);
    }
  }
  // A mesh of some of the devices, in its own order: its first device calls; the others outside it never join.
  calls = 0;
  MeshRun part = runOnMesh(g, 4, {3, 1}, {x});
  REQUIRE_MESSAGE(part.status.ok(), part.status.error().message);
  CHECK(log.take() == std::vector<int>{3});
  expectFirstCall(part.outputs[3], 0);
  expectFirstCall(part.outputs[1], 0);
  CHECK(part.outputs[0].empty());
  // An effect with no results (a print) runs on the mesh's first device too; it broadcasts nothing.
  ir::HostCallback print;
  print.name = "print";
  print.operands = {s};
  print.effectful = true;
  print.fn = [&log](std::span<const ir::TensorView>, std::span<const ir::MutableTensorView>) { log.add(); };
  auto printer = ir::makeHostCallback(std::move(print));
  ir::Graph printing = traced([&](const std::vector<Array>& a) {
    hostCallback(printer, {a[0]});
    return std::vector<Array>{a[0] + 1.0};
  }, {s});
  REQUIRE(runOnMesh(printing, 4, {2, 3}, {x}).status.ok());
  CHECK(log.take() == std::vector<int>{2});
  // Pure calls run on every device; so does an effect where no mesh is named (a shard_map body's blocks differ).
  Log plain;
  auto pure = affine(s, plain);
  ir::Graph p = traced([&](const std::vector<Array>& a) { return hostCallback(pure, {a[0]}); }, {s});
  REQUIRE(runOnMesh(p, 4, {0, 1, 2, 3}, {x}).status.ok());
  CHECK(plain.calls == 4);
  auto comm = dist::makeInProcessCommunicator(2);
  auto exe = compile::compileForDevice(g, compile::Options{});
  REQUIRE(exe.ok());
  Status st = dist::runOnDevices(*comm, [&](int) -> Status {
    std::vector<runtime::BufferPtr> in{x.buffer()};
    auto r = (*exe)->run(in);
    return r.ok() ? Status{} : Status(r.takeError());
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  CHECK(log.take().size() == 2);
  // A print where no mesh is named: each device prints its own (a shard_map body's block).
  auto printingExe = compile::compileForDevice(printing, compile::Options{});
  REQUIRE(printingExe.ok());
  st = dist::runOnDevices(*comm, [&](int) -> Status {
    std::vector<runtime::BufferPtr> in{x.buffer()};
    auto r = (*printingExe)->run(in);
    return r.ok() ? Status{} : Status(r.takeError());
  });
  REQUIRE_MESSAGE(st.ok(), st.error().message);
  auto printed = log.take();
  std::sort(printed.begin(), printed.end());
  CHECK(printed == std::vector<int>{0, 1});
}

TEST_CASE("anEffectWithResultsInAnSpmdLoopOrVmapRunsOncePerIterationOrExample") {
  DeviceLog log;
  std::atomic<int> calls{0};
  auto cb = sensor(log, calls);
  Aval s{Shape{3}, DType::F32};
  // scan: each iteration's call on the first device; the carry takes its results, so a device that got other
  // values would end with another sum.
  ir::Graph loop = traced([&](const std::vector<Array>& a) {
    auto [carry, ys] = scan([&](const Tree& c, const Tree&) {
      std::vector<Array> r = hostCallback(cb, {a[0]});
      return std::make_pair(Tree(c.leaf() + astype(r[2], DType::F32)), Tree::list());
    }, Tree(Array::scalar(0.0)), Tree::list(), 3);
    (void)ys;
    return std::vector<Array>{carry.leaf()};
  }, {s});
  MeshRun run = runOnMesh(loop, 4, {0, 1, 2, 3}, {vec({1, 2, 3})});
  REQUIRE_MESSAGE(run.status.ok(), run.status.error().message);
  CHECK(log.take() == std::vector<int>{0, 0, 0});
  for (int p = 0; p < 4; ++p) CHECK(run.outputs[static_cast<size_t>(p)][0].toDoubles() == std::vector<double>{-24});
  // vmap (sequential): one call per example, all on the first device, in one kernel.
  calls = 0;
  auto batched = [&](const std::vector<Array>& a) {
    return vmap([&](const std::vector<Array>& e) { return std::vector<Array>{hostCallback(cb, {e[0]})[2]}; })(a);
  };
  ir::Graph g = traced(batched, {Aval{Shape{2, 3}, DType::F32}});
  run = runOnMesh(g, 2, {0, 1}, {Array::fromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3})});
  REQUIRE_MESSAGE(run.status.ok(), run.status.error().message);
  CHECK(log.take() == std::vector<int>{0, 0});
  for (int p = 0; p < 2; ++p) CHECK(run.outputs[static_cast<size_t>(p)][0].toDoubles() == std::vector<double>{-7, -8});
}

TEST_CASE("aFailingEffectInAnSpmdProgramFailsEveryDeviceWithItsError") {
  DeviceLog log;
  std::atomic<int> calls{0};
  auto cb = sensor(log, calls, true);
  Aval s{Shape{3}, DType::F32};
  ir::Graph g = traced([&](const std::vector<Array>& a) {
    std::vector<Array> r = hostCallback(cb, {a[0]});
    return std::vector<Array>{r[0] + 1.0};
  }, {s});
  for (const std::vector<int>& mesh : {std::vector<int>{0, 1, 2, 3}, std::vector<int>{2, 0}}) {
    for (int repeat = 0; repeat < 10; ++repeat) {  // which device reports first must not matter
      MeshRun run = runOnMesh(g, 4, mesh, {vec({1, 2, 3})});
      REQUIRE(!run.status.ok());
      const std::string& e = run.status.error().message;
      CHECK_MESSAGE(e.find(fmt::format("device {}: ", mesh[0])) == 0, e);
      CHECK_MESSAGE(e.find("the sensor is offline") != std::string::npos, e);
      for (int p : mesh) {
        const Status& st = run.device[static_cast<size_t>(p)];
        REQUIRE_MESSAGE(!st.ok(), p);
        const char* says = p == mesh[0] ? "the sensor is offline" : "the call on device";
        CHECK_MESSAGE(st.error().message.find(says) != std::string::npos, st.error().message);
      }
      CHECK(log.take() == std::vector<int>{mesh[0]});
    }
  }
}

TEST_CASE("aProgramThatAnEffectRunsIsItsDevicesAlone") {
  // The outer effect's function runs a jitted program with an effect of its own on the first device's thread: that
  // call must not look for the mesh's other devices, which are waiting for the outer call's results.
  DeviceLog log;
  std::atomic<int> calls{0};
  auto inner = sensor(log, calls);
  Aval s{Shape{3}, DType::F32};
  Jit nested = jit([&](const std::vector<Array>& a) { return std::vector<Array>{hostCallback(inner, {a[0]})[2]}; });
  ir::HostCallback outer;
  outer.name = "outer";
  outer.operands = {s};
  outer.results = {Aval{Shape{}, DType::I32}};
  outer.effectful = true;
  outer.fn = [&](std::span<const ir::TensorView> in, std::span<const ir::MutableTensorView> out) {
    auto r = nested({Array::fromBytes(in[0].aval, in[0].data)});
    if (!r.ok()) throw std::runtime_error(r.error().message);
    *out[0].as<int32_t>() = static_cast<int32_t>((*r)[0].toDoubles()[0]) * 10;
  };
  auto cb = ir::makeHostCallback(std::move(outer));
  ir::Graph g = traced([&](const std::vector<Array>& a) { return hostCallback(cb, {a[0]}); }, {s});
  MeshRun run = runOnMesh(g, 2, {0, 1}, {vec({1, 2, 3})});
  REQUIRE_MESSAGE(run.status.ok(), run.status.error().message);
  CHECK(log.take() == std::vector<int>{0});
  for (int p = 0; p < 2; ++p) CHECK(run.outputs[static_cast<size_t>(p)][0].toDoubles() == std::vector<double>{-70});
}
