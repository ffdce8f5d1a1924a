// A request to stop (Ctrl-C in Python) ends the engine's work at its next check: a compile between passes, a run
// between kernels, a loop at its next iteration. The work fails with "interrupted", and once the request is
// cleared the same function compiles and runs again.
#include "tests/check.h"

#include <chrono>
#include <thread>

#include "engine/compile/jit.h"
#include "engine/core/interrupt.h"
#include "engine/transform/api.h"
#include "engine/transform/control_flow.h"

using namespace tsr;

namespace {

Tree twice(const Tree& args, const StaticArgs&) { return Tree(mul(args.leaves()[0], Array::scalar(2.0))); }

Tree argsOf(const Array& x) { return Tree::list({Tree(x)}); }

// x: f32[16,16] -> tanh(x @ x), n times (each iteration a few kernels of the loop's body).
Tree longLoop(const Array& x, int64_t n) {
  return foriLoop(0, n, [](const Array&, const Tree& c) { return Tree(tanh(matmul(c.leaf(), c.leaf()))); }, Tree(x));
}

struct ClearInterrupt {
  ~ClearInterrupt() { clearInterrupt(); }
};

}  // namespace

namespace {

// Interrupts the next call of f (compiled before when `compiled`): it fails saying so, and once the request is
// cleared the call works again.
void interruptedCallRecovers(bool compiled) {
  ClearInterrupt clear;
  Jit f(twice, "twice");
  Array x = Array::full(Shape{4}, 3.0);
  if (compiled) REQUIRE(f.call(argsOf(x)).ok());
  requestInterrupt();
  auto r = f.call(argsOf(x));
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find(kInterruptedMessage) != std::string::npos, r.error().message);
  clearInterrupt();
  auto again = f.call(argsOf(x));
  REQUIRE_MESSAGE(again.ok(), again.error().message);
  TSR_COMPARE(again->leaves()[0].toFloats()[0], 6.0f);
}

}  // namespace

TEST_CASE("anInterruptedCompileFailsAndTheNextCompiles") { interruptedCallRecovers(false); }

TEST_CASE("anInterruptedRunFailsAndTheNextRuns") { interruptedCallRecovers(true); }

TEST_CASE("aLongLoopStopsAtItsNextIteration") {
  ClearInterrupt clear;
  Array x = Array::full(Shape{16, 16}, 0.01);
  // Ten million iterations would take minutes; the request comes 200 ms in.
  std::thread requester([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    requestInterrupt();
  });
  auto t0 = std::chrono::steady_clock::now();
  auto r = capture([&] { return longLoop(x, 10'000'000); });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  requester.join();
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find(kInterruptedMessage) != std::string::npos, r.error().message);
  // Far above one iteration's time: tells "stopped at a check" from "ran to the end".
  REQUIRE_MESSAGE(seconds < 30.0, "the loop stopped after " << seconds << " s");
  clearInterrupt();
  auto after = capture([&] { return longLoop(x, 2); });
  REQUIRE_MESSAGE(after.ok(), after.error().message);
  // A reference for two iterations: every element of x @ x is 16 * 0.01^2.
  const double once = std::tanh(16 * 0.01 * 0.01);
  TSR_COMPARE(after->leaf().toFloats()[0], static_cast<float>(std::tanh(16 * once * once)));
}
