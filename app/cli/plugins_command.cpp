#include "app/cli/plugins_command.h"

#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "engine/plugin/loader.h"

namespace tsr::cli {

namespace {

struct PluginsArgs {
  std::string project;
  bool json = false;
  bool trust = false;  // --trust: add the project's plugins, as they are now, to the trust list
};

// --trust-plugins, for any command: the project's own plugins load this once without being in the trust list.
bool gTrustPlugins = false;

// Every subcommand, nested ones too, hands options it does not know to its parent, so that --trust-plugins
// may stand anywhere on the command line.
void fallThrough(CLI::App& app) {
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    sub->fallthrough();
    fallThrough(*sub);
  }
}

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
          {"sha256", r.sha256},     {"trusted", !r.untrusted},
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
  const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
  const bool listing = sub && sub->get_name() == "plugins";
  std::string project = projectOf(app);
  // `tessera plugins PROJECT --trust`: trusted before the search, so that they load now too.
  if (listing && sub->get_option("--trust")->count() > 0) {
    if (project.empty()) {
      std::cerr << "tessera plugins: --trust needs a PROJECT\n";
    } else {
      plugin::TrustRequest request;
      request.projectDir = project;
      std::error_code ec;
      if (std::filesystem::is_regular_file(project, ec)) request.projectDir = std::filesystem::path(project).parent_path().string();
      request.pluginDir = (std::filesystem::path(request.projectDir) / "plugins").string();
      request.files = plugin::pluginFiles(request.pluginDir);
      if (Status st = plugin::rememberTrust(request); !st.ok())
        std::cerr << "tessera plugins: " << st.error().message << "\n";
      else
        for (const auto& f : request.files)
          std::cerr << "tessera: trusted " << request.pluginDir << "/" << f.name << " (SHA-256 " << f.sha256 << ") in "
                    << plugin::TrustList::defaultPath() << "\n";
    }
  }
  plugin::TrustPrompt ask;
  if (gTrustPlugins) ask = [](const plugin::TrustRequest&) { return true; };
  std::vector<plugin::PluginRecord> records = plugin::loadStartupPlugins(project, ask);
  if (listing) return;
  for (const auto& r : records)
    if (!r.loaded) std::cerr << "tessera: plugin " << r.path << " skipped: " << r.error << "\n";
}

std::function<int()> addPluginsCommand(CLI::App& app) {
  auto args = std::make_shared<PluginsArgs>();
  CLI::App* cmd = app.add_subcommand("plugins", "List the plugins found: version, path, what each registers (ops, "
                                                "passes, model families, panels) or why it was skipped");
  cmd->add_option("project", args->project, "Project folder: its plugins/ folder is searched first");
  cmd->add_flag("--json", args->json, "Print JSON");
  cmd->add_flag("--trust", args->trust,
                "Trust the native plugins in PROJECT/plugins as they are now (their SHA-256 go into the trust list, "
                "~/.config/tessera/trusted.toml), so that every command loads them");
  app.add_flag("--trust-plugins", gTrustPlugins,
               "Load the native plugins of the project's plugins/ folder this once, although it is not trusted");
  fallThrough(app);
  return [cmd, args]() { return cmd->parsed() ? runPlugins(*args) : -1; };
}

}  // namespace tsr::cli
