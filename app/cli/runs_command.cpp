#include "app/cli/runs_command.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/profile_run.h"

namespace tsr::cli {

namespace {

struct RunsArgs {
  std::string db;
  std::string project;
  int64_t id = 0;
  bool csv = false;
  std::string out;
  int64_t profile = 0;  // 0: the run's latest
};

std::string localTime(double unixSeconds) {
  if (unixSeconds <= 0) return "-";
  auto t = static_cast<std::time_t>(unixSeconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

int fail(const std::string& message) {
  std::cerr << "tessera runs: " << message << "\n";
  return 1;
}

int list(const store::RunStore& db) {
  auto runs = db.runs();
  if (!runs.ok()) return fail(runs.error().message);
  std::cout << fmt::format("{:>4}  {:<20}{:<32}{:<10}{:>7}{:>11}  {}\n", "id", "name", "project", "status", "steps",
                           "last loss", "started");
  for (const auto& r : *runs) {
    auto latest = db.latestMetrics(r.id);
    std::string steps = "-", loss = "-";
    if (latest.ok() && latest->count("loss")) {
      steps = std::to_string(latest->at("loss").step);
      loss = fmt::format("{:.4f}", latest->at("loss").value);
    }
    std::cout << fmt::format("{:>4}  {:<20}{:<32}{:<10}{:>7}{:>11}  {}\n", r.id, r.name, r.project,
                             store::runStatusName(r.status), steps, loss, localTime(r.startTime));
  }
  std::cout << runs->size() << " runs in " << db.path() << "\n";
  return 0;
}

int show(const store::RunStore& db, int64_t id) {
  auto r = db.run(id);
  if (!r.ok()) return fail(r.error().message);
  std::cout << fmt::format("run {}: {} ({})\n", r->id, r->name, store::runStatusName(r->status));
  std::cout << fmt::format("project  {}\nstarted  {}\nended    {}\n", r->project, localTime(r->startTime),
                           localTime(r->endTime));
  if (!r->message.empty()) std::cout << "message  " << r->message << "\n";
  auto params = db.params(id);
  if (!params.ok()) return fail(params.error().message);
  std::cout << "\nparams\n";
  for (const auto& [k, v] : *params) std::cout << fmt::format("  {:<24}{}\n", k, v);
  auto latest = db.latestMetrics(id);
  if (!latest.ok()) return fail(latest.error().message);
  std::cout << fmt::format("\nmetrics\n  {:<20}{:>8}{:>14}{:>14}{:>14}\n", "key", "step", "latest", "min", "max");
  for (const auto& [key, last] : *latest) {
    auto points = db.metrics(id, key);
    if (!points.ok()) return fail(points.error().message);
    if (points->empty()) continue;  // a damaged store may list a key without its points
    auto [lo, hi] = std::minmax_element(points->begin(), points->end(),
                                        [](const auto& a, const auto& b) { return a.value < b.value; });
    std::cout << fmt::format("  {:<20}{:>8}{:>14.6g}{:>14.6g}{:>14.6g}\n", key, last.step, last.value, lo->value,
                             hi->value);
  }
  auto artifacts = db.artifactNames(id);
  if (!artifacts.ok()) return fail(artifacts.error().message);
  std::cout << "\nartifacts\n";
  for (const auto& name : *artifacts) {
    auto a = db.artifact(id, name);
    std::cout << fmt::format("  {:<32}{:<8}{} bytes\n", name, a.ok() ? a->kind : "?", a.ok() ? a->data.size() : 0);
  }
  auto profiles = db.profiles(id);
  if (!profiles.ok()) return fail(profiles.error().message);
  if (profiles->empty()) return 0;
  std::cout << fmt::format("\nprofiles\n  {:>4}  {:<20}{:>8}{:>10}{:>12}  {}\n", "id", "name", "steps", "kernels",
                           "launches", "created");
  for (const auto& p : *profiles) {
    auto kernels = db.profileKernels(p.id);
    auto events = db.kernelEvents(p.id);
    std::cout << fmt::format("  {:>4}  {:<20}{:>8}{:>10}{:>12}  {}\n", p.id, p.name,
                             fmt::format("{}-{}", p.firstStep, p.lastStep), kernels.ok() ? kernels->size() : 0,
                             events.ok() ? events->size() : 0, localTime(p.created));
  }
  return 0;
}

int exportTrace(const store::RunStore& db, int64_t id, int64_t profile, const std::string& outPath) {
  if (auto r = db.run(id); !r.ok()) return fail(r.error().message);
  if (outPath.empty()) return fail("export-trace needs -o FILE");
  auto profiles = db.profiles(id);
  if (!profiles.ok()) return fail(profiles.error().message);
  if (profiles->empty()) return fail(fmt::format("run {} has no profiles (record one with tessera profile)", id));
  if (profile == 0) profile = profiles->back().id;
  if (std::none_of(profiles->begin(), profiles->end(), [&](const auto& p) { return p.id == profile; }))
    return fail(fmt::format("run {} has no profile {}", id, profile));
  auto trace = train::loadTrace(db, profile);
  if (!trace.ok()) return fail(trace.error().message);
  if (auto st = runtime::writeChromeTrace(outPath, *trace); !st.ok()) return fail(st.error().message);
  std::cout << fmt::format("profile {} of run {}: {} kernel launches, {} marks -> {}\n", profile, id,
                           trace->events.size(), trace->marks.size(), outPath);
  return 0;
}

int exportCsv(const store::RunStore& db, int64_t id, const std::string& outPath) {
  if (auto r = db.run(id); !r.ok()) return fail(r.error().message);
  auto keys = db.metricKeys(id);
  if (!keys.ok()) return fail(keys.error().message);
  struct Row {
    int64_t step;
    std::string key;
    double value, time;
  };
  std::vector<Row> rows;
  for (const auto& key : *keys) {
    auto points = db.metrics(id, key);
    if (!points.ok()) return fail(points.error().message);
    for (const auto& pt : *points) rows.push_back({pt.step, key, pt.value, pt.time});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.step < b.step; });
  std::ofstream file;
  if (!outPath.empty()) {
    file.open(outPath);
    if (!file) return fail("cannot write " + outPath);
  }
  std::ostream& out = outPath.empty() ? std::cout : file;
  out << "step,key,value,time\n";
  for (const auto& r : rows) out << fmt::format("{},{},{:.9g},{:.3f}\n", r.step, r.key, r.value, r.time);
  return 0;
}

}  // namespace

std::function<int()> addRunsCommand(CLI::App& app) {
  auto a = std::make_shared<RunsArgs>();
  CLI::App* cmd = app.add_subcommand("runs", "List, show and export the runs of a run store");
  cmd->add_option("--db", a->db, "Run store (default: ./runs.db, or PROJECT/runs.db with --project)");
  cmd->add_option("--project", a->project, "Use the project's run store");
  cmd->require_subcommand(1);
  CLI::App* listCmd = cmd->add_subcommand("list", "One line per run: id, name, project, status, steps, loss, start");
  CLI::App* showCmd = cmd->add_subcommand("show", "A run's params, metrics (latest, min, max), artifacts and profiles");
  showCmd->add_option("id", a->id, "Run id")->required();
  CLI::App* exportCmd = cmd->add_subcommand("export", "A run's metrics as step,key,value,time rows");
  exportCmd->add_option("id", a->id, "Run id")->required();
  exportCmd->add_flag("--csv", a->csv, "CSV (the only format)");
  exportCmd->add_option("--out", a->out, "Write to FILE instead of stdout");
  CLI::App* traceCmd = cmd->add_subcommand("export-trace", "A run's profile as Chrome/Perfetto trace JSON");
  traceCmd->add_option("id", a->id, "Run id")->required();
  traceCmd->add_option("--profile", a->profile, "Profile id (default: the run's latest)");
  traceCmd->add_option("-o,--out", a->out, "Trace file to write")->required();
  return [=]() {
    if (!cmd->parsed()) return -1;
    std::string path = a->db;
    if (path.empty()) path = a->project.empty() ? "runs.db" : (std::filesystem::path(a->project) / "runs.db").string();
    std::error_code ec;
    // Reading must not create an empty store where the user mistyped a path, nor write into any file.
    if (!std::filesystem::exists(path, ec)) return fail("no run store at " + path);
    auto db = store::RunStore::openReadOnly(path);
    if (!db.ok()) return fail(db.error().message);
    if (listCmd->parsed()) return list(*db);
    if (showCmd->parsed()) return show(*db, a->id);
    if (traceCmd->parsed()) return exportTrace(*db, a->id, a->profile, a->out);
    return exportCsv(*db, a->id, a->out);
  };
}

}  // namespace tsr::cli
