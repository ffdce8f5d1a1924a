// Chrome/Perfetto trace JSON into a Timeline, read as a stream of SAX events: a trace of a million kernels
// is a few hundred MB of JSON, and a DOM of it would take gigabytes.
//
// What is read: complete events ("ph": "X", ts and dur in microseconds), begin/end pairs ("B"/"E") per thread,
// and the metadata that names and orders processes and threads (process_name, thread_name, *_sort_index).
// Tessera's own traces (runtime/trace_export.h) carry the kernel table in each kernel event's args (fusion,
// kind, nodes, ops, executable, module) and their step marks as "X" events of category "mark".
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/inspect/timeline.h"
#include "engine/runtime/trace_export.h"

namespace tsr::inspect {

namespace {

using nlohmann::json;

// One event object as read, before it becomes a timeline event, a span or a name.
struct RawEvent {
  std::string ph, name, cat;
  std::string pid, tid;  // as text: tools write numbers or strings
  double ts = 0, dur = -1;
  // args
  int64_t fusion = -1;
  bool hasKernel = false;     // args.kind is present: a Tessera kernel event with its table entry
  bool hasFusionArg = false;  // args.fusion is present (-1 too): Tessera's writer, whose tid is stream + 1
  double flops = 0, bytes = 0;
  std::string kind, executable, module, argName;
  std::optional<int64_t> sortIndex;
  std::vector<int> nodes;
  std::vector<std::string> ops;
};

struct ThreadInfo {
  int row = -1;
  std::string pid, tid;
  std::string name;
  std::optional<int64_t> sortIndex;
  bool tessera = false;  // tid = stream + 1
  std::vector<RawEvent> open;  // "B" events waiting for their "E"
};

std::optional<int64_t> asInteger(const std::string& s) {
  if (s.empty()) return std::nullopt;
  size_t used = 0;
  try {
    int64_t v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (...) {
  }
  return std::nullopt;
}

// Microseconds as nanoseconds, clamped to +-2^61 ns (73 years) so that sums and differences of times stay in
// range (llround of a larger value is unspecified); NaN counts as 0.
int64_t nanos(double us) {
  constexpr double kLimit = 2305843009213693952.0;  // 2^61
  double ns = us * 1000.0;
  if (std::isnan(ns)) return 0;
  return std::llround(std::clamp(ns, -kLimit, kLimit));
}

// A JSON number as a signed integer; one that is not finite or lies outside T's range gives nothing (casting it
// would be undefined).
template <typename T>
std::optional<T> toInteger(double v) {
  const double lo = static_cast<double>(std::numeric_limits<T>::min());  // -2^(bits-1), exact
  if (!(v >= lo && v < -lo)) return std::nullopt;
  return static_cast<T>(v);
}

class TraceReader : public nlohmann::json_sax<json> {
 public:
  // --- values ---
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return number(static_cast<double>(v), std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override { return number(static_cast<double>(v), std::to_string(v)); }
  bool number_float(number_float_t v, const string_t&) override { return number(v, fmt::format("{}", v)); }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& s) override {
    if (m_depth == m_eventDepth && m_inEvent) {
      if (m_key == "ph") m_ev.ph = s;
      else if (m_key == "name") m_ev.name = s;
      else if (m_key == "cat") m_ev.cat = s;
      else if (m_key == "pid") m_ev.pid = s;
      else if (m_key == "tid") m_ev.tid = s;
    } else if (m_depth == m_eventDepth + 1 && m_inArgs) {
      if (m_key == "kind") {
        m_ev.kind = s;
        m_ev.hasKernel = true;
      } else if (m_key == "executable") m_ev.executable = s;
      else if (m_key == "module") m_ev.module = s;
      else if (m_key == "name") m_ev.argName = s;
    } else if (m_depth == m_eventDepth + 2 && m_inArgs && m_argArray == "ops") {
      m_ev.ops.push_back(s);
    }
    return true;
  }

  // --- containers ---
  bool start_object(std::size_t) override {
    ++m_depth;
    if (m_depth == 1) return true;
    if (m_eventDepth > 0 && m_depth == m_eventDepth && m_arrayIsEvents) {
      m_inEvent = true;
      m_ev = RawEvent{};
    } else if (m_inEvent && m_depth == m_eventDepth + 1 && m_key == "args") {
      m_inArgs = true;
    }
    return true;
  }
  bool end_object() override {
    if (m_inArgs && m_depth == m_eventDepth + 1) {
      m_inArgs = false;
    } else if (m_inEvent && m_depth == m_eventDepth) {
      m_inEvent = false;
      commit();
    }
    --m_depth;
    return true;
  }
  bool start_array(std::size_t) override {
    ++m_depth;
    // The events: the document itself, or its "traceEvents".
    if ((m_depth == 1) || (m_depth == 2 && m_key == "traceEvents" && m_topIsObject)) {
      m_eventDepth = m_depth + 1;
      m_arrayIsEvents = true;
    } else if (m_inArgs && m_depth == m_eventDepth + 2) {
      m_argArray = m_key;
    }
    return true;
  }
  bool end_array() override {
    if (m_inArgs && m_depth == m_eventDepth + 2) m_argArray.clear();
    if (m_arrayIsEvents && m_depth == m_eventDepth - 1) m_arrayIsEvents = false;
    --m_depth;
    return true;
  }
  bool key(string_t& k) override {
    if (m_depth == 1) m_topIsObject = true;
    m_key = k;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    m_error = fmt::format("not valid JSON at byte {}: {}", position, e.what());
    return false;
  }

  const std::string& error() const { return m_error; }
  bool sawEvents() const { return m_eventDepth > 0; }

  Timeline finish(std::string source) {
    // Rows: device = the process name ("cpu:0" in Tessera's traces), label = the thread name.
    for (auto& [key, th] : m_threads) {
      if (th.row < 0) continue;  // metadata only
      auto pit = m_processes.find(th.pid);
      std::string device = pit != m_processes.end() && !pit->second.name.empty() ? pit->second.name : "pid " + th.pid;
      // Ordered by the trace's sort indexes where it gives them, else by name ("pid 12" by number) and thread id.
      std::optional<int64_t> pidOrder = pit != m_processes.end() ? pit->second.sortIndex : std::nullopt;
      int64_t stream = asInteger(th.tid).value_or(0) - (th.tessera ? 1 : 0);
      std::string label = th.name.empty() ? "thread " + th.tid : th.name;
      m_builder.setRow(th.row, device, stream, label, pidOrder, th.sortIndex);
    }
    for (auto& [pid, span] : m_spans) {
      auto pit = m_processes.find(pid);
      span.rank = pit == m_processes.end() ? 0 : runtime::hostRank(pit->second.name);
      m_builder.addSpan(std::move(span));
    }
    return m_builder.finish(std::move(source));
  }

 private:
  struct Process {
    std::string name;
    std::optional<int64_t> sortIndex;
  };

  bool number(double v, const std::string& text) {
    if (m_depth == m_eventDepth && m_inEvent) {
      if (m_key == "ts") m_ev.ts = v;
      else if (m_key == "dur") m_ev.dur = v;
      else if (m_key == "pid") m_ev.pid = text;
      else if (m_key == "tid") m_ev.tid = text;
    } else if (m_depth == m_eventDepth + 1 && m_inArgs) {
      if (m_key == "fusion") {
        m_ev.fusion = toInteger<int64_t>(v).value_or(-1);
        m_ev.hasFusionArg = true;
      }
      else if (m_key == "flops") m_ev.flops = v;
      else if (m_key == "bytes") m_ev.bytes = v;
      else if (m_key == "sort_index") m_ev.sortIndex = toInteger<int64_t>(v).value_or(0);
    } else if (m_depth == m_eventDepth + 2 && m_inArgs && m_argArray == "nodes") {
      if (auto node = toInteger<int>(v)) m_ev.nodes.push_back(*node);
    }
    return true;
  }

  ThreadInfo& thread(const RawEvent& e) {
    std::string key = e.pid + '\x1f' + e.tid;
    auto [it, added] = m_threads.try_emplace(key);
    if (added) {
      it->second.pid = e.pid;
      it->second.tid = e.tid;
    }
    return it->second;
  }

  void keep(const RawEvent& e, ThreadInfo& th) {
    if (e.cat == "mark") {  // Tessera's step marks, of the rank its host process names (known at the end)
      m_spans.emplace_back(e.pid, TimelineSpan{e.name, nanos(e.ts), nanos(std::max(0.0, e.dur))});
      return;
    }
    if (e.hasFusionArg) th.tessera = true;
    if (e.hasKernel && e.fusion >= 0 && !m_builder.hasKernel(e.fusion))
      m_builder.addKernel({e.fusion, e.executable, e.name, e.kind, e.nodes, e.ops, e.module, {}});
    // A row per thread, named once the whole file is read.
    if (th.row < 0) th.row = m_builder.row(fmt::format("\x1f{}", m_rows++), 0);
    m_builder.addEvent(th.row, e.name, nanos(e.ts), nanos(e.dur), e.flops, e.bytes, e.fusion, e.cat);
  }

  void commit() {
    RawEvent& e = m_ev;
    if (e.ph == "X") {
      if (e.dur < 0) e.dur = 0;
      keep(e, thread(e));
    } else if (e.ph == "B") {
      thread(e).open.push_back(std::move(e));
    } else if (e.ph == "E") {
      ThreadInfo& th = thread(e);
      if (th.open.empty()) return;  // an end without a begin: dropped
      RawEvent b = std::move(th.open.back());
      th.open.pop_back();
      b.dur = std::max(0.0, e.ts - b.ts);
      // An "E" may carry args of its own (flops, bytes) that complete the begin's.
      if (b.flops == 0) b.flops = e.flops;
      if (b.bytes == 0) b.bytes = e.bytes;
      keep(b, th);
    } else if (e.ph == "M") {
      if (e.name == "process_name") m_processes[e.pid].name = e.argName;
      else if (e.name == "process_sort_index") m_processes[e.pid].sortIndex = e.sortIndex;
      else if (e.name == "thread_name") thread(e).name = e.argName;
      else if (e.name == "thread_sort_index") thread(e).sortIndex = e.sortIndex;
    }
  }

  int m_depth = 0;
  int m_eventDepth = 0;  // depth of an event object; 0 until the events array is found
  bool m_topIsObject = false;
  bool m_arrayIsEvents = false;
  bool m_inEvent = false;
  bool m_inArgs = false;
  std::string m_key;
  std::string m_argArray;
  std::string m_error;
  RawEvent m_ev;
  std::map<std::string, Process> m_processes;
  std::map<std::string, ThreadInfo> m_threads;
  std::vector<std::pair<std::string, TimelineSpan>> m_spans;  // by the pid of their process
  int m_rows = 0;
  TimelineBuilder m_builder;
};

}  // namespace

Result<Timeline> parseTraceTimeline(std::string_view text, std::string source) {
  TraceReader reader;
  bool ok = json::sax_parse(text.begin(), text.end(), &reader);
  if (!ok) return makeError("{}: {}", source, reader.error().empty() ? "not a trace" : reader.error());
  if (!reader.sawEvents())
    return makeError("{}: no events (a trace is an array of events or an object with \"traceEvents\")", source);
  return reader.finish(std::move(source));
}

Result<Timeline> readTraceTimeline(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return makeError("cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return parseTraceTimeline(ss.str(), path);
}

}  // namespace tsr::inspect
