// Runs every op case through (1) the op's CPU kernel and (2) a one-node graph run by the reference interpreter
// and by every registered backend that can run here (harness.h: runConformance), comparing each with the
// independent reference. Also checks that every core op has cases.
#include "tests/check.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/ops/registry.h"
#include "tests/ops/harness.h"

using namespace tsr;
using namespace tsr::test;

namespace {

// Every op case, built once for the program.
const std::vector<OpCase>& opCases() {
  static const std::vector<OpCase> all = allCases();
  return all;
}

}  // namespace

TEST_CASE("everyCoreOpHasCases") {
  std::set<ir::OpCode> covered;
  for (const auto& c : opCases()) covered.insert(c.op);
  std::vector<std::string> missing;
  for (const auto& def : ops::registry().all())
    if (static_cast<uint32_t>(def.code) < ir::kNumCoreOps && !covered.count(def.code)) missing.push_back(def.name);
  REQUIRE_MESSAGE(missing.empty(), "ops without conformance cases: " << join(missing, ", "));
  REQUIRE(opCases().size() > 500);
}

TEST_CASE("kernelsMatchReference") {
  ConformanceReport report = runConformance(opCases());
  const std::vector<std::string>& messages = report.messages;
  const size_t failures = messages.size();
  if (failures) {
    // The first messages, then a count per op so that one broken op cannot hide another.
    for (size_t i = 0; i < std::min<size_t>(40, messages.size()); ++i) MESSAGE(messages[i]);
    std::map<std::string, int> perOp;
    for (const auto& m : messages) perOp[m.substr(0, m.find(' '))]++;
    for (const auto& [op, n] : perOp) MESSAGE(op << ": " << n << " failures");
  }
  std::string runs;
  for (const auto& [target, n] : report.graphRuns) runs += " " + std::to_string(n) + " on " + target + ";";
  for (const std::string& why : report.unavailable) MESSAGE("not run: " << why);
  MESSAGE(opCases().size() << " op cases, graph runs (direct, transposed and broadcast operands):" << runs);
  REQUIRE((report.graphRuns[kInterpreter] > 0 && report.graphRuns["cpu"] == report.graphRuns[kInterpreter]));
  REQUIRE_MESSAGE(failures == 0, failures << " of " << opCases().size() << " op cases failed");
}
