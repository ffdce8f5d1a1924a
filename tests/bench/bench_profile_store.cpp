// Profiles of any size in the run store: a synthetic profile of N launches (default 50 million) written into a
// fresh runs.db, then opened and panned and zoomed the way the Timeline panel does, through the window queries
// (RunStore::profileWindow: a window's launches, or the level of detail of about a pixel).
//
// Reports, as JSON:
//   - write: launches per second through addKernelEvents (batches of a million, one transaction each), and the
//     time to build the levels of detail;
//   - open: a reader process opens the store and reads the profile's summary, kernel table, step marks and its
//     first window (the whole profile, fitted to the canvas width);
//   - queries: the time of Q random windows (log-uniform spans from the whole run down to 10 us, random
//     positions), p50, p99 and max, and how many came back as raw launches;
//   - the reader's peak resident memory;
//   - the peer, in the same run: the old path's first step, every launch of the profile read into memory
//     (RunStore::kernelEvents, what the timeline did before schema 6), in a process of its own: its time, its
//     peak memory and the ratio to the windowed open.
// Targets (issue 23): open under 2 s, every window under 16 ms, memory bounded by the window.
//
//   build/tests/bench/bench_profile_store [--events N] [--db FILE] [--keep] [--peer 0|1]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include "engine/store/run_store.h"

using namespace tsr;
using namespace tsr::store;

namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// CPU time of this thread: on a shared machine, unlike the wall time, it does not count the time other
// processes held the cores (page faults and reads from disk still count in the wall time only).
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

double peakRssMb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // kB on Linux
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench_profile_store: %s\n", what.c_str());
  return 1;
}

struct Args {
  int64_t events = 50'000'000;
  int devices = 2, streams = 4;
  int queries = 200;
  double widthPx = 1600;
  int64_t maxRaw = 6000;
  std::string db;
  bool keep = false;
  bool peer = true;
  std::string mode = "write";  // write | read | peer (the last two are the child processes)
};

// Launches of a made-up training step, as engine/inspect's syntheticTimeline makes them: 48 kernels (short
// loops, reductions, a few GEMMs), durations spread over two orders of magnitude, mostly short gaps.
int write(const Args& a) {
  auto opened = RunStore::open(a.db);
  if (!opened.ok()) return fail(opened.error().message);
  RunStore db = std::move(opened).value();
  auto run = db.createRun("synthetic", "bench", "");
  if (!run.ok()) return fail(run.error().message);
  auto profile = db.createProfile(*run, fmt::format("synthetic {} launches", a.events), 1, 10);
  if (!profile.ok()) return fail(profile.error().message);
  struct Kind {
    const char* kind;
    double meanNs;
  };
  const Kind kinds[] = {{"loop", 2'000}, {"loop", 800}, {"reduction", 6'000}, {"gemm", 40'000}, {"copy", 3'000}, {"opaque", 9'000}};
  constexpr int kKernels = 48;
  std::vector<KernelInfo> table;
  std::vector<std::string> names;
  for (int k = 0; k < kKernels; ++k) {
    const Kind& kd = kinds[static_cast<size_t>(k) % std::size(kinds)];
    names.push_back(fmt::format("fusion.{} {}", k, kd.kind));
    table.push_back({k, "train_step", names.back(), kd.kind, {k * 4, k * 4 + 1}, {"mul", "add"}, ""});
  }
  if (auto st = db.addProfileKernels(*profile, table); !st.ok()) return fail(st.error().message);
  const int numRows = a.devices * a.streams;
  std::vector<std::string> devices;
  for (int d = 0; d < a.devices; ++d) devices.push_back(fmt::format("cpu:{}", d));
  std::vector<int64_t> clock(static_cast<size_t>(numRows), 0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> uni(0, 1);
  auto t0 = Clock::now();
  std::vector<KernelEvent> batch;
  for (int64_t i = 0; i < a.events;) {
    batch.clear();
    for (int64_t n = 0; n < 1'000'000 && i < a.events; ++n, ++i) {
      size_t r = static_cast<size_t>(i % numRows);
      int k = static_cast<int>(rng() % kKernels);
      const Kind& kd = kinds[static_cast<size_t>(k) % std::size(kinds)];
      double dur = kd.meanNs * std::exp((uni(rng) - 0.5) * 3.0);
      double gap = uni(rng) < 0.02 ? 50'000 * uni(rng) : 300 * uni(rng);
      clock[r] += static_cast<int64_t>(gap);
      int64_t d = std::max<int64_t>(1, static_cast<int64_t>(dur));
      batch.push_back({devices[r / static_cast<size_t>(a.streams)], static_cast<int64_t>(r) % a.streams,
                       names[static_cast<size_t>(k)], k, clock[r], d, kd.kind[0] == 'g' ? 60.0 * dur : dur, 4.0 * dur});
      clock[r] += d;
    }
    if (auto st = db.addKernelEvents(*profile, batch); !st.ok()) return fail(st.error().message);
  }
  double writeMs = msSince(t0);
  std::vector<ProfileMarkInfo> marks;
  int64_t end = *std::max_element(clock.begin(), clock.end());
  for (int s = 0; s < 10; ++s) marks.push_back({fmt::format("step {}", s + 1), end * s / 10, end / 10});
  if (auto st = db.addProfileMarks(*profile, marks); !st.ok()) return fail(st.error().message);
  t0 = Clock::now();
  if (auto st = db.buildProfileLevels(*profile); !st.ok()) return fail(st.error().message);
  double levelsMs = msSince(t0);
  (void)db.profileSummary(*profile);
  std::printf("  \"write\": {\"launches\": %lld, \"seconds\": %.1f, \"launches_per_s\": %.0f, \"levels_s\": %.1f, "
              "\"writer_peak_rss_mb\": %.0f},\n",
              static_cast<long long>(a.events), writeMs / 1e3, static_cast<double>(a.events) / (writeMs / 1e3),
              levelsMs / 1e3, peakRssMb());
  return 0;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::lround(p * static_cast<double>(v.size() - 1)))];
}

// The reader: what the Timeline panel does on open, then Q windows.
int read(const Args& a) {
  auto t0 = Clock::now();
  auto opened = RunStore::openReadOnly(a.db);
  if (!opened.ok()) return fail(opened.error().message);
  RunStore db = std::move(opened).value();
  auto latest = db.latestProfile();
  if (!latest.ok() || !*latest) return fail("no profile");
  const int64_t profile = (*latest)->id;
  auto summary = db.profileSummary(profile);
  if (!summary.ok() || !*summary) return fail("no levels of detail");
  const ProfileSummary& s = **summary;
  auto kernels = db.profileKernels(profile);
  auto marks = db.profileMarks(profile);
  if (!kernels.ok() || !marks.ok()) return fail("cannot read the kernel table or marks");
  const double extent = static_cast<double>(s.endNs - s.beginNs);
  auto first = db.profileWindow(s, s.beginNs, s.endNs, extent / a.widthPx, a.maxRaw);
  if (!first.ok()) return fail(first.error().message);
  double openMs = msSince(t0);

  std::mt19937_64 rng(2);
  std::uniform_real_distribution<double> uni(0, 1);
  std::vector<double> ms, cpuMs, rawMs, densityMs;
  int raw = 0;
  double items = 0, maxItems = 0;
  for (int q = 0; q < a.queries; ++q) {
    double span = extent * std::pow(10'000.0 / extent, uni(rng));  // the whole run .. 10 us
    int64_t from = s.beginNs + static_cast<int64_t>((extent - span) * uni(rng));
    int64_t to = from + static_cast<int64_t>(span);
    auto q0 = Clock::now();
    double c0 = threadCpuMs();
    auto w = db.profileWindow(s, from, to, span / a.widthPx, a.maxRaw);
    ms.push_back(msSince(q0));
    cpuMs.push_back(threadCpuMs() - c0);
    if (!w.ok()) return fail(w.error().message);
    size_t n = w->raw ? w->events.size() : 0;
    for (const RowBuckets& r : w->rows) n += r.buckets.size();
    raw += w->raw ? 1 : 0;
    (w->raw ? rawMs : densityMs).push_back(ms.back());
    items += static_cast<double>(n);
    maxItems = std::max(maxItems, static_cast<double>(n));
  }
  std::printf("  \"profile\": {\"launches\": %lld, \"rows\": %zu, \"extent_s\": %.2f, \"levels\": %d, "
              "\"level0_bucket_ns\": %lld, \"db_mb\": %.0f},\n",
              static_cast<long long>(s.events), s.rows.size(), extent * 1e-9, s.levels,
              static_cast<long long>(s.bucketNs(0)), static_cast<double>(std::filesystem::file_size(a.db)) / 1e6);
  std::printf("  \"open_ms\": %.1f,\n  \"open_window\": {\"raw\": %s, \"level\": %d, \"buckets_per_row\": %zu},\n",
              openMs, first->raw ? "true" : "false", first->level,
              first->rows.empty() ? size_t(0) : first->rows.front().buckets.size());
  std::printf("  \"queries\": {\"count\": %d, \"width_px\": %.0f, \"max_raw\": %lld, \"p50_ms\": %.2f, \"p99_ms\": %.2f, "
              "\"max_ms\": %.2f, \"cpu_p50_ms\": %.2f, \"cpu_p99_ms\": %.2f, \"cpu_max_ms\": %.2f, \"raw\": %d, "
              "\"items_mean\": %.0f, \"items_max\": %.0f},\n",
              a.queries, a.widthPx, static_cast<long long>(a.maxRaw), percentile(ms, 0.5), percentile(ms, 0.99),
              *std::max_element(ms.begin(), ms.end()), percentile(cpuMs, 0.5), percentile(cpuMs, 0.99),
              *std::max_element(cpuMs.begin(), cpuMs.end()), raw, items / a.queries, maxItems);
  auto split = [](const std::vector<double>& v) {
    return fmt::format("{{\"count\": {}, \"p50_ms\": {:.2f}, \"p99_ms\": {:.2f}, \"max_ms\": {:.2f}}}", v.size(),
                       percentile(v, 0.5), percentile(v, 0.99), v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()));
  };
  std::printf("  \"raw_queries\": %s,\n  \"density_queries\": %s,\n", split(rawMs).c_str(), split(densityMs).c_str());
  std::printf("  \"reader_peak_rss_mb\": %.1f,\n", peakRssMb());
  return 0;
}

// The old path: every launch into memory.
int peer(const Args& a) {
  auto t0 = Clock::now();
  auto opened = RunStore::openReadOnly(a.db);
  if (!opened.ok()) return fail(opened.error().message);
  auto latest = opened->latestProfile();
  if (!latest.ok() || !*latest) return fail("no profile");
  auto events = opened->kernelEvents((*latest)->id);
  if (!events.ok()) return fail(events.error().message);
  std::printf("  \"peer_select_all\": {\"launches\": %zu, \"ms\": %.0f, \"peak_rss_mb\": %.0f},\n", events->size(),
              msSince(t0), peakRssMb());
  return 0;
}

// Runs this program again in `mode` (its own process, so its peak memory is its own) and returns its output.
std::string child(const char* self, const Args& a, const std::string& mode) {
  std::string cmd = fmt::format("'{}' --mode {} --db '{}' --queries {} --width {} --max-raw {}", self, mode, a.db,
                                a.queries, a.widthPx, a.maxRaw);
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) out += fmt::format("  \"{}_failed\": true,\n", mode);
  }
  return out;
}

double number(const std::string& json, const std::string& key) {
  auto at = json.find("\"" + key + "\": ");
  return at == std::string::npos ? 0 : std::atof(json.c_str() + at + key.size() + 4);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (k == "--events") a.events = std::atoll(next().c_str());
    else if (k == "--queries") a.queries = std::atoi(next().c_str());
    else if (k == "--width") a.widthPx = std::atof(next().c_str());
    else if (k == "--max-raw") a.maxRaw = std::atoll(next().c_str());
    else if (k == "--db") a.db = next();
    else if (k == "--keep") a.keep = true;
    else if (k == "--peer") a.peer = next() != "0";
    else if (k == "--mode") a.mode = next();
    else return fail("unknown option " + k + " (--events N --queries Q --width PX --max-raw N --db FILE --keep --peer 0|1)");
  }
  if (a.mode == "read") return read(a);
  if (a.mode == "peer") return peer(a);
  bool temp = a.db.empty();
  if (temp) a.db = (std::filesystem::temp_directory_path() / fmt::format("bench_profile_store_{}.db", getpid())).string();
  std::filesystem::remove(a.db);
  std::printf("{\n  \"bench\": \"profile_store\",\n");
  std::fflush(stdout);
  int rc = write(a);
  std::fflush(stdout);
  std::string reader, old;
  if (rc == 0) {
    reader = child(argv[0], a, "read");
    std::fputs(reader.c_str(), stdout);
    if (a.peer) {
      old = child(argv[0], a, "peer");
      std::fputs(old.c_str(), stdout);
    }
  }
  double openMs = number(reader, "open_ms"), peerMs = number(old, "ms");
  std::printf("  \"targets\": {\"open_ms\": 2000, \"query_ms\": 16, \"open_ok\": %s, \"queries_ok\": %s},\n",
              openMs > 0 && openMs < 2000 ? "true" : "false", number(reader, "max_ms") < 16 ? "true" : "false");
  std::printf("  \"peer_over_open\": %.1f\n}\n", openMs > 0 ? peerMs / openMs : 0);
  if (!a.keep) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(a.db + suffix);
  }
  return rc;
}
