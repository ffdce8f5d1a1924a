// engine/dist/rank_clocks: the ping-pong clock alignment on virtual devices whose clocks are skewed by known
// amounts (each device's clock = the steady clock + its skew): every measured offset is its skew within the
// reported bound. And gatherToFirst: position 0 receives every position's bytes, whatever their sizes.
#include "tests/check.h"

#include <chrono>
#include <string>

#include "engine/dist/communicator.h"
#include "engine/dist/rank_clocks.h"

using namespace tsr;
using namespace tsr::dist;

namespace {

// Skews chosen by hand: ahead, behind, far ahead (seconds), none.
constexpr int64_t kSkew[] = {0, 1'500'000, -42'000'000, 3'000'000'000, 0};

int64_t skewedClock() {
  int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now().time_since_epoch())
                    .count();
  DeviceContext* d = currentDevice();
  return now + (d ? kSkew[d->position] : 0);
}

}  // namespace

TEST_CASE("alignClocksRecoversKnownSkews") {
  auto comm = makeInProcessCommunicator(5);
  auto offsets = alignClocks(*comm, 8, &skewedClock);
  REQUIRE_MESSAGE(offsets.ok(), offsets.error().message);
  REQUIRE(offsets->size() == 5);
  TSR_COMPARE((*offsets)[0].offsetNs, int64_t{0});
  TSR_COMPARE((*offsets)[0].errorNs, int64_t{0});
  for (int r = 1; r < 5; ++r) {
    const ClockOffset& o = (*offsets)[static_cast<size_t>(r)];
    MESSAGE("device " << r << ": offset " << o.offsetNs << " ns, error bound " << o.errorNs << " ns");
    REQUIRE(o.errorNs > 0);
    REQUIRE(o.roundTripNs >= 2 * o.errorNs - 1);
    REQUIRE_MESSAGE(std::abs(o.offsetNs - kSkew[r]) <= o.errorNs,
                    "device " << r << ": measured " << o.offsetNs << ", skew " << kSkew[r] << ", bound " << o.errorNs);
  }
}

TEST_CASE("alignClocksOneDevice") {
  auto comm = makeInProcessCommunicator(1);
  auto offsets = alignClocks(*comm);
  REQUIRE(offsets.ok());
  REQUIRE(offsets->size() == 1);
  TSR_COMPARE((*offsets)[0].offsetNs, int64_t{0});
  REQUIRE(!alignClocks(*comm, 0).ok());
}

TEST_CASE("gatherToFirstBringsEveryPositionsBytes") {
  auto comm = makeInProcessCommunicator(4);
  std::vector<std::string> mine = {"rank zero", "", std::string(100'000, 'x'), "three"};
  mine[2][77] = '\0';  // bytes, not text
  auto all = gatherToFirst(*comm, mine);
  REQUIRE_MESSAGE(all.ok(), all.error().message);
  REQUIRE(all->size() == 4);
  for (size_t i = 0; i < 4; ++i) REQUIRE_MESSAGE((*all)[i] == mine[i], "position " << i);
  REQUIRE(!gatherToFirst(*comm, {"too few"}).ok());
}
