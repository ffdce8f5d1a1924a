#include "app/cli/plugins_command.h"

#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/plugin/loader.h"

namespace tsr::cli {

namespace {

struct PluginsArgs {
  std::string project;
  bool json = false;
};

// The project a command line names: the value of a `project` positional or a --project option of the parsed
// subcommands (e.g. `tessera train P`, `tessera runs --project P list`).
std::string projectOf(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const char* name : {"project", "--project"}) {
      const CLI::Option* o = sub->get_option_no_throw(name);
      if (o && o->count() > 0 && !o->results().empty()) return o->results().front();
    }
    if (std::string p = projectOf(*sub); !p.empty()) return p;
  }
  return "";
}

nlohmann::json toJson(const plugin::PluginRecord& r) {
  return {{"name", r.name},         {"version", r.version}, {"path", r.path},     {"origin", r.origin},
          {"loaded", r.loaded},     {"error", r.error},     {"description", r.description},
          {"ops", r.ops},           {"passes", r.passes},   {"families", r.families},
          {"panels", r.panels}};
}

int runPlugins(const PluginsArgs& a) {
  std::vector<plugin::PluginRecord> records = plugin::pluginRecords();
  if (a.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (const auto& r : records) arr.push_back(toJson(r));
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  int loaded = 0;
  for (const auto& r : records) {
    std::cout << plugin::describe(r) << "\n";
    loaded += r.loaded;
  }
  std::cout << loaded << " plugin" << (loaded == 1 ? "" : "s") << " loaded";
  if (records.size() > static_cast<size_t>(loaded)) std::cout << ", " << records.size() - loaded << " skipped";
  std::cout << "\nsearched:";
  for (const auto& d : plugin::searchDirs(a.project, plugin::bundledPluginDir()))
    std::cout << "\n  " << d.dir << " (" << d.origin << ")";
  std::cout << "\n";
  return 0;
}

}  // namespace

void loadPluginsFor(const CLI::App& app) {
  std::vector<plugin::PluginRecord> records = plugin::loadStartupPlugins(projectOf(app));
  const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
  if (sub && sub->get_name() == "plugins") return;
  for (const auto& r : records)
    if (!r.loaded) std::cerr << "tessera: plugin " << r.path << " skipped: " << r.error << "\n";
}

std::function<int()> addPluginsCommand(CLI::App& app) {
  auto args = std::make_shared<PluginsArgs>();
  CLI::App* cmd = app.add_subcommand("plugins", "List the plugins found: version, path, what each registers (ops, "
                                                "passes, model families, panels) or why it was skipped");
  cmd->add_option("project", args->project, "Project folder: its plugins/ folder is searched first");
  cmd->add_flag("--json", args->json, "Print JSON");
  return [cmd, args]() { return cmd->parsed() ? runPlugins(*args) : -1; };
}

}  // namespace tsr::cli
