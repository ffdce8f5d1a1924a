#pragma once
// Trust in a project's own plugins. A project folder is something people download and open; its plugins/ folder
// is native code that would run with their rights the moment the project opens. So that code loads only from a
// project the user has trusted, with exactly the libraries they trusted: the trust list names the folder and the
// SHA-256 of each library, and a new or changed library needs trust again. Plugins of TESSERA_PLUGIN_PATH, the
// user's folder and the bundled ones are the user's own choice and load as they are.
//
// The list is a TOML file, by default $XDG_CONFIG_HOME/tessera/trusted.toml (~/.config/tessera/trusted.toml):
//
//   [[project]]
//   folder = "/home/me/models/gpt2_swiglu"
//   plugins = { "swiglu.so" = "9f2c...64 hex digits" }
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/result.h"

namespace tsr::plugin {

// A library of a plugins/ folder: its file name and SHA-256 (empty when it cannot be read).
struct PluginFile {
  std::string name;
  std::string sha256;
  bool operator==(const PluginFile&) const = default;
};

struct TrustedProject {
  std::string folder;               // the project folder, canonical
  std::vector<PluginFile> plugins;  // by file name
};

// What the loader asks before it loads a project's plugins: the project, its plugins/ folder, the libraries
// there that are not loaded yet, and why they are not trusted ("not in the trust list", "swiglu.so changed").
struct TrustRequest {
  std::string projectDir;
  std::string pluginDir;
  std::vector<PluginFile> files;
  std::string reason;
};

class TrustList {
 public:
  // $XDG_CONFIG_HOME/tessera/trusted.toml, else ~/.config/tessera/trusted.toml; empty when neither is set.
  static std::string defaultPath();
  // A missing file is an empty list; a damaged one an error that names the file, the line and the key.
  static Result<TrustList> load(const std::string& path);
  static Result<TrustList> parse(std::string_view text, const std::string& source);

  // Empty when `folder` is trusted with every one of `files` (each listed with the same hash), else why not.
  std::string whyUntrusted(const std::string& folder, const std::vector<PluginFile>& files) const;
  // Trusts `files` of `folder` in addition to those already trusted there (a library of the same name is
  // replaced).
  void trust(const std::string& folder, const std::vector<PluginFile>& files);

  std::string toToml() const;
  // Written atomically, the folder created if needed.
  Status save(const std::string& path) const;

  const std::vector<TrustedProject>& projects() const { return m_projects; }

 private:
  std::vector<TrustedProject> m_projects;
};

// Adds the request's libraries to the trust list at `path` (default: TrustList::defaultPath()) and saves it.
Status rememberTrust(const TrustRequest& request, const std::string& path = "");

// A folder as the trust list names it: absolute, canonical where it exists.
std::string trustFolderName(const std::string& folder);

}  // namespace tsr::plugin
