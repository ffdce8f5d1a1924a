// host_callback (jax.pure_callback, io_callback, jax.debug.callback): C++ functions called by programs, checked
// against values computed here by hand and against counts of the calls made. Effects run once per call of a
// compiled program (never at compile time), in program order, even when nothing uses them and inside a loop
// body; pure calls are dropped when unused and merged when equal; vmap calls once per example (sequential) or
// once with the batch; reverse mode refuses a cotangent through one; a failing callback fails the run with its
// message; the text form names the callback and parses back only while it lives.
#include "tests/check.h"

#include <atomic>
#include <stdexcept>

#include "engine/backends/cpu/schedule.h"
#include "engine/compile/compile.h"
#include "engine/compile/jit.h"
#include "engine/ir/graph.h"
#include "engine/ir/host_callback.h"
#include "engine/ops/registry.h"
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
