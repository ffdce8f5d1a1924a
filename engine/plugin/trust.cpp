#include "engine/plugin/trust.h"

#include "engine/core/env_options.h"
#include "engine/core/toml_text.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "engine/data/file_io.h"

namespace tsr::plugin {

namespace {

namespace fs = std::filesystem;

std::string lineOf(const toml::node& n) { return std::to_string(n.source().begin.line); }

bool isSha256(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

std::string trustFolderName(const std::string& folder) {
  std::error_code ec;
  fs::path p = fs::absolute(fs::path(folder), ec);
  if (ec) return folder;
  fs::path c = fs::weakly_canonical(p, ec);
  return (ec ? p : c).lexically_normal().string();
}

std::string TrustList::defaultPath() {
  const EnvLocations env = envLocations();
  if (!env.configHome.empty()) return (fs::path(env.configHome) / "tessera" / "trusted.toml").string();
  if (!env.home.empty()) return (fs::path(env.home) / ".config" / "tessera" / "trusted.toml").string();
  return "";
}

Result<TrustList> TrustList::load(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return TrustList{};
  TSR_ASSIGN(std::string text, data::readFile(path));
  return parse(text, path);
}

Result<TrustList> TrustList::parse(std::string_view text, const std::string& source) {
  // The list is ASCII (toToml writes other characters as \uXXXX): toml++ 3.3 also misreads a non-ASCII
  // character right after a value, so none is taken even in strings (engine/core/toml_text.h).
  TSR_TRY(checkTomlText(text, source, /*asciiOnly=*/true));
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return makeError("{}:{}: {}", source, e.source().begin.line, e.description());
  }
  TrustList list;
  for (const auto& [key, node] : root)
    if (key.str() != "project") return makeError("{}:{}: unknown key '{}' (the list holds [[project]] tables)", source, lineOf(node), key.str());
  const toml::node* projects = root.get("project");
  if (!projects) return list;
  const toml::array* array = projects->as_array();
  if (!array) return makeError("{}:{}: 'project' must be an array of tables ([[project]])", source, lineOf(*projects));
  for (const toml::node& entry : *array) {
    const toml::table* t = entry.as_table();
    if (!t) return makeError("{}:{}: each 'project' must be a table", source, lineOf(entry));
    TrustedProject p;
    for (const auto& [key, node] : *t) {
      if (key.str() == "folder") {
        const auto* s = node.as_string();
        if (!s || s->get().empty()) return makeError("{}:{}: 'folder' must be a non-empty string", source, lineOf(node));
        p.folder = s->get();
      } else if (key.str() == "plugins") {
        const toml::table* files = node.as_table();
        if (!files) return makeError("{}:{}: 'plugins' must be a table of file name = SHA-256", source, lineOf(node));
        for (const auto& [name, hash] : *files) {
          const auto* h = hash.as_string();
          if (!h || !isSha256(h->get()))
            return makeError("{}:{}: plugins.'{}' must be a SHA-256 (64 lowercase hex digits)", source, lineOf(hash), name.str());
          p.plugins.push_back({std::string(name.str()), h->get()});
        }
      } else {
        return makeError("{}:{}: unknown key '{}' in [[project]] (folder, plugins)", source, lineOf(node), key.str());
      }
    }
    if (p.folder.empty()) return makeError("{}:{}: a [[project]] without 'folder'", source, lineOf(entry));
    list.m_projects.push_back(std::move(p));
  }
  return list;
}

std::string TrustList::whyUntrusted(const std::string& folder, const std::vector<PluginFile>& files) const {
  const TrustedProject* project = nullptr;
  for (const auto& p : m_projects)
    if (p.folder == folder) project = &p;
  if (!project) return fmt::format("the project {} is not in the trust list", folder);
  for (const PluginFile& f : files) {
    const PluginFile* known = nullptr;
    for (const auto& k : project->plugins)
      if (k.name == f.name) known = &k;
    if (!known) return fmt::format("{} is new since the project was trusted", f.name);
    if (f.sha256.empty() || known->sha256 != f.sha256)
      return fmt::format("{} changed since the project was trusted (SHA-256 {}, trusted {})", f.name,
                         f.sha256.empty() ? "unreadable" : f.sha256, known->sha256);
  }
  return "";
}

void TrustList::trust(const std::string& folder, const std::vector<PluginFile>& files) {
  TrustedProject* project = nullptr;
  for (auto& p : m_projects)
    if (p.folder == folder) project = &p;
  if (!project) project = &m_projects.emplace_back(TrustedProject{folder, {}});
  for (const PluginFile& f : files) {
    if (f.sha256.empty()) continue;
    bool replaced = false;
    for (auto& k : project->plugins)
      if (k.name == f.name) {
        k.sha256 = f.sha256;
        replaced = true;
      }
    if (!replaced) project->plugins.push_back(f);
  }
}

std::string TrustList::toToml() const {
  // Written by hand, not with toml++'s formatter: toml++ 3.3 writes a string that holds both a line break and
  // three single quotes as a multi-line literal string, which those quotes end early. Every string here is a
  // basic string with ASCII escapes.
  std::string out =
      "# Projects whose plugins/ folder Tessera loads native code from: the folder and the SHA-256 of each\n"
      "# library. A new or changed library needs trust again. Delete an entry to withdraw trust.\n";
  for (const auto& p : m_projects) {
    out += fmt::format("\n[[project]]\nfolder = {}\nplugins = {{", tomlString(p.folder, /*asciiOnly=*/true));
    for (size_t i = 0; i < p.plugins.size(); ++i)
      out += fmt::format("{} {} = {}", i ? "," : "", tomlString(p.plugins[i].name, true),
                         tomlString(p.plugins[i].sha256, true));
    out += p.plugins.empty() ? "}\n" : " }\n";
  }
  return out;
}

Status TrustList::save(const std::string& path) const {
  if (path.empty()) return makeError("no place for the plugin trust list (neither XDG_CONFIG_HOME nor HOME is set)");
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return makeError("cannot create {}: {}", fs::path(path).parent_path().string(), ec.message());
  TSR_ASSIGN(data::AtomicFileWriter w, data::AtomicFileWriter::create(path));
  TSR_TRY(w.write(toToml()));
  return w.commit();
}

Status rememberTrust(const TrustRequest& request, const std::string& path) {
  std::string file = path.empty() ? TrustList::defaultPath() : path;
  TSR_ASSIGN(TrustList list, TrustList::load(file));
  list.trust(trustFolderName(request.projectDir), request.files);
  return list.save(file);
}

}  // namespace tsr::plugin
