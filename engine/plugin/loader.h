#pragma once
// Finding and loading plugins (plugin.h), for the CLI and the IDE alike.
//
// Search order (first found wins):
//   1. PROJECT/plugins                         the open project's own plugins
//   2. each folder of TESSERA_PLUGIN_PATH      ':'-separated, in order
//   3. the user's config folder                $XDG_CONFIG_HOME/tessera/plugins (default ~/.config/tessera/plugins)
//   4. the plugins that ship with Tessera      plugins/ of the build tree, or lib/tessera/plugins of an install,
//                                              found from the running program's path
// In each folder the *.so files load in name order. A file already loaded (the same canonical path) is not
// loaded again; a second plugin with the name of a loaded one is skipped and reported ("already loaded from
// PATH"), so the earlier folder wins. A plugin that fails (it cannot be opened, lacks the entry point, has
// another API or engine version, its init fails or throws, an op fails the rule-table check, or a name clashes
// with what is registered) is reported with its path and the reason, unloaded, and changes nothing. Before the
// dynamic loader sees a library, the loader hashes it (SHA-256, in the record) and checks it is a whole ELF
// library exporting the entry point (library_check.h): a damaged one is reported and skipped without running
// any of its code, and the next plugin of its name in the search order loads instead.
//
// A project's own plugins/ folder loads only when trusted (trust.h): its libraries are in the trust list with
// the same hashes, or the caller's TrustPrompt says yes (the CLI's --trust-plugins, the IDE's question).
// Untrusted ones are reported ("not trusted: ...") and load later once trusted.
//
// Plugins must load before graphs are built (the op registry hands out references to its ops): the CLI loads
// them before it runs a command, the IDE at start and when it opens a project.
#include <functional>
#include <string>
#include <vector>

#include "engine/plugin/plugin.h"
#include "engine/plugin/trust.h"

namespace tsr::plugin {

struct PluginRecord {
  std::string path;    // the library
  std::string origin;  // "project", "TESSERA_PLUGIN_PATH", "user", "bundled" or "explicit"
  std::string name, version, description;
  std::string sha256;  // of the library file (empty when it cannot be read)
  bool loaded = false;
  bool untrusted = false;  // a project's plugin not loaded for want of trust
  std::string error;  // why it was skipped (empty when loaded)
  // What it registers: op names, "NAME at POINT" for passes, family names, "NAME (Title)" for panels.
  std::vector<std::string> ops, passes, families, panels;
};

struct SearchDir {
  std::string dir;
  std::string origin;
};

// The folders of the search order for a project (empty: none) and the bundled folder (empty: none).
std::vector<SearchDir> searchDirs(const std::string& projectDir, const std::string& bundledDir);
// plugins/ next to the running program: <exe>/../../plugins (the build tree: build/app/cli/tessera) or
// <exe>/../lib/tessera/plugins (an install); empty when neither exists.
std::string bundledPluginDir();

// Whether this program can load plugins: it exports the engine (tsr_plugin_host in engine/plugin/CMakeLists.txt).
// In a program that cannot, loadPlugins finds nothing and loadPlugin reports why.
bool isPluginHost();

// Loads one library. Never throws or aborts on a bad plugin: the record says what happened.
PluginRecord loadPlugin(const std::string& path, const std::string& origin = "explicit");
// Asked before the libraries of a project's plugins/ folder that the trust list does not cover are loaded;
// true loads them (remembering the answer is the prompt's business: rememberTrust). None: they do not load.
using TrustPrompt = std::function<bool(const TrustRequest&)>;

// Loads every plugin of the folders in order (see above); returns the records of this call, skipped ones too.
// `trustList`: the trust list's file (default: TrustList::defaultPath()).
std::vector<PluginRecord> loadPlugins(const std::vector<SearchDir>& dirs, const TrustPrompt& ask = {},
                                      const std::string& trustList = "");
// searchDirs(projectDir, bundledPluginDir()), loaded.
std::vector<PluginRecord> loadStartupPlugins(const std::string& projectDir = "", const TrustPrompt& ask = {});

// The libraries of a folder that loadPlugins would try (*.so regular files, in name order), with their hashes.
std::vector<PluginFile> pluginFiles(const std::string& dir);

// Every plugin this process has tried, loaded or skipped, in order.
std::vector<PluginRecord> pluginRecords();
// The panels of the loaded plugins, in load order.
std::vector<PanelRegistration> pluginPanels();

// One line per plugin for a listing: "swiglu 1.0.0  /path/swiglu.so  ops: swiglu; families: gpt2_swiglu".
std::string describe(const PluginRecord& r);

}  // namespace tsr::plugin
