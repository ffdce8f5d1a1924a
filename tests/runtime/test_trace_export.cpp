// Chrome/Perfetto trace JSON: the documented keys and metadata, microsecond floats keeping nanoseconds, one
// process per device and one thread per stream, args that link events to kernels; read back as written.
#include "tests/check.h"

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/runtime/trace_export.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::runtime;
using nlohmann::json;

namespace {

// Two devices, two CPU threads, a kernel without a table entry, and two step marks. Times in ns.
Trace sampleTrace() {
  Trace t;
  int64_t t0 = 5'000'000'000;
  t.kernels = {{10, "train_step", "dot_general f32[8,4],f32[4,2]", "gemm", {3}, {"dot_general"}, "mlp.0"},
               {11, "train_step", "fusion.11 loop[add,relu]", "loop", {4, 5}, {"add", "relu"}, ""}};
  t.marks = {{"step 1", t0, 10'000}, {"step 2", t0 + 10'000, 9'000}};
  t.events = {{"cpu:0", 0, "dot_general f32[8,4],f32[4,2]", 10, t0 + 1'234, 2'000, 128, 112, -1, {}},
              {"cpu:0", 1, "fusion.11 loop[add,relu]", 11, t0 + 1'500, 501, 32, 96, -1, {}},
              {"cpu:0", 0, "fusion.11 loop[add,relu]", 11, t0 + 3'234, 500, 32, 96, -1, {}},
              {"cuda:0", 2, "memcpy", -1, t0 + 11'000, 7'777, 0, 4096, -1, {}}};
  return t;
}

}  // namespace

TEST_CASE("followsTheTraceEventFormat") {
  json doc = json::parse(toChromeTrace(sampleTrace()));
  REQUIRE(doc.is_object());
  REQUIRE((doc.contains("traceEvents") && doc["traceEvents"].is_array()));
  REQUIRE(doc.contains("displayTimeUnit"));
  REQUIRE((doc["displayTimeUnit"] == "ns" || doc["displayTimeUnit"] == "ms"));

  std::map<int, std::string> processes;
  std::set<std::pair<int, int>> namedThreads, usedThreads;
  int complete = 0;
  for (const json& e : doc["traceEvents"]) {
    REQUIRE((e.contains("ph") && e.contains("name") && e.contains("pid")));
    REQUIRE(e["pid"].is_number_integer());
    int pid = e["pid"].get<int>();
    if (e["ph"] == "M") {
      REQUIRE(e["args"]["name"].is_string());
      if (e["name"] == "process_name") processes[pid] = e["args"]["name"].get<std::string>();
      else if (e["name"] == "thread_name") namedThreads.insert({pid, e["tid"].get<int>()});
      else FAIL("unexpected metadata event");
      continue;
    }
    TSR_COMPARE(std::string(e["ph"]), std::string("X"));
    ++complete;
    REQUIRE(e["tid"].is_number_integer());
    REQUIRE((e["ts"].is_number() && e["dur"].is_number()));
    REQUIRE((e["ts"].get<double>() >= 0 && e["dur"].get<double>() >= 0));
    usedThreads.insert({pid, e["tid"].get<int>()});
  }
  TSR_COMPARE(complete, 6);  // 4 kernels + 2 marks
  for (const auto& th : usedThreads) {
    REQUIRE_MESSAGE(namedThreads.count(th), "every thread with events is named");
    REQUIRE_MESSAGE(processes.count(th.first), "every process with events is named");
  }
  // host (marks), cpu:0 and cuda:0 are three processes; cpu:0 has two threads.
  TSR_COMPARE(processes.size(), size_t(3));
  std::set<std::string> names;
  for (const auto& [pid, name] : processes) names.insert(name);
  TSR_COMPARE(names, (std::set<std::string>{"host", "cpu:0", "cuda:0"}));
}

TEST_CASE("timesAreMicrosecondsFromTheStartKeepingNanoseconds") {
  json doc = json::parse(toChromeTrace(sampleTrace()));
  std::map<std::string, std::vector<json>> byName;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X") byName[e["name"].get<std::string>()].push_back(e);
  // The first mark starts the trace; the GEMM starts 1234 ns later and lasts 2 us.
  TSR_COMPARE(byName["step 1"][0]["ts"].get<double>(), 0.0);
  TSR_COMPARE(byName["step 2"][0]["ts"].get<double>(), 10.0);
  TSR_COMPARE(byName["step 2"][0]["dur"].get<double>(), 9.0);
  const json& gemm = byName["dot_general f32[8,4],f32[4,2]"][0];
  TSR_COMPARE(gemm["ts"].get<double>(), 1.234);
  TSR_COMPARE(gemm["dur"].get<double>(), 2.0);
  TSR_COMPARE(byName["fusion.11 loop[add,relu]"][0]["dur"].get<double>(), 0.501);
  // Marks are on their own track, apart from every kernel.
  REQUIRE(byName["step 1"][0]["pid"] != gemm["pid"]);
}

TEST_CASE("argsLinkEventsToKernelsAndGiveRates") {
  json doc = json::parse(toChromeTrace(sampleTrace()));
  bool sawGemm = false, sawBare = false;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] != "X" || !e.contains("args")) continue;
    const json& a = e["args"];
    if (e["name"] == "dot_general f32[8,4],f32[4,2]") {
      sawGemm = true;
      TSR_COMPARE(a["fusion"].get<int>(), 10);
      TSR_COMPARE(std::string(a["kind"]), std::string("gemm"));
      TSR_COMPARE(std::string(e["cat"]), std::string("gemm"));
      TSR_COMPARE(a["nodes"], json::array({3}));
      TSR_COMPARE(a["ops"], json::array({"dot_general"}));
      TSR_COMPARE(std::string(a["module"]), std::string("mlp.0"));
      TSR_COMPARE(a["flops"].get<double>(), 128.0);
      TSR_COMPARE(a["bytes"].get<double>(), 112.0);
      // 128 flops in 2000 ns = 0.064 GFLOP/s; 112 bytes in 2000 ns = 0.056 GB/s.
      REQUIRE(std::abs(a["GFLOP/s"].get<double>() - 0.064) < 1e-12);
      REQUIRE(std::abs(a["GB/s"].get<double>() - 0.056) < 1e-12);
    }
    if (e["name"] == "memcpy") {
      sawBare = true;
      TSR_COMPARE(a["fusion"].get<int>(), -1);
      REQUIRE(!a.contains("kind"));
    }
  }
  REQUIRE((sawGemm && sawBare));
}

TEST_CASE("readsBackWhatItWrote") {
  Trace t = sampleTrace();
  test::TempDir dir;
  std::string path = dir.filePath("trace.json");
  REQUIRE(writeChromeTrace(path, t).ok());
  auto back = readChromeTrace(path);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  int64_t t0 = t.marks[0].startNs;
  TSR_COMPARE(back->events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    const ProfileEvent& a = t.events[i];
    const ProfileEvent& b = back->events[i];
    TSR_COMPARE(b.device, a.device);
    TSR_COMPARE(b.stream, a.stream);
    TSR_COMPARE(b.name, a.name);
    TSR_COMPARE(b.fusion, a.fusion);
    TSR_COMPARE(b.startNs, a.startNs - t0);
    TSR_COMPARE(b.durationNs, a.durationNs);
    TSR_COMPARE(b.flops, a.flops);
    TSR_COMPARE(b.bytes, a.bytes);
  }
  TSR_COMPARE(back->marks.size(), size_t(2));
  TSR_COMPARE(back->marks[1].name, std::string("step 2"));
  TSR_COMPARE(back->marks[1].startNs, int64_t(10'000));
  TSR_COMPARE(back->marks[1].durationNs, int64_t(9'000));
  TSR_COMPARE(back->kernels.size(), size_t(2));
  for (const FusionInfo& k : t.kernels) {
    const FusionInfo* r = back->kernel(k.id);
    REQUIRE(r);
    TSR_COMPARE(r->executable, k.executable);
    TSR_COMPARE(r->name, k.name);
    TSR_COMPARE(r->kind, k.kind);
    TSR_COMPARE(r->nodes, k.nodes);
    TSR_COMPARE(r->ops, k.ops);
    TSR_COMPARE(r->modulePath, k.modulePath);
  }
}

// A profile of two ranks: each rank's steps and memory counter belong to its own host process ("host (rank 1)"),
// and reading the file back gives each its rank again.
TEST_CASE("eachRanksStepsAndMemoryKeepTheirRank") {
  Trace t;
  t.marks = {{"step 1", 1000, 500, 0}, {"step 1", 1100, 450, 1}};
  t.memory = {{1000, 64, 0}, {1200, 96, 1}};
  json doc = json::parse(toChromeTrace(t));
  std::map<int64_t, std::string> processes;
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") processes[e["pid"].get<int64_t>()] = e["args"]["name"];
  std::vector<std::string> names;
  for (const auto& [pid, name] : processes) names.push_back(name);
  TSR_COMPARE(names, (std::vector<std::string>{"host (rank 0)", "host (rank 1)"}));
  for (const json& e : doc["traceEvents"])
    if (e["ph"] == "X" || e["ph"] == "C") {
      const bool rank1 = e["ph"] == "X" ? e["ts"].get<double>() > 0.05 : e["args"]["bytes"] == 96;
      TSR_COMPARE(processes[e["pid"].get<int64_t>()], std::string(rank1 ? "host (rank 1)" : "host (rank 0)"));
    }
  auto back = parseChromeTrace(doc.dump());
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  REQUIRE(back->marks.size() == 2);
  TSR_COMPARE(back->marks[0].rank, 0);
  TSR_COMPARE(back->marks[1].rank, 1);
  TSR_COMPARE(back->marks[1].startNs, int64_t{100});
  REQUIRE(back->memory.size() == 2);
  TSR_COMPARE(back->memory[0].rank, 0);
  TSR_COMPARE(back->memory[1].rank, 1);
  TSR_COMPARE(hostRank("host (rank 12)"), 12);
  TSR_COMPARE(hostRank("host"), 0);
  TSR_COMPARE(hostRank("cpu:3"), 0);
}

TEST_CASE("anEmptyTraceIsStillATrace") {
  json doc = json::parse(toChromeTrace(Trace{}));
  REQUIRE(doc["traceEvents"].is_array());
  TSR_COMPARE(doc["traceEvents"].size(), size_t(0));
  auto back = parseChromeTrace(toChromeTrace(Trace{}));
  REQUIRE(back.ok());
  REQUIRE(back->events.empty());
}

TEST_CASE("badFilesAreErrors") {
  REQUIRE(!parseChromeTrace("{").ok());
  REQUIRE(!parseChromeTrace("{\"events\": []}").ok());
  REQUIRE(!parseChromeTrace("42").ok());
  auto wrongType = parseChromeTrace(R"({"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": "soon"}]})");
  REQUIRE(!wrongType.ok());
  REQUIRE_MESSAGE(wrongType.error().message.find("malformed") != std::string::npos, wrongType.error().message.c_str());
  REQUIRE(!readChromeTrace("/nonexistent/trace.json").ok());
  // The array form, from other tools, reads too.
  auto array = parseChromeTrace(R"([{"ph": "X", "name": "k", "pid": 7, "tid": 3, "ts": 1.5, "dur": 2}])");
  REQUIRE(array.ok());
  TSR_COMPARE(array->events.size(), size_t(1));
  TSR_COMPARE(array->events[0].startNs, int64_t(1500));
  TSR_COMPARE(array->events[0].durationNs, int64_t(2000));
}

// Collectives: each call's waiting members are linked to its straggler by a flow ("s" then "f"), named with the
// wait, which is worked out here by hand: call 0 arrives at cpu:0 at 1,000 ns and cpu:1 at 1,750 (cpu:1 is the
// straggler, cpu:0 waited 750); call 1 at 5,000 and 4,800 (cpu:0 last, cpu:1 waited 200). A call whose other
// member is missing, and a launch that is no collective, get no link.
TEST_CASE("collectiveCallsLinkWaitingMembersToTheStraggler") {
  Trace t;
  auto launch = [](const char* device, int64_t start, int64_t seq, std::vector<int> group) {
    ProfileEvent e{device, 0, "all_reduce f32[4]", 7, start, 100, 0, 32, -1, {}};
    e.collective = seq;
    e.group = std::move(group);
    return e;
  };
  t.events = {launch("cpu:0", 1'000, 0, {0, 1}), launch("cpu:1", 1'750, 0, {0, 1}),
              launch("cpu:0", 5'000, 1, {0, 1}), launch("cpu:1", 4'800, 1, {0, 1}),
              launch("cpu:0", 9'000, 2, {0, 1}), {"cpu:1", 0, "fusion.3 loop[add]", 3, 9'500, 10, 0, 0, -1, {}}};
  json j = json::parse(toChromeTrace(t));
  std::map<std::string, int> pidOf;
  std::vector<json> starts, finishes;
  for (const json& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") pidOf[e["args"]["name"]] = e["pid"];
    if (e["ph"] == "s") starts.push_back(e);
    if (e["ph"] == "f") finishes.push_back(e);
  }
  REQUIRE(starts.size() == 2);
  REQUIRE(finishes.size() == 2);
  std::map<int64_t, json> finishOf;
  for (const json& f : finishes) finishOf[f["id"].get<int64_t>()] = f;
  std::map<int64_t, std::pair<std::string, std::string>> seen;  // wait -> (waiting pid's device, straggler)
  for (const json& s : starts) {
    const json& f = finishOf.at(s["id"].get<int64_t>());
    CHECK(f["bp"] == "e");
    const int64_t wait = s["args"]["wait_ns"];
    const std::string straggler = s["args"]["straggler"];
    CHECK(f["pid"] == pidOf.at(straggler));
    std::string waiting;
    for (const auto& [device, pid] : pidOf)
      if (pid == s["pid"]) waiting = device;
    seen[wait] = {waiting, straggler};
  }
  CHECK(seen.at(750) == std::make_pair(std::string("cpu:0"), std::string("cpu:1")));
  CHECK(seen.at(200) == std::make_pair(std::string("cpu:1"), std::string("cpu:0")));
  // The launches say which call they belong to.
  int tagged = 0;
  for (const json& e : j["traceEvents"])
    if (e["ph"] == "X" && e["args"].contains("collective")) {
      CHECK(e["args"]["group"] == "0,1");
      ++tagged;
    }
  CHECK(tagged == 5);
}
