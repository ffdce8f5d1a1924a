#include "app/cli/sweep_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "app/cli/project_args.h"
#include "engine/core/subprocess.h"
#include "engine/store/run_store.h"
#include "engine/train/run_process.h"

namespace tsr::cli {

namespace {

namespace fs = std::filesystem;

struct SweepArgs {
  std::string project;
  std::vector<std::string> grid, ranges, sets;
  int64_t random = 0;
  uint64_t seed = 0;
  int64_t steps = -1;
  int parallel = 1;
  std::string name, metric = "val_loss", store;
  double lockWait = 0;  // --lock-wait, passed on to each run (0: not given)
};

// One axis of the sweep: a key and its values (grid), or a key and a range to draw from (random).
struct Axis {
  std::string key;  // "train.lr"
  std::vector<std::string> values;
  double lo = 0, hi = 0;
  bool log = false, isRange = false;
};

Result<Axis> parseGrid(const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0) return makeError("--grid {}: expected KEY=V1,V2,...", spec);
  Axis a;
  a.key = spec.substr(0, eq);
  // Values split on commas outside brackets, so an array value ([2, 4]) stays whole.
  std::string cur;
  int depth = 0;
  for (char c : spec.substr(eq + 1)) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      a.values.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  a.values.push_back(cur);
  if (std::any_of(a.values.begin(), a.values.end(), [](const std::string& v) { return v.empty(); }))
    return makeError("--grid {}: an empty value", spec);
  TSR_TRY(project::parseOverride(a.key + "=" + a.values.front()));
  return a;
}

Result<Axis> parseRange(const std::string& spec) {
  const size_t eq = spec.find('=');
  Axis a;
  a.isRange = true;
  a.key = spec.substr(0, eq == std::string::npos ? 0 : eq);
  const std::string body = eq == std::string::npos ? "" : spec.substr(eq + 1);
  char* end = nullptr;
  a.lo = std::strtod(body.c_str(), &end);
  if (a.key.empty() || end == body.c_str() || *end != ':')
    return makeError("--range {}: expected KEY=LO:HI or KEY=LO:HI:log", spec);
  const char* rest = end + 1;
  a.hi = std::strtod(rest, &end);
  if (end == rest || (*end && std::string(end) != ":log") || !(a.lo < a.hi))
    return makeError("--range {}: expected KEY=LO:HI or KEY=LO:HI:log with LO < HI", spec);
  a.log = *end != 0;
  if (a.log && a.lo <= 0) return makeError("--range {}: a log range needs LO > 0", spec);
  TSR_TRY(project::parseOverride(a.key + "=0"));
  return a;
}

// The sweep's points: every combination of the grid, or N random draws (grid axes pick one of their values).
std::vector<std::vector<std::pair<std::string, std::string>>> points(const std::vector<Axis>& axes, int64_t random,
                                                                     uint64_t seed) {
  std::vector<std::vector<std::pair<std::string, std::string>>> out;
  if (random > 0) {
    std::mt19937_64 rng(seed);
    for (int64_t i = 0; i < random; ++i) {
      std::vector<std::pair<std::string, std::string>> point;
      for (const Axis& a : axes) {
        if (a.isRange) {
          const double u = std::uniform_real_distribution<double>(0, 1)(rng);
          const double v = a.log ? std::exp(std::log(a.lo) + u * (std::log(a.hi) - std::log(a.lo))) : a.lo + u * (a.hi - a.lo);
          point.emplace_back(a.key, fmt::format("{:.4g}", v));
        } else {
          point.emplace_back(a.key, a.values[std::uniform_int_distribution<size_t>(0, a.values.size() - 1)(rng)]);
        }
      }
      out.push_back(std::move(point));
    }
    return out;
  }
  out.push_back({});
  for (const Axis& a : axes) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& prefix : out)
      for (const std::string& v : a.values) {
        auto p = prefix;
        p.emplace_back(a.key, v);
        next.push_back(std::move(p));
      }
    out = std::move(next);
  }
  return out;
}

std::atomic<int> gInterrupts{0};
std::atomic<int> gToPassOn{0};

// Ctrl-C at a terminal reaches every process of the foreground group, the runs too (the kernel sends it:
// SI_KERNEL); an interrupt from a process (kill PID, the IDE's Stop) reached the sweep alone, and the sweep passes
// it on to its runs. Either way no more runs start. The runs take a stop their parent passes on as one request,
// never as the second Ctrl-C that kills at once (train_command.cpp).
void onInterrupt(int, siginfo_t* info, void*) {
  gInterrupts.fetch_add(1);
  if (!info || info->si_code != SI_KERNEL) gToPassOn.fetch_add(1);
}

std::string selfPath() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("tessera") : p.string();
}

// Starts `tessera train` with `args`; its output goes to `log` (empty: this terminal). Returns the pid or -1.
pid_t launch(const std::vector<std::string>& args, const std::string& log, int threads) {
  SpawnOptions o;
  o.argv = args;
  o.log = log;
  if (threads > 0) o.setEnv.emplace_back("TESSERA_NUM_THREADS", std::to_string(threads));
  Result<pid_t> pid = spawnProcess(o);
  return pid.ok() ? *pid : -1;
}

std::string defaultName() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "sweep-%Y%m%d-%H%M%S", &tm);
  return buf;
}

int runSweep(const SweepArgs& a) {
  auto fail = [](const std::string& m) {
    std::cerr << "tessera sweep: " << m << "\n";
    return 1;
  };
  std::vector<Axis> axes;
  for (const auto& g : a.grid) {
    auto axis = parseGrid(g);
    if (!axis.ok()) return fail(axis.error().message);
    axes.push_back(std::move(*axis));
  }
  for (const auto& r : a.ranges) {
    auto axis = parseRange(r);
    if (!axis.ok()) return fail(axis.error().message);
    axes.push_back(std::move(*axis));
  }
  if (axes.empty()) return fail("nothing to sweep: give --grid KEY=V1,V2 (and/or --range KEY=LO:HI with --random N)");
  if (a.random == 0 && std::any_of(axes.begin(), axes.end(), [](const Axis& x) { return x.isRange; }))
    return fail("--range draws values: give --random N as well");
  // Every point must make a valid project before the first run starts: a typo found at run 5 wastes runs 1-4.
  const auto all = points(axes, a.random, a.seed);
  for (const auto& point : all) {
    std::vector<std::string> sets = a.sets;
    for (const auto& [k, v] : point) sets.push_back(k + "=" + v);
    if (auto p = loadProject(a.project, sets); !p.ok()) return fail(p.error().message);
  }
  const std::string name = a.name.empty() ? defaultName() : a.name;
  const int parallel = std::max(1, a.parallel);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = parallel > 1 ? std::max(1, cores / parallel) : 0;
  auto project = loadProject(a.project, a.sets);
  const fs::path logDir = fs::path(project->dir) / ".tessera" / "sweeps" / name;
  if (parallel > 1) {
    std::error_code ec;
    fs::create_directories(logDir, ec);
    if (ec) return fail(fmt::format("cannot create {}: {}", logDir.string(), ec.message()));
  }
  std::cout << fmt::format("sweep {}: {} runs of {}{}\n", name, all.size(), project->dir,
                           parallel > 1 ? fmt::format(", {} at a time on {} threads each, logs in {}", parallel, threads, logDir.string()) : "");

  // The store exists, at the current schema, before the runs start: parallel runs then only add to it.
  const std::string storePath = a.store.empty() ? (fs::path(project->dir) / "runs.db").string() : a.store;
  if (auto created = store::RunStore::open(storePath); !created.ok()) return fail(created.error().message);

  std::map<pid_t, size_t> running;
  size_t next = 0, failed = 0, stopped = 0;
  // A closed stdout (`tessera sweep ... | head`) stops the sweep as it stops train: SIGPIPE is ignored, the
  // running runs are interrupted (each checkpointed, resumable) and no more start.
  std::signal(SIGPIPE, SIG_IGN);
  bool stdoutClosed = false;
  auto print = [&](const std::string& text) {
    std::cout << text << std::flush;
    if (stdoutClosed || std::cout.good()) return;
    stdoutClosed = true;
    std::cerr << "tessera sweep: stdout was closed: its running runs stop with a checkpoint, and no more start\n";
    for (const auto& [pid, i] : running) ::kill(pid, SIGINT);
  };
  // Ctrl-C or SIGTERM: the same, said once; each interrupt the runs did not see is passed on to them.
  struct sigaction interrupt {};
  interrupt.sa_sigaction = onInterrupt;
  interrupt.sa_flags = SA_SIGINFO;
  sigemptyset(&interrupt.sa_mask);
  ::sigaction(SIGINT, &interrupt, nullptr);
  ::sigaction(SIGTERM, &interrupt, nullptr);
  int passedOn = 0;
  bool said = false;
  auto interrupted = [&]() {
    if (gInterrupts.load() == 0) return false;
    if (!said) {
      said = true;
      std::cerr << "tessera sweep: interrupted: its running runs stop with a checkpoint (each resumes with "
                   "tessera train PROJECT --resume N), and no more start\n";
    }
    for (; passedOn < gToPassOn.load(); ++passedOn)
      for (const auto& entry : running) ::kill(entry.first, SIGINT);
    return true;
  };
  auto reap = [&]() {
    // Polled, so that an interrupt that arrives while the runs train is passed on at once.
    int status = 0;
    pid_t pid = 0;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) == 0) {
      interrupted();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (pid < 0) {
      if (errno == ECHILD) running.clear();  // none left to wait for (never expected)
      return;
    }
    const size_t i = running[pid];
    running.erase(pid);
    // 130: the run stopped as on Ctrl-C, checkpointed (a closed stdout, an interrupt, the user's own kill).
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    const bool wasStopped = WIFEXITED(status) && WEXITSTATUS(status) == 130;
    failed += !ok && !wasStopped;
    stopped += wasStopped;
    std::string values;
    for (const auto& [k, v] : all[i]) values += (values.empty() ? "" : " ") + k + "=" + v;
    const char* outcome = ok ? "finished" : wasStopped ? "stopped" : "FAILED";
    print(fmt::format("[{}/{}] {} {}\n", i + 1, all.size(), values, outcome));
  };
  auto mayStart = [&]() { return next < all.size() && !stdoutClosed && gInterrupts.load() == 0; };
  while (mayStart() || !running.empty()) {
    while (mayStart() && running.size() < static_cast<size_t>(parallel)) {
      std::vector<std::string> args = {selfPath(), "train", a.project, "--quiet", "--sample", "0", "--tag", "sweep=" + name};
      if (a.steps >= 0) args.insert(args.end(), {"--steps", std::to_string(a.steps)});
      if (!a.store.empty()) args.insert(args.end(), {"--db", a.store});
      if (a.lockWait > 0) args.insert(args.end(), {"--lock-wait", fmt::format("{}", a.lockWait)});
      std::string runName = name;
      for (const std::string& s : a.sets) args.insert(args.end(), {"--set", s});
      for (const auto& [k, v] : all[next]) {
        args.insert(args.end(), {"--set", k + "=" + v, "--tag", k + "=" + v});
        runName += " " + k + "=" + v;
      }
      args.insert(args.end(), {"--name", runName});
      const std::string log = parallel > 1 ? (logDir / fmt::format("{}.log", next + 1)).string() : "";
      if (parallel == 1) print(fmt::format("[{}/{}] {}\n", next + 1, all.size(), runName));
      if (!mayStart()) break;
      const pid_t pid = launch(args, log, threads);
      if (pid < 0) return fail("cannot start " + args.front());
      running[pid] = next++;
    }
    if (!running.empty()) reap();
  }
  if (stdoutClosed) return 130;

  // The sweep's runs, best first by the chosen metric's last value.
  auto db = store::RunStore::openReadOnly(storePath);
  if (!db.ok()) return fail(db.error().message);
  auto runs = db->runs();
  if (!runs.ok()) return fail(runs.error().message);
  train::settleOrphanedRuns(*db, *runs);
  struct Row {
    int64_t id;
    std::string name, status;
    double value;
  };
  std::vector<Row> rows;
  for (const auto& r : *runs) {
    if (std::find(r.tags.begin(), r.tags.end(), "sweep=" + name) == r.tags.end()) continue;
    auto latest = db->latestMetrics(r.id);
    double v = latest.ok() && latest->count(a.metric) ? latest->at(a.metric).value : std::nan("");
    rows.push_back({r.id, r.name, store::runStatusName(r.status), v});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return std::isnan(y.value) ? !std::isnan(x.value) : x.value < y.value;
  });
  std::cout << fmt::format("\n{:>4}  {:<10}{:>12}  {}\n", "run", "status", a.metric, "values");
  for (const Row& r : rows)
    std::cout << fmt::format("{:>4}  {:<10}{:>12}  {}\n", r.id, r.status,
                             std::isnan(r.value) ? std::string("-") : fmt::format("{:.4f}", r.value),
                             r.name.substr(std::min(r.name.size(), name.size() + 1)));
  std::cout << fmt::format("{} runs tagged sweep={} in {}{}{}\n", rows.size(), name, storePath,
                           stopped ? fmt::format("; {} stopped", stopped) : "",
                           failed ? fmt::format("; {} failed", failed) : "");
  if (interrupted()) return 130;
  return failed ? 1 : 0;
}

}  // namespace

std::function<int()> addSweepCommand(CLI::App& app) {
  auto a = std::make_shared<SweepArgs>();
  CLI::App* cmd = app.add_subcommand("sweep", "Train a project once per point of a grid or of random draws, each a tagged run");
  cmd->add_option("project", a->project, "Project folder or project.toml")->required();
  cmd->add_option("--grid", a->grid, "KEY=V1,V2,...: every value is tried (every combination of the --grid keys)");
  cmd->add_option("--random", a->random, "Draw N points instead of the full grid (--grid keys pick one value)")
      ->check(nonNegativeNumber());
  cmd->add_option("--range", a->ranges, "KEY=LO:HI or KEY=LO:HI:log: a range --random draws from");
  cmd->add_option("--seed", a->seed, "Seed of the random draws")->capture_default_str();
  cmd->add_option("--steps", a->steps, "Override [train] steps for every run")->check(positiveNumber());
  cmd->add_option("--parallel", a->parallel, "Runs at a time (the cores are split between them)")
      ->capture_default_str()
      ->check(positiveNumber());
  cmd->add_option("--name", a->name, "The sweep's name, its runs' tag (default: sweep-DATE-TIME)");
  cmd->add_option("--metric", a->metric, "Sort the summary by this metric's last value")->capture_default_str();
  cmd->add_option("--db,--store", a->store, "Run store (default: PROJECT/runs.db)");
  addLockWaitOption(cmd, &a->lockWait);
  addSetOption(cmd, a->sets);
  return [cmd, a]() { return cmd->parsed() ? runSweep(*a) : -1; };
}

}  // namespace tsr::cli
