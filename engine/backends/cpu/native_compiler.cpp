#include "engine/backends/cpu/native_compiler.h"

#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/core/env_options.h"
#include "engine/core/hash.h"
#include "engine/core/subprocess.h"
#include "engine/runtime/kernel_cache.h"

namespace tsr::cpu {

namespace fs = std::filesystem;

namespace {

// Kernels per translation unit: a big program's first libraries land while later ones still compile.
constexpr size_t kKernelsPerLibrary = 48;

// Libraries the disk cache keeps: the most recently used (a load from the cache counts as a use).
constexpr size_t kCachedLibraries = 512;

// A finished library's name: tsr_cpu_<16 hex digits>.so (files being written have a longer name).
bool isLibraryName(const std::string& name) {
  return name.size() == 8 + 16 + 3 && name.rfind("tsr_cpu_", 0) == 0 && name.substr(24) == ".so";
}

// Removes the least recently used libraries beyond kCachedLibraries. Loaded libraries stay mapped.
void pruneCache(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> libs;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (isLibraryName(e.path().filename().string())) libs.push_back({e.last_write_time(ec), e.path()});
  if (libs.size() <= kCachedLibraries) return;
  std::sort(libs.begin(), libs.end());
  for (size_t i = 0; i + kCachedLibraries < libs.size(); ++i) fs::remove(libs[i].second, ec);
}

// The flags the engine's own kernels are built with (CMakeLists.txt): AVX2 and FMA, and no FMA contraction, so
// that native and interpreted kernels round alike.
const std::vector<std::string>& compileFlags() {
  static const std::vector<std::string> flags = {"-x", "c++", "-std=c++17", "-O2", "-march=haswell", "-mfma",
                                                 "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-shared", "-w"};
  return flags;
}

std::string findCompiler() {
  if (std::string c = envLocations().cxx; !c.empty()) return c;
#ifdef TSR_HOST_CXX
  if (::access(TSR_HOST_CXX, X_OK) == 0) return TSR_HOST_CXX;
#endif
  return "c++";
}

std::string readText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Service {
 public:
  // The flags and the prelude are copied in: at exit this object's destructor joins a worker that may still be
  // compiling, after function-local statics constructed later are gone.
  Service() : m_flags(compileFlags()), m_prelude(nativePrelude()) {}
  ~Service() {
    {
      std::lock_guard lock(m_mu);
      m_stop = true;
      if (m_child > 0) ::kill(m_child, SIGKILL);
    }
    m_wake.notify_all();
    if (m_worker.joinable()) m_worker.join();
  }

  NativeMode mode() {
    std::lock_guard lock(m_mu);
    if (!m_modeSet) {
      m_modeSet = true;
      const CpuCodegen c = envOptions().cpuCodegen.value_or(CpuCodegen::Async);
      m_mode = c == CpuCodegen::Off ? NativeMode::Off : c == CpuCodegen::Sync ? NativeMode::Sync : NativeMode::Async;
    }
    return m_mode;
  }
  void setMode(NativeMode m) {
    std::lock_guard lock(m_mu);
    m_modeSet = true;
    m_mode = m;
  }

  Status compile(NativeKernelSet& set) {
    std::lock_guard compiling(m_compileMu);  // one compile at a time: the cores belong to the program
    // Kernels already loaded (by this set's twin, or another executable) are filled in at once.
    std::vector<size_t> missing;
    {
      std::lock_guard lock(m_mu);
      for (size_t i = 0; i < set.size(); ++i) {
        if (set.get(i)) continue;
        auto it = m_loaded.find(set.sources()[i].symbol);
        if (it != m_loaded.end()) set.set(i, it->second);
        else missing.push_back(i);
      }
      if (m_disabled) return makeError("{}", m_error);
    }
    // Distinct kernels, sorted by symbol: the same program always makes the same libraries.
    std::vector<const NativeSource*> todo;
    for (size_t i : missing) todo.push_back(&set.sources()[i]);
    std::sort(todo.begin(), todo.end(), [](auto* a, auto* b) { return a->symbol < b->symbol; });
    todo.erase(std::unique(todo.begin(), todo.end(), [](auto* a, auto* b) { return a->symbol == b->symbol; }),
               todo.end());
    for (size_t first = 0; first < todo.size(); first += kKernelsPerLibrary) {
      std::vector<const NativeSource*> chunk(todo.begin() + static_cast<std::ptrdiff_t>(first),
                                             todo.begin() + static_cast<std::ptrdiff_t>(std::min(todo.size(), first + kKernelsPerLibrary)));
      Status st = buildAndLoad(chunk);
      if (!st.ok()) {
        std::lock_guard lock(m_mu);
        if (m_stop) return st;
        if (m_error.empty()) std::cerr << "tessera: native CPU kernels unavailable, using the interpreter: " << st.error().message << "\n";
        m_error = st.error().message;
        return st;
      }
      std::lock_guard lock(m_mu);
      for (size_t i : missing) {
        auto it = m_loaded.find(set.sources()[i].symbol);
        if (it != m_loaded.end()) set.set(i, it->second);
      }
    }
    return {};
  }

  void request(std::shared_ptr<NativeKernelSet> set) {
    {
      std::lock_guard lock(m_mu);
      if (m_stop) return;
      m_queue.push_back(std::move(set));
      if (!m_worker.joinable()) m_worker = std::thread([this] { work(); });
    }
    m_wake.notify_all();
  }

  NativeStats stats() {
    std::lock_guard lock(m_mu);
    NativeStats s = m_stats;
    s.kernels = static_cast<int64_t>(m_loaded.size());
    s.error = m_error;
    return s;
  }

 private:
  void work() {
    std::unique_lock lock(m_mu);
    for (;;) {
      m_wake.wait(lock, [&] { return m_stop || !m_queue.empty(); });
      if (m_stop) break;
      auto set = std::move(m_queue.front());
      m_queue.pop_front();
      lock.unlock();
      (void)compile(*set);
      lock.lock();
    }
  }

  // Runs the compiler on `src` into `out`; its messages go to `log`.
  Status runCompiler(const fs::path& src, const fs::path& out, const fs::path& log) {
    const std::string cxx = findCompiler();
    std::vector<std::string> argv = {cxx};
    for (const auto& f : m_flags) argv.push_back(f);
    argv.push_back("-o");
    argv.push_back(out.string());
    argv.push_back(src.string());
    Result<pid_t> pid = makeError("shutting down");
    {
      std::lock_guard lock(m_mu);
      if (m_stop) return pid.error();
      SpawnOptions o;
      o.argv = argv;
      o.log = log.string();
      pid = spawnProcess(o);
      if (pid.ok()) m_child = *pid;
    }
    if (!pid.ok()) {
      std::lock_guard lock(m_mu);
      m_disabled = true;  // no compiler: every later request would fail the same way
      return makeError("{} (set TESSERA_CXX)", pid.error().message);
    }
    const ProcessExit exit = waitProcess(*pid);
    {
      std::lock_guard lock(m_mu);
      m_child = 0;
    }
    if (!exit.ok()) {
      std::string msg = readText(log);
      if (msg.size() > 2000) msg = msg.substr(0, 2000) + "...";
      return makeError("'{}' failed on {} ({}):\n{}", cxx, src.string(), exit.describe(), msg);
    }
    return {};
  }

  Status buildAndLoad(const std::vector<const NativeSource*>& chunk) {
    std::string tu = m_prelude;
    for (const auto* s : chunk) tu += "\n" + s->code;
    std::string key = findCompiler();
    for (const auto& f : m_flags) key += " " + f;
    const std::string name = fmt::format("tsr_cpu_{:016x}", fnv1a(tu, fnv1a(key)));
    std::string cacheRoot = runtime::kernelCacheDir();
    const bool cached = !cacheRoot.empty();
    fs::path dir = cached ? fs::path(cacheRoot) / "cpu" : fs::temp_directory_path() / fmt::format("tessera-cpu-{}", ::getpid());
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return makeError("cannot create the kernel folder {}: {}", dir.string(), ec.message());
    const fs::path lib = dir / (name + ".so");
    bool fromCache = cached && fs::exists(lib);
    if (fromCache) fs::last_write_time(lib, fs::file_time_type::clock::now(), ec);  // used: keep it longest
    if (!fromCache) {
      // Written under unique names and renamed into place: processes compiling the same library at once
      // never load a half-written file.
      const std::string tag = fmt::format("{}.{}", ::getpid(), std::hash<std::thread::id>()(std::this_thread::get_id()));
      const fs::path src = dir / (name + "." + tag + ".cpp"), tmp = dir / (name + "." + tag + ".so"),
                     log = dir / (name + "." + tag + ".log");
      {
        std::ofstream f(src, std::ios::binary);
        f << tu;
        if (!f) return makeError("cannot write {}", src.string());
      }
      auto t0 = std::chrono::steady_clock::now();
      Status st = runCompiler(src, tmp, log);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fs::remove(log, ec);
      if (!st.ok()) {
        fs::remove(tmp, ec);
        std::lock_guard lock(m_mu);
        if (m_stop) fs::remove(src, ec);  // killed at exit; a real failure keeps the source for reading
        return st;
      }
      fs::remove(src, ec);
      fs::rename(tmp, lib, ec);
      if (ec) return makeError("cannot place {}: {}", lib.string(), ec.message());
      if (cached) pruneCache(dir);
      std::lock_guard lock(m_mu);
      ++m_stats.libraries;
      m_stats.compileSeconds += secs;
    }
    void* handle = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = ::dlerror();
      if (fromCache) fs::remove(lib, ec);  // a damaged cache entry is rebuilt next time
      return makeError("cannot load {}: {}", lib.string(), why ? why : "unknown error");
    }
    if (!cached) fs::remove_all(dir, ec);  // the mapping outlives the file
    std::lock_guard lock(m_mu);
    if (fromCache) ++m_stats.cachedLibraries;
    for (const auto* s : chunk) {
      void* f = ::dlsym(handle, s->symbol.c_str());
      if (!f) return makeError("{} has no kernel {}", lib.string(), s->symbol);
      m_loaded[s->symbol] = f;
    }
    return {};
  }

  const std::vector<std::string> m_flags;
  const std::string m_prelude;
  std::mutex m_mu, m_compileMu;
  std::condition_variable m_wake;
  std::deque<std::shared_ptr<NativeKernelSet>> m_queue;
  std::thread m_worker;
  bool m_stop = false, m_disabled = false;
  bool m_modeSet = false;
  NativeMode m_mode = NativeMode::Async;
  pid_t m_child = 0;
  std::unordered_map<std::string, void*> m_loaded;
  NativeStats m_stats;
  std::string m_error;
};

Service& service() {
  static Service s;
  return s;
}

}  // namespace

NativeKernelSet::NativeKernelSet(std::vector<NativeSource> sources)
    : m_sources(std::move(sources)), m_fns(new std::atomic<void*>[m_sources.size()]) {
  for (size_t i = 0; i < m_sources.size(); ++i) m_fns[i].store(nullptr);
}

NativeMode nativeMode() { return service().mode(); }
void setNativeMode(NativeMode mode) { service().setMode(mode); }
const char* nativeModeName(NativeMode mode) {
  switch (mode) {
    case NativeMode::Off: return "off";
    case NativeMode::Sync: return "sync";
    default: return "async";
  }
}
Status compileNative(NativeKernelSet& set) { return service().compile(set); }
void requestNative(std::shared_ptr<NativeKernelSet> set) { service().request(std::move(set)); }
NativeStats nativeStats() { return service().stats(); }
std::string nativeCompileCommand() {
  std::string s = findCompiler();
  for (const auto& f : compileFlags()) s += " " + f;
  return s;
}

}  // namespace tsr::cpu
