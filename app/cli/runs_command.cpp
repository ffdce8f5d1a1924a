#include "app/cli/runs_command.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "app/cli/project_args.h"
#include "engine/data/file_io.h"
#include "engine/runtime/trace_export.h"
#include "engine/store/run_store.h"
#include "engine/train/checkpoints.h"
#include "engine/train/profile_run.h"
#include "engine/train/run_process.h"

namespace tsr::cli {

namespace {

struct RunsArgs {
  std::string db;
  std::string project;
  int64_t id = 0;
  std::vector<int64_t> ids;
  bool csv = false, jsonl = false;
  std::string out;
  int64_t profile = 0;  // 0: the run's latest
  bool all = false;     // list: archived runs too
  std::string tag;      // list, export: only runs with this tag
  std::vector<std::string> tags;
  std::string text;     // note, rename
  bool yes = false;     // delete without asking
};

bool hasTag(const store::RunInfo& r, const std::string& tag) {
  return tag.empty() || std::find(r.tags.begin(), r.tags.end(), tag) != r.tags.end();
}

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

int list(const store::RunStore& db, const RunsArgs& a) {
  auto runs = db.runs();
  if (!runs.ok()) return fail(runs.error().message);
  train::settleOrphanedRuns(db, *runs);
  size_t hidden = 0;
  std::erase_if(*runs, [&](const store::RunInfo& r) {
    const bool hide = (r.archived && !a.all) || !hasTag(r, a.tag);
    hidden += hide && r.archived && !a.all && hasTag(r, a.tag);
    return hide;
  });
  // Columns at least their width, two spaces apart: a long name or project path pushes the row on, never runs
  // into the next column.
  std::cout << fmt::format("{:>4}  {:<19} {:<31} {:<10}{:>7}{:>11}  {}\n", "id", "name", "project", "status", "steps",
                           "last loss", "started");
  for (const auto& r : *runs) {
    auto latest = db.latestMetrics(r.id);
    std::string steps = "-", loss = "-";
    if (latest.ok() && latest->count("loss")) {
      steps = std::to_string(latest->at("loss").step);
      loss = fmt::format("{:.4f}", latest->at("loss").value);
    }
    std::string tags;
    for (const auto& t : r.tags) tags += " #" + t;
    std::cout << fmt::format("{:>4}  {:<19} {:<31} {:<10}{:>7}{:>11}  {}{}{}\n", r.id, r.name, r.project,
                             store::runStatusName(r.status), steps, loss, localTime(r.startTime),
                             r.archived ? " (archived)" : "", tags);
  }
  std::cout << runs->size() << " runs in " << db.path();
  if (hidden) std::cout << fmt::format(" ({} archived not shown: --all)", hidden);
  std::cout << "\n";
  return 0;
}

int show(const store::RunStore& db, int64_t id) {
  auto r = db.run(id);
  if (!r.ok()) return fail(r.error().message);
  train::settleOrphanedRun(db, *r);
  std::cout << fmt::format("run {}: {} ({})\n", r->id, r->name, store::runStatusName(r->status));
  std::cout << fmt::format("project  {}\nstarted  {}\nended    {}\n", r->project, localTime(r->startTime),
                           localTime(r->endTime));
  if (!r->message.empty()) std::cout << "message  " << r->message << "\n";
  if (!r->tags.empty()) std::cout << "tags     " << fmt::format("{}", fmt::join(r->tags, ", ")) << "\n";
  if (r->archived) std::cout << "archived yes\n";
  if (!r->notes.empty()) std::cout << "notes    " << r->notes << "\n";
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
    auto events = db.kernelEventCount(p.id);
    std::cout << fmt::format("  {:>4}  {:<20}{:>8}{:>10}{:>12}  {}\n", p.id, p.name,
                             fmt::format("{}-{}", p.firstStep, p.lastStep), kernels.ok() ? kernels->size() : 0,
                             events.ok() ? *events : 0, localTime(p.created));
  }
  return 0;
}

int exportTrace(const store::RunStore& db, int64_t id, int64_t profile, const std::string& outPath) {
  if (auto r = db.run(id); !r.ok()) return fail(r.error().message);
  if (outPath.empty()) return fail("export-trace needs -o FILE");
  if (Status st = train::checkOutputFile(outPath, db.path()); !st.ok()) return fail(st.error().message);
  auto profiles = db.profiles(id);
  if (!profiles.ok()) return fail(profiles.error().message);
  if (profiles->empty()) return fail(fmt::format("run {} has no profiles (record one with tessera profile)", id));
  if (profile == 0) profile = profiles->back().id;
  if (std::none_of(profiles->begin(), profiles->end(), [&](const auto& p) { return p.id == profile; }))
    return fail(fmt::format("run {} has no profile {}", id, profile));
  // Streamed: a profile of any size exports in bounded memory.
  auto written = train::exportTrace(db, profile, outPath);
  if (!written.ok()) return fail(written.error().message);
  std::cout << fmt::format("profile {} of run {}: {} kernel launches, {} marks -> {}\n", profile, id, written->events,
                           written->marks, outPath);
  return 0;
}

// Metrics of several runs, as CSV (run,step,key,value,time) or JSON Lines (one object per run and step,
// every metric of the step a field). No ids: every run (with --tag, every run with the tag).
int exportMetrics(const store::RunStore& db, const RunsArgs& a) {
  std::vector<store::RunInfo> runs;
  if (a.ids.empty()) {
    auto all = db.runs();
    if (!all.ok()) return fail(all.error().message);
    for (auto& r : *all)
      if (hasTag(r, a.tag)) runs.push_back(std::move(r));
  } else {
    for (int64_t id : a.ids) {
      auto r = db.run(id);
      if (!r.ok()) return fail(r.error().message);
      runs.push_back(std::move(*r));
    }
  }
  if (!a.out.empty())
    if (Status st = train::checkOutputFile(a.out, db.path()); !st.ok()) return fail(st.error().message);
  // A file is written whole, then renamed over the old one.
  std::ostringstream file;
  std::ostream& out = a.out.empty() ? std::cout : file;
  if (!a.jsonl) out << "run,step,key,value,time\n";
  for (const auto& r : runs) {
    auto keys = db.metricKeys(r.id);
    if (!keys.ok()) return fail(keys.error().message);
    // step -> (time, key -> value), in step order.
    std::map<int64_t, std::pair<double, std::map<std::string, double>>> steps;
    for (const auto& key : *keys) {
      auto points = db.metrics(r.id, key);
      if (!points.ok()) return fail(points.error().message);
      for (const auto& pt : *points) {
        auto& row = steps[pt.step];
        row.first = pt.time;
        row.second[key] = pt.value;
      }
    }
    for (const auto& [step, row] : steps) {
      if (a.jsonl) {
        nlohmann::json j = {{"run", r.id}, {"name", r.name}, {"step", step}, {"time", row.first}};
        for (const auto& [k, v] : row.second) j[k] = v;
        out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else {
        for (const auto& [k, v] : row.second)
          out << fmt::format("{},{},{},{:.9g},{:.3f}\n", r.id, step, k, v, row.first);
      }
    }
  }
  if (!a.out.empty())
    if (Status st = data::writeFileAtomically(a.out, file.str()); !st.ok()) return fail(st.error().message);
  return 0;
}

// runs tag/untag/note/rename/archive/unarchive/delete: edits that write to the store.
int edit(const std::string& path, const std::string& what, const RunsArgs& a) {
  auto db = store::RunStore::open(path);
  if (!db.ok()) return fail(db.error().message);
  Status st;
  if (what == "tag") st = db->addTags(a.id, a.tags);
  else if (what == "untag") st = db->removeTags(a.id, a.tags);
  else if (what == "note") st = db->setNotes(a.id, a.text);
  else if (what == "rename") st = db->renameRun(a.id, a.text);
  else if (what == "archive") st = db->setArchived(a.id, true);
  else if (what == "unarchive") st = db->setArchived(a.id, false);
  else if (what == "delete") {
    auto described = train::describeRunDeletion(path, a.id);
    if (!described.ok()) return fail(described.error().message);
    if (!a.yes) {
      if (!::isatty(STDIN_FILENO)) return fail("delete " + *described + ": confirm with --yes");
      std::cout << "Delete " << *described << "? [y/N] " << std::flush;
      std::string answer;
      std::getline(std::cin, answer);
      if (answer != "y" && answer != "Y" && answer != "yes") {
        std::cout << "kept\n";
        return 1;
      }
    }
    st = train::deleteRunAndCheckpoints(path, a.id);
    if (st.ok()) std::cout << "deleted " << *described << "\n";
  }
  if (!st.ok()) return fail(st.error().message);
  return 0;
}

}  // namespace

std::function<int()> addRunsCommand(CLI::App& app) {
  auto a = std::make_shared<RunsArgs>();
  CLI::App* cmd = app.add_subcommand("runs", "List, show, tag, annotate, delete and export the runs of a run store");
  cmd->add_option("--db", a->db, "Run store (default: ./runs.db, or PROJECT/runs.db with --project)");
  cmd->add_option("--project", a->project, "Use the project's run store");
  addLockWaitOption(cmd);
  cmd->require_subcommand(1);
  CLI::App* listCmd = cmd->add_subcommand("list", "One line per run: id, name, project, status, steps, loss, start, tags");
  listCmd->add_flag("--all", a->all, "Archived runs too");
  listCmd->add_option("--tag", a->tag, "Only runs with this tag");
  CLI::App* showCmd = cmd->add_subcommand("show", "A run's params, metrics (latest, min, max), artifacts and profiles");
  showCmd->add_option("id", a->id, "Run id")->required();
  CLI::App* exportCmd = cmd->add_subcommand("export", "Metrics of runs as CSV (run,step,key,value,time) or JSON Lines");
  exportCmd->add_option("ids", a->ids, "Run ids (default: every run)");
  exportCmd->add_flag("--csv", a->csv, "CSV (the default)");
  exportCmd->add_flag("--jsonl", a->jsonl, "JSON Lines: one object per run and step, its metrics as fields");
  exportCmd->add_option("--tag", a->tag, "Every run with this tag");
  exportCmd->add_option("--out", a->out, "Write to FILE instead of stdout");
  CLI::App* traceCmd = cmd->add_subcommand("export-trace", "A run's profile as Chrome/Perfetto trace JSON");
  traceCmd->add_option("id", a->id, "Run id")->required();
  traceCmd->add_option("--profile", a->profile, "Profile id (default: the run's latest)");
  traceCmd->add_option("-o,--out", a->out, "Trace file to write")->required();
  // Edits.
  std::map<std::string, CLI::App*> edits;
  auto editCmd = [&](const char* name, const char* help) {
    CLI::App* c = cmd->add_subcommand(name, help);
    c->add_option("id", a->id, "Run id")->required();
    edits[name] = c;
    return c;
  };
  editCmd("tag", "Add tags to a run")->add_option("tags", a->tags, "Tags")->required();
  editCmd("untag", "Remove tags from a run")->add_option("tags", a->tags, "Tags")->required();
  editCmd("note", "Set a run's notes")->add_option("text", a->text, "The notes (\"\" clears them)")->required();
  editCmd("rename", "Rename a run")->add_option("name", a->text, "The new name")->required();
  editCmd("archive", "Hide a run from runs list (runs list --all shows it)");
  editCmd("unarchive", "Show an archived run again");
  editCmd("delete", "Delete a run: its metrics, artifacts, profiles and checkpoint folder")
      ->add_flag("-y,--yes", a->yes, "Do not ask for confirmation");
  return [=]() {
    if (!cmd->parsed()) return -1;
    std::string path = a->db;
    if (path.empty()) path = a->project.empty() ? "runs.db" : (std::filesystem::path(a->project) / "runs.db").string();
    std::error_code ec;
    // Reading must not create an empty store where the user mistyped a path, nor write into any file.
    if (!std::filesystem::exists(path, ec)) return fail("no run store at " + path);
    for (const auto& [name, c] : edits)
      if (c->parsed()) return edit(path, name, *a);
    auto db = store::RunStore::openReadOnly(path);
    if (!db.ok()) return fail(db.error().message);
    if (listCmd->parsed()) return list(*db, *a);
    if (showCmd->parsed()) return show(*db, a->id);
    if (traceCmd->parsed()) return exportTrace(*db, a->id, a->profile, a->out);
    if (a->csv && a->jsonl) return fail("export: --csv or --jsonl, not both");
    return exportMetrics(*db, *a);
  };
}

}  // namespace tsr::cli
