#include "engine/plugin/loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/ops/registry.h"
#include "engine/ops/rule_table.h"
#include "engine/plugin/library_check.h"
#include "engine/version.h"

namespace tsr::plugin {

namespace {

namespace fs = std::filesystem;

struct State {
  std::mutex mutex;
  std::vector<PluginRecord> records;
  std::vector<PanelRegistration> panels;
  std::set<std::string> triedPaths;  // canonical paths of every library tried
};

State& state() {
  static State s;
  return s;
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::path(path), ec);
  return ec ? path : c.string();
}

// Checks the staged registrations against what is registered and against each other; the first problem is the
// plugin's error. Nothing is registered here.
std::string validate(Registrations& regs) {
  const ir::OpRegistry& reg = ops::registry();
  std::set<std::string> names;
  for (const auto& op : regs.ops) {
    auto st = ops::checkOpRules(op.def, op.example, op.exampleAttrs);
    if (!st.ok()) return "op " + st.error().message;
    if (reg.find(op.def.name)) return fmt::format("op '{}' is already registered", op.def.name);
    if (!names.insert(op.def.name).second) return fmt::format("op '{}' is registered twice", op.def.name);
  }
  names.clear();
  auto existingPasses = passes::registeredPasses();
  for (const auto& p : regs.passes) {
    if (p.name.empty() || !p.make) return "a pass without a name or factory";
    for (const auto& e : existingPasses)
      if (e.name == p.name) return fmt::format("pass '{}' is already registered", p.name);
    if (!names.insert(p.name).second) return fmt::format("pass '{}' is registered twice", p.name);
  }
  names.clear();
  for (const auto& f : regs.families) {
    if (auto st = project::validateModelFamily(f); !st.ok()) return st.error().message;
    if (project::isCoreFamily(f.name)) return fmt::format("model family '{}' is a core family", f.name);
    if (project::findModelFamily(f.name)) return fmt::format("model family '{}' is already registered", f.name);
    if (!names.insert(f.name).second) return fmt::format("model family '{}' is registered twice", f.name);
  }
  names.clear();
  for (const auto& p : regs.panels) {
    if (p.name.empty() || !p.create) return "a panel without a name or factory";
    for (const auto& e : state().panels)
      if (e.name == p.name) return fmt::format("panel '{}' is already registered", p.name);
    if (!names.insert(p.name).second) return fmt::format("panel '{}' is registered twice", p.name);
  }
  return "";
}

// Registers what validate() accepted. The checks above make these succeed; one that fails anyway (a race with
// another registration) is reported as the plugin's error, after what went before it.
std::string commit(Registrations& regs, PluginRecord& r) {
  for (auto& op : regs.ops) {
    std::string name = op.def.name;
    auto code = ops::registry().add(std::move(op.def));
    if (!code.ok()) return code.error().message;
    r.ops.push_back(name);
  }
  for (auto& p : regs.passes) {
    p.origin = r.path;
    std::string line = fmt::format("{} at {}", p.name, passes::pipelinePointName(p.point));
    auto st = passes::registerPass(std::move(p));
    if (!st.ok()) return st.error().message;
    r.passes.push_back(line);
  }
  for (auto& f : regs.families) {
    f.origin = r.path;
    std::string name = f.name;
    auto st = project::registerModelFamily(std::move(f));
    if (!st.ok()) return st.error().message;
    r.families.push_back(name);
  }
  for (auto& p : regs.panels) {
    r.panels.push_back(fmt::format("{} ({})", p.name, p.title));
    state().panels.push_back(std::move(p));
  }
  return "";
}

// The whole file in one read (libraries are a few MB; one over 1 GiB is refused, errno EFBIG).
bool readLibrary(const std::string& path, std::vector<uint8_t>& bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return false;
  std::streamoff size = in.tellg();
  if (size < 0) return false;
  if (size > (std::streamoff(1) << 30)) {
    errno = EFBIG;
    return false;
  }
  bytes.resize(static_cast<size_t>(size));
  in.seekg(0);
  return static_cast<bool>(in.read(reinterpret_cast<char*>(bytes.data()), size)) || size == 0;
}

// `expectedSha256`: the hash a project's library was trusted with; a file that changed since is not loaded.
PluginRecord loadLocked(const std::string& path, const std::string& origin, const std::string& expectedSha256) {
  PluginRecord r;
  r.path = path;
  r.origin = origin;
  if (!isPluginHost()) {
    r.error = "this program does not export the engine to plugins (it is not linked with tsr_plugin_host)";
    return r;
  }
  // The file as it is now: its hash for the record, and a check that dlopen can map it whole and will find the
  // entry point (a damaged library would crash it, or run its initialisers before being turned away).
  std::vector<uint8_t> bytes;
  if (!readLibrary(path, bytes)) {
    r.error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return r;
  }
  r.sha256 = sha256Hex(bytes);
  if (!expectedSha256.empty() && r.sha256 != expectedSha256) {
    r.error = fmt::format("the library changed after it was trusted (SHA-256 {}, trusted {})", r.sha256, expectedSha256);
    return r;
  }
  if (Status st = checkLibraryImage(bytes, TESSERA_PLUGIN_ENTRY_SYMBOL); !st.ok()) {
    r.error = "damaged library: " + st.error().message;
    return r;
  }
  bytes = {};
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    r.error = why ? why : "dlopen failed";
    return r;
  }
  // What init staged holds functions whose code is the plugin's: it goes before the library does.
  Host host(path);
  auto skip = [&](std::string why) {
    r.error = std::move(why);
    host.registrations() = Registrations{};
    dlclose(handle);
    return r;
  };
  dlerror();
  auto entry = reinterpret_cast<TesseraPluginEntry>(dlsym(handle, TESSERA_PLUGIN_ENTRY_SYMBOL));
  if (!entry)
    return skip(fmt::format("no entry point {}() (not a Tessera plugin, or one for another plugin API)",
                            TESSERA_PLUGIN_ENTRY_SYMBOL));
  const TesseraPluginInfo* info = nullptr;
  try {
    info = entry();
  } catch (const std::exception& e) {
    return skip(fmt::format("{}() threw: {}", TESSERA_PLUGIN_ENTRY_SYMBOL, e.what()));
  } catch (...) {
    return skip(fmt::format("{}() threw", TESSERA_PLUGIN_ENTRY_SYMBOL));
  }
  if (!info) return skip(fmt::format("{}() returned no plugin info", TESSERA_PLUGIN_ENTRY_SYMBOL));
  // The version comes first: nothing else of an info struct of another API version is read.
  if (info->apiVersion != TESSERA_PLUGIN_API_VERSION)
    return skip(fmt::format("plugin API version {}, this Tessera loads version {}", info->apiVersion,
                            TESSERA_PLUGIN_API_VERSION));
  r.name = info->name ? info->name : "";
  r.version = info->version ? info->version : "";
  r.description = info->description ? info->description : "";
  std::string engine = info->engineVersion ? info->engineVersion : "";
  if (engine != kVersion)
    return skip(fmt::format("built against Tessera {}, this is {}: rebuild the plugin", engine.empty() ? "?" : engine,
                            kVersion));
  if (r.name.empty()) return skip("the plugin info has no name");
  if (!info->init) return skip("the plugin info has no init function");
  for (const auto& other : state().records)
    if (other.loaded && other.name == r.name)
      return skip(fmt::format("a plugin named '{}' is already loaded from {}", r.name, other.path));

  int rc = 0;
  try {
    rc = info->init(host.handle());
  } catch (const std::exception& e) {
    return skip(fmt::format("init threw: {}", e.what()));
  } catch (...) {
    return skip("init threw");
  }
  Registrations& regs = host.registrations();
  if (rc != 0)
    return skip(regs.failure.empty() ? fmt::format("init failed (returned {})", rc) : "init failed: " + regs.failure);
  if (std::string why = validate(regs); !why.empty()) return skip(why);
  // From here the library stays loaded: the registries hold its functions.
  if (std::string why = commit(regs, r); !why.empty()) r.error = why;
  else r.loaded = true;
  return r;
}

bool isLibrary(const fs::path& p) {
  std::error_code ec;
  return p.extension() == ".so" && fs::is_regular_file(p, ec);
}

}  // namespace

bool isPluginHost() {
  static const bool host = dlsym(RTLD_DEFAULT, "tessera_plugin_host_v1") != nullptr;
  return host;
}

std::vector<SearchDir> searchDirs(const std::string& projectDir, const std::string& bundledDir) {
  std::vector<SearchDir> dirs;
  if (!projectDir.empty()) {
    fs::path p(projectDir);
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) p = p.parent_path();  // a project.toml
    dirs.push_back({(p / "plugins").string(), "project"});
  }
  const EnvLocations env = envLocations();
  for (const std::string& dir : env.pluginPath) dirs.push_back({dir, "TESSERA_PLUGIN_PATH"});
  if (!env.configHome.empty())
    dirs.push_back({(fs::path(env.configHome) / "tessera" / "plugins").string(), "user"});
  else if (!env.home.empty())
    dirs.push_back({(fs::path(env.home) / ".config" / "tessera" / "plugins").string(), "user"});
  if (!bundledDir.empty()) dirs.push_back({bundledDir, "bundled"});
  return dirs;
}

std::string bundledPluginDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  fs::path dir = exe.parent_path();
  // The build tree: build/app/cli/tessera, build/app/studio/tessera-studio, build/tests/<area>/<test>.
  for (const fs::path& candidate : {dir.parent_path().parent_path() / "plugins", dir.parent_path() / "lib" / "tessera" / "plugins"})
    if (fs::is_directory(candidate, ec)) return candidate.lexically_normal().string();
  return "";
}

namespace {

// Records a plugin, replacing the record of an earlier try of the same file that was not loaded for want of
// trust (it is tried again once trusted).
void addRecord(State& s, const PluginRecord& r) {
  for (auto& other : s.records)
    if (other.path == r.path && !other.loaded && other.untrusted) {
      other = r;
      return;
    }
  s.records.push_back(r);
}

std::vector<fs::path> librariesIn(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (isLibrary(e.path())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

bool tried(const fs::path& f) {
  std::lock_guard lock(state().mutex);
  return state().triedPaths.count(canonical(f.string())) > 0;
}

std::string hashOf(const fs::path& f) {
  std::vector<uint8_t> bytes;
  return readLibrary(f.string(), bytes) ? sha256Hex(bytes) : "";
}

// Whether the untried libraries of a project's plugins/ folder may load: the trust list covers them, or the
// prompt says yes. Those that may not are recorded as untrusted and returned empty.
// A library to load, with the hash it was trusted with (empty: no trust needed).
struct Candidate {
  fs::path path;
  std::string sha256;
};

std::vector<Candidate> trustedLibraries(const SearchDir& d, const TrustPrompt& ask, const std::string& trustList,
                                        std::vector<PluginRecord>& out) {
  std::vector<fs::path> files;
  for (const fs::path& f : librariesIn(d.dir))
    if (!tried(f)) files.push_back(f);
  if (files.empty()) return {};
  TrustRequest request;
  request.pluginDir = d.dir;
  request.projectDir = fs::path(d.dir).parent_path().string();
  for (const fs::path& f : files) request.files.push_back({f.filename().string(), hashOf(f)});
  auto list = TrustList::load(trustList.empty() ? TrustList::defaultPath() : trustList);
  request.reason = list.ok() ? list->whyUntrusted(trustFolderName(request.projectDir), request.files)
                             : "the trust list cannot be read: " + list.error().message;
  if (request.reason.empty() || (ask && ask(request))) {
    std::vector<Candidate> trusted;
    for (size_t i = 0; i < files.size(); ++i)
      trusted.push_back({files[i], request.files[i].sha256.empty() ? "unreadable" : request.files[i].sha256});
    return trusted;
  }
  std::lock_guard lock(state().mutex);
  for (size_t i = 0; i < files.size(); ++i) {
    PluginRecord r;
    r.path = canonical(files[i].string());
    r.origin = d.origin;
    r.sha256 = request.files[i].sha256;
    r.untrusted = true;
    r.error = fmt::format("not trusted ({}): native code in a project's plugins/ folder loads only once the project "
                          "is trusted (tessera plugins PROJECT --trust, or --trust-plugins for one command)",
                          request.reason);
    addRecord(state(), r);
    out.push_back(r);
  }
  return {};
}

PluginRecord loadChecked(const std::string& path, const std::string& origin, const std::string& expectedSha256) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  std::string c = canonical(path);
  s.triedPaths.insert(c);
  PluginRecord r = loadLocked(c, origin, expectedSha256);
  addRecord(s, r);
  return r;
}

}  // namespace

PluginRecord loadPlugin(const std::string& path, const std::string& origin) { return loadChecked(path, origin, ""); }

std::vector<PluginFile> pluginFiles(const std::string& dir) {
  std::vector<PluginFile> out;
  for (const fs::path& f : librariesIn(dir)) out.push_back({f.filename().string(), hashOf(f)});
  return out;
}

std::vector<PluginRecord> loadPlugins(const std::vector<SearchDir>& dirs, const TrustPrompt& ask,
                                      const std::string& trustList) {
  std::vector<PluginRecord> out;
  if (!isPluginHost()) return out;
  for (const SearchDir& d : dirs) {
    std::vector<Candidate> files;
    if (d.origin == "project") files = trustedLibraries(d, ask, trustList, out);
    else for (const fs::path& f : librariesIn(d.dir)) files.push_back({f, ""});
    for (const Candidate& f : files) {
      if (tried(f.path)) continue;  // the same file through another folder
      out.push_back(loadChecked(f.path.string(), d.origin, f.sha256));
    }
  }
  return out;
}

std::vector<PluginRecord> loadStartupPlugins(const std::string& projectDir, const TrustPrompt& ask) {
  return loadPlugins(searchDirs(projectDir, bundledPluginDir()), ask);
}

std::vector<PluginRecord> pluginRecords() {
  std::lock_guard lock(state().mutex);
  return state().records;
}

std::vector<PanelRegistration> pluginPanels() {
  std::lock_guard lock(state().mutex);
  return state().panels;
}

std::string describe(const PluginRecord& r) {
  std::string head = r.name.empty() ? fs::path(r.path).filename().string() : r.name;
  if (!r.version.empty()) head += " " + r.version;
  std::string s = fmt::format("{}  {} ({})", head, r.path, r.origin);
  if (!r.loaded) return s + "\n    skipped: " + r.error;
  if (!r.sha256.empty()) s += "\n    sha256 " + r.sha256;
  auto list = [&](const char* what, const std::vector<std::string>& items) {
    if (items.empty()) return;
    s += fmt::format("\n    {}: ", what);
    for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  };
  if (!r.description.empty()) s += "\n    " + r.description;
  list("ops", r.ops);
  list("passes", r.passes);
  list("model families", r.families);
  list("panels", r.panels);
  return s;
}

}  // namespace tsr::plugin
