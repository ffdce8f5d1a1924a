// Chrome/Perfetto trace JSON: the documented keys and metadata, microsecond floats keeping nanoseconds, one
// process per device and one thread per stream, args that link events to kernels; read back as written.
#include <QtTest>

#include <QTemporaryDir>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "engine/runtime/trace_export.h"

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
  t.events = {{"cpu:0", 0, "dot_general f32[8,4],f32[4,2]", 10, t0 + 1'234, 2'000, 128, 112},
              {"cpu:0", 1, "fusion.11 loop[add,relu]", 11, t0 + 1'500, 501, 32, 96},
              {"cpu:0", 0, "fusion.11 loop[add,relu]", 11, t0 + 3'234, 500, 32, 96},
              {"cuda:0", 2, "memcpy", -1, t0 + 11'000, 7'777, 0, 4096}};
  return t;
}

}  // namespace

class TestTraceExport : public QObject {
  Q_OBJECT
 private slots:
  void followsTheTraceEventFormat() {
    json doc = json::parse(toChromeTrace(sampleTrace()));
    QVERIFY(doc.is_object());
    QVERIFY(doc.contains("traceEvents") && doc["traceEvents"].is_array());
    QVERIFY(doc.contains("displayTimeUnit"));
    QVERIFY(doc["displayTimeUnit"] == "ns" || doc["displayTimeUnit"] == "ms");

    std::map<int, std::string> processes;
    std::set<std::pair<int, int>> namedThreads, usedThreads;
    int complete = 0;
    for (const json& e : doc["traceEvents"]) {
      QVERIFY(e.contains("ph") && e.contains("name") && e.contains("pid"));
      QVERIFY(e["pid"].is_number_integer());
      int pid = e["pid"].get<int>();
      if (e["ph"] == "M") {
        QVERIFY(e["args"]["name"].is_string());
        if (e["name"] == "process_name") processes[pid] = e["args"]["name"].get<std::string>();
        else if (e["name"] == "thread_name") namedThreads.insert({pid, e["tid"].get<int>()});
        else QFAIL("unexpected metadata event");
        continue;
      }
      QCOMPARE(std::string(e["ph"]), std::string("X"));
      ++complete;
      QVERIFY(e["tid"].is_number_integer());
      QVERIFY(e["ts"].is_number() && e["dur"].is_number());
      QVERIFY(e["ts"].get<double>() >= 0 && e["dur"].get<double>() >= 0);
      usedThreads.insert({pid, e["tid"].get<int>()});
    }
    QCOMPARE(complete, 6);  // 4 kernels + 2 marks
    for (const auto& th : usedThreads) {
      QVERIFY2(namedThreads.count(th), "every thread with events is named");
      QVERIFY2(processes.count(th.first), "every process with events is named");
    }
    // host (marks), cpu:0 and cuda:0 are three processes; cpu:0 has two threads.
    QCOMPARE(processes.size(), size_t(3));
    std::set<std::string> names;
    for (const auto& [pid, name] : processes) names.insert(name);
    QCOMPARE(names, (std::set<std::string>{"host", "cpu:0", "cuda:0"}));
  }

  void timesAreMicrosecondsFromTheStartKeepingNanoseconds() {
    json doc = json::parse(toChromeTrace(sampleTrace()));
    std::map<std::string, std::vector<json>> byName;
    for (const json& e : doc["traceEvents"])
      if (e["ph"] == "X") byName[e["name"].get<std::string>()].push_back(e);
    // The first mark starts the trace; the GEMM starts 1234 ns later and lasts 2 us.
    QCOMPARE(byName["step 1"][0]["ts"].get<double>(), 0.0);
    QCOMPARE(byName["step 2"][0]["ts"].get<double>(), 10.0);
    QCOMPARE(byName["step 2"][0]["dur"].get<double>(), 9.0);
    const json& gemm = byName["dot_general f32[8,4],f32[4,2]"][0];
    QCOMPARE(gemm["ts"].get<double>(), 1.234);
    QCOMPARE(gemm["dur"].get<double>(), 2.0);
    QCOMPARE(byName["fusion.11 loop[add,relu]"][0]["dur"].get<double>(), 0.501);
    // Marks are on their own track, apart from every kernel.
    QVERIFY(byName["step 1"][0]["pid"] != gemm["pid"]);
  }

  void argsLinkEventsToKernelsAndGiveRates() {
    json doc = json::parse(toChromeTrace(sampleTrace()));
    bool sawGemm = false, sawBare = false;
    for (const json& e : doc["traceEvents"]) {
      if (e["ph"] != "X" || !e.contains("args")) continue;
      const json& a = e["args"];
      if (e["name"] == "dot_general f32[8,4],f32[4,2]") {
        sawGemm = true;
        QCOMPARE(a["fusion"].get<int>(), 10);
        QCOMPARE(std::string(a["kind"]), std::string("gemm"));
        QCOMPARE(std::string(e["cat"]), std::string("gemm"));
        QCOMPARE(a["nodes"], json::array({3}));
        QCOMPARE(a["ops"], json::array({"dot_general"}));
        QCOMPARE(std::string(a["module"]), std::string("mlp.0"));
        QCOMPARE(a["flops"].get<double>(), 128.0);
        QCOMPARE(a["bytes"].get<double>(), 112.0);
        // 128 flops in 2000 ns = 0.064 GFLOP/s; 112 bytes in 2000 ns = 0.056 GB/s.
        QVERIFY(std::abs(a["GFLOP/s"].get<double>() - 0.064) < 1e-12);
        QVERIFY(std::abs(a["GB/s"].get<double>() - 0.056) < 1e-12);
      }
      if (e["name"] == "memcpy") {
        sawBare = true;
        QCOMPARE(a["fusion"].get<int>(), -1);
        QVERIFY(!a.contains("kind"));
      }
    }
    QVERIFY(sawGemm && sawBare);
  }

  void readsBackWhatItWrote() {
    Trace t = sampleTrace();
    QTemporaryDir dir;
    std::string path = dir.filePath("trace.json").toStdString();
    QVERIFY(writeChromeTrace(path, t).ok());
    auto back = readChromeTrace(path);
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
    int64_t t0 = t.marks[0].startNs;
    QCOMPARE(back->events.size(), t.events.size());
    for (size_t i = 0; i < t.events.size(); ++i) {
      const ProfileEvent& a = t.events[i];
      const ProfileEvent& b = back->events[i];
      QCOMPARE(b.device, a.device);
      QCOMPARE(b.stream, a.stream);
      QCOMPARE(b.name, a.name);
      QCOMPARE(b.fusion, a.fusion);
      QCOMPARE(b.startNs, a.startNs - t0);
      QCOMPARE(b.durationNs, a.durationNs);
      QCOMPARE(b.flops, a.flops);
      QCOMPARE(b.bytes, a.bytes);
    }
    QCOMPARE(back->marks.size(), size_t(2));
    QCOMPARE(back->marks[1].name, std::string("step 2"));
    QCOMPARE(back->marks[1].startNs, int64_t(10'000));
    QCOMPARE(back->marks[1].durationNs, int64_t(9'000));
    QCOMPARE(back->kernels.size(), size_t(2));
    for (const FusionInfo& k : t.kernels) {
      const FusionInfo* r = back->kernel(k.id);
      QVERIFY(r);
      QCOMPARE(r->executable, k.executable);
      QCOMPARE(r->name, k.name);
      QCOMPARE(r->kind, k.kind);
      QCOMPARE(r->nodes, k.nodes);
      QCOMPARE(r->ops, k.ops);
      QCOMPARE(r->modulePath, k.modulePath);
    }
  }

  void anEmptyTraceIsStillATrace() {
    json doc = json::parse(toChromeTrace(Trace{}));
    QVERIFY(doc["traceEvents"].is_array());
    QCOMPARE(doc["traceEvents"].size(), size_t(0));
    auto back = parseChromeTrace(toChromeTrace(Trace{}));
    QVERIFY(back.ok());
    QVERIFY(back->events.empty());
  }

  void badFilesAreErrors() {
    QVERIFY(!parseChromeTrace("{").ok());
    QVERIFY(!parseChromeTrace("{\"events\": []}").ok());
    QVERIFY(!parseChromeTrace("42").ok());
    auto wrongType = parseChromeTrace(R"({"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": "soon"}]})");
    QVERIFY(!wrongType.ok());
    QVERIFY2(wrongType.error().message.find("malformed") != std::string::npos, wrongType.error().message.c_str());
    QVERIFY(!readChromeTrace("/nonexistent/trace.json").ok());
    // The array form, from other tools, reads too.
    auto array = parseChromeTrace(R"([{"ph": "X", "name": "k", "pid": 7, "tid": 3, "ts": 1.5, "dur": 2}])");
    QVERIFY(array.ok());
    QCOMPARE(array->events.size(), size_t(1));
    QCOMPARE(array->events[0].startNs, int64_t(1500));
    QCOMPARE(array->events[0].durationNs, int64_t(2000));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestTraceExport)
#include "test_trace_export.moc"
