#include "engine/core/env_options.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

namespace tsr {

namespace {

std::string text(const char* v) { return v ? v : ""; }

// A setting that is on or off: 1, on, true or yes; 0, off, false or no. None: unset, empty or anything else.
std::optional<bool> flag(const char* v) {
  const std::string_view s = v ? v : "";
  for (std::string_view on : {"1", "on", "true", "yes"})
    if (s == on) return true;
  for (std::string_view off : {"0", "off", "false", "no"})
    if (s == off) return false;
  return std::nullopt;
}

// auto|on|off: the value as its consumer compares it ("on", "off", or "auto" for anything else).
std::string autoOnOff(const char* v) {
  const std::optional<bool> f = flag(v);
  return f ? (*f ? "on" : "off") : "auto";
}

// The whole text as a finite number; none otherwise ("4x", "abc", "inf").
std::optional<double> number(const char* v) {
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !std::isfinite(x)) return std::nullopt;
  return x;
}

constexpr double kMaxThreads = 256, kMaxSeconds = 86400;

// A number above 0 and at most `max`; none otherwise.
std::optional<double> positive(const char* v, double max = std::numeric_limits<double>::max()) {
  const std::optional<double> x = number(v);
  return x && *x > 0 && *x <= max ? x : std::nullopt;
}

// A whole number of threads from 1 to 256; none otherwise.
std::optional<int> threadCount(const char* v) {
  const std::optional<double> n = positive(v, kMaxThreads);
  return n && *n >= 1 && *n == std::floor(*n) ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
}

// The values each setting takes. Any other value is read as the setting's default and said once on stderr
// (warnUnknownValues): a typo (TESSERA_CONV_ALGORITHM=winograd, TESSERA_NUM_THREADS=four) changes nothing
// without a word otherwise.
enum class Takes {
  Anything,  // a location or a launcher's variable; or checked where it is used (TESSERA_DEVICE, TESSERA_CPU_DEVICES)
  Listed,    // one of the values its usage lists (NAME=a|b|c); where those are on and off, whatever flag() reads
  Flag,      // whatever flag() reads
  Threads,   // a whole number from 1 to 256
  Flops,     // a number above 0
  Seconds,   // a number above 0, at most a day
};
// A launcher's rank count (mpirun's, srun's): any set means a rank of several, except srun's, which sets it for
// single-task steps too.
void launcherWorld(EnvOptions& o, const char* v, bool setMeansRank) {
  if (!v) return;
  const int n = std::atoi(v);
  if (n > 1) o.mpiWorldSize = n;
  o.underMpi = o.underMpi || setMeansRank || n > 1;
}

// A launcher's count (a local rank, the ranks on this machine): the first variable that gives one wins.
void launcherCount(int& field, int unset, const char* v) {
  if (!v || field != unset) return;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end != v && *end == '\0' && n >= 0 && n < 1 << 20) field = static_cast<int>(n);
}

// A row of the table and where its value goes: a setting, a location, or nowhere (a variable another program
// reads: scripts/run.sh, OpenBLAS).
struct Row {
  EnvVariable variable;
  void (*setting)(EnvOptions&, const char* value) = nullptr;  // value: null when unset
  void (*location)(EnvLocations&, const char* value) = nullptr;
  Takes takes = Takes::Anything;
};

const Row kRows[] = {
    {{"TESSERA_LOG_COMPILES", "TESSERA_LOG_COMPILES=1",
      "log every jit compile with its time, and every cache miss with its reason (which argument changed: shape, "
      "dtype or static value)"},
     [](EnvOptions& o, const char* v) { o.logCompiles = flag(v).value_or(false); }, nullptr, Takes::Flag},
    {{"TESSERA_DEBUG_NANS", "TESSERA_DEBUG_NANS=1",
      "eager ops check their results; a jitted function that produces NaN/Inf is re-run op by op and the error "
      "names the first op, with its module path and source line"},
     [](EnvOptions& o, const char* v) { o.debugNans = flag(v).value_or(false); }, nullptr, Takes::Flag},
    {{"TESSERA_PEAK_FLOPS", "TESSERA_PEAK_FLOPS",
      "the peak used for MFU (default 150e9, the practical SGEMM ceiling of a 2-core AVX2 machine)"},
     [](EnvOptions& o, const char* v) {
       if (const std::optional<double> x = positive(v)) o.peakFlops = *x;
     },
     nullptr, Takes::Flops},
    {{"TESSERA_NUM_THREADS", "TESSERA_NUM_THREADS",
      "threads of the CPU backend (default: the cores this process may use); GEMMs run on the same threads"},
     [](EnvOptions& o, const char* v) {
       o.numThreads = threadCount(v).value_or(0);
     },
     nullptr, Takes::Threads},
    {{"TESSERA_EXECUTOR", "TESSERA_EXECUTOR=interpreter",
      "run jitted graphs node by node with the reference kernels instead of the compiled CPU program"},
     [](EnvOptions& o, const char* v) { o.interpreter = text(v) == "interpreter"; }, nullptr, Takes::Listed},
    {{"TESSERA_CPU_CODEGEN", "TESSERA_CPU_CODEGEN=async|sync|off",
      "native CPU kernels: compiled in the background once an executable is hot (default), at compile time (what "
      "`tessera bench` uses), or never (the tile interpreter only)"},
     [](EnvOptions& o, const char* v) {
       if (!v) return;
       const std::string s = v;
       o.cpuCodegen = flag(v) == false ? CpuCodegen::Off : s == "sync" ? CpuCodegen::Sync : CpuCodegen::Async;
     },
     nullptr, Takes::Listed},
    {{"TESSERA_CXX", "TESSERA_CXX",
      "the C++ compiler for native CPU kernels (default: the one that built Tessera); without one, kernels stay on "
      "the interpreter and a line on stderr says why"},
     nullptr, [](EnvLocations& l, const char* v) { l.cxx = text(v); }},
    {{"TESSERA_GEMM_THREADS", "TESSERA_GEMM_THREADS=blas",
      "hand whole GEMMs to OpenBLAS's own threads (slower here: its threads spin between calls and compete with "
      "ours)"},
     [](EnvOptions& o, const char* v) { o.blasGemmThreads = text(v) == "blas"; }, nullptr, Takes::Listed},
    {{"TESSERA_CPU_DEVICES", "TESSERA_CPU_DEVICES=N",
      "N virtual CPU devices in this process (as `jax_num_cpu_devices`), for meshes of N devices without MPI"},
     [](EnvOptions& o, const char* v) {
       if (v) o.cpuDevices = v;
     }},
    {{"TESSERA_DEVICE", "TESSERA_DEVICE=cpu|cuda",
      "the backend jit compiles for (what `train --device` sets); an unknown name lists the registered backends"},
     [](EnvOptions& o, const char* v) { o.device = v && *v ? v : "cpu"; }},
    {{"TESSERA_MATMUL_PRECISION", "TESSERA_MATMUL_PRECISION=f32|tf32|bf16",
      "f32 matmuls on the GPU (what `train --matmul-precision` sets)"},
     [](EnvOptions& o, const char* v) { o.matmulPrecision = text(v); }, nullptr, Takes::Listed},
    {{"TESSERA_CUDA_DEVICE", "TESSERA_CUDA_DEVICE=N",
      "the GPU this process runs on, by its number among the GPUs it sees (default: under mpirun, the rank's local "
      "rank modulo that count; else 0); a process's virtual devices (`TESSERA_CPU_DEVICES`) take N, N+1, ... "
      "modulo that count"},
     [](EnvOptions& o, const char* v) {
       if (v && *v) o.cudaDevice = v;
     }},
    {{"TESSERA_NCCL", "TESSERA_NCCL=on|off",
      "the collectives of GPU programs under mpirun: NCCL on the device buffers, one GPU per rank (on, the "
      "default), or the op's CPU kernel on host copies through MPI (off: ranks may then share a GPU)"},
     [](EnvOptions& o, const char* v) { o.nccl = flag(v).value_or(true); }, nullptr, Takes::Listed},
    {{"TESSERA_FUSED_ATTENTION", "TESSERA_FUSED_ATTENTION=auto|on|off",
      "models' attention as one dot_product_attention op (flash attention on the GPU) or as dot_general + softmax; "
      "auto: fused on the CPU, and on the GPU with bf16 matmuls or under autocast "
      "(`[precision] compute = \"bf16\"`)"},
     [](EnvOptions& o, const char* v) { o.fusedAttention = autoOnOff(v); }, nullptr, Takes::Listed},
    {{"TESSERA_FUSED_BATCH_NORM", "TESSERA_FUSED_BATCH_NORM=auto|on|off",
      "batch norm in training as the batch_norm_training and batch_norm_grad ops (oneDNN's primitives on the CPU; "
      "other backends run them on the host) or as reductions and elementwise ops, which fuse with their "
      "neighbours and split under a [mesh]; auto: the latter, as fast on ResNet-18 (see docs/performance.md)"},
     [](EnvOptions& o, const char* v) { o.fusedBatchNorm = autoOnOff(v); }, nullptr, Takes::Listed},
    {{"TESSERA_RECOMPUTE", "TESSERA_RECOMPUTE=on|off",
      "the recompute pass (on by default) copies cheap elementwise values (add, mul, square, ...) into the kernels "
      "that read them, so that a forward kernel stores fewer values for the backward pass (a gelu's seven become "
      "two); off: every value is computed once and stored"},
     [](EnvOptions& o, const char* v) { o.recompute = flag(v).value_or(true); }, nullptr, Takes::Listed},
    {{"TESSERA_FLASH_KERNELS", "TESSERA_FLASH_KERNELS=v2|v1",
      "the GPU's tensor-core flash attention kernels: v2 (default) pipelines the tiles' loads with the products and "
      "reads operand fragments with ldmatrix; v1, the first kernels, for comparison"},
     [](EnvOptions& o, const char* v) { o.flashKernelsV1 = text(v) == "v1"; }, nullptr, Takes::Listed},
    {{"TESSERA_CONV_ALGORITHM", "TESSERA_CONV_ALGORITHM=auto|direct",
      "CPU convolutions: auto takes Winograd's F(4x4, 3x3) (oneDNN's `jit_wino_4x3`, about 2.3x fewer "
      "multiplies in practice) for 3x3 stride-1 convolutions of at least 32 channels in and out over at least 32 "
      "4x4 output tiles, in all three passes of training; its rounding error is about 5x the direct kernels' "
      "(1-3e-6 of the largest output against 3e-7); direct: oneDNN's direct kernels everywhere"},
     [](EnvOptions& o, const char* v) { o.convWinograd = text(v) != "direct"; }, nullptr, Takes::Listed},
    {{"TESSERA_CPU_BF16_MATMUL", "TESSERA_CPU_BF16_MATMUL=auto|onednn|f32",
      "CPU products of bf16 operands (autocast's): onednn, oneDNN's bf16 matmul (AVX512_BF16 or AMX instructions, "
      "f32 accumulation); f32, both operands widened to f32 (exact) for OpenBLAS's SGEMM; each result rounded once to "
      "bf16 either way. auto: oneDNN where the CPU's bf16 products outrun its f32 ones (AMX; AMD's AVX512_BF16), "
      "f32 elsewhere (an Intel CPU with AVX512_BF16 but no AMX runs them no faster than SGEMM: see docs/performance.md)"},
     [](EnvOptions& o, const char* v) {
       const std::string s = text(v);
       o.cpuBf16Matmul = s == "onednn" || s == "f32" ? s : "auto";
     },
     nullptr, Takes::Listed},
    {{"TESSERA_BF16_EXCESS_PRECISION", "TESSERA_BF16_EXCESS_PRECISION=on|off",
      "bf16 values computed and used inside one fused kernel stay f32 between its ops and are rounded to bf16 where "
      "they leave it (stored, or reduced), as XLA (`xla_allow_excess_precision`) and torch.compile do by default (on); "
      "values a comparison reads are rounded first. off: every bf16 result is rounded where it is computed, so a "
      "fused kernel gives what its ops give one by one (PyTorch's eager rounding)"},
     [](EnvOptions& o, const char* v) { o.bf16ExcessPrecision = flag(v).value_or(true); }, nullptr, Takes::Listed},
    {{"TESSERA_GEMM_AUTOTUNE", "TESSERA_GEMM_AUTOTUNE=0",
      "GPU products take cuBLASLt's heuristic's first algorithm instead of the fastest of its first 8 timed on the "
      "device when a program is compiled (products of 0.5 GFLOP and more)"},
     [](EnvOptions& o, const char* v) { o.gemmAutotune = flag(v).value_or(true); }, nullptr, Takes::Flag},
    {{"TESSERA_GEMM_AUTOTUNE_LOG", "TESSERA_GEMM_AUTOTUNE_LOG=1",
      "print each autotuned GPU product's time with the heuristic's first algorithm and with the one chosen"},
     [](EnvOptions& o, const char* v) { o.gemmAutotuneLog = flag(v).value_or(false); }, nullptr, Takes::Flag},
    {{"TESSERA_CUDA_GRAPHS", "TESSERA_CUDA_GRAPHS=on|off",
      "a GPU program's runs after the first are captured into a CUDA graph and replayed with one launch while its "
      "buffers' addresses repeat (on by default); a program with work on the host, or a profiled run, runs kernel by "
      "kernel and `Executable::describe()` says why; off: every run kernel by kernel"},
     [](EnvOptions& o, const char* v) { o.cudaGraphs = flag(v).value_or(true); }, nullptr, Takes::Listed},
    {{"TESSERA_CUDA_LOOP_GROUPS", "TESSERA_CUDA_LOOP_GROUPS=on|off",
      "GPU loop kernels with the same generated body and no dependences between them (AdamW's update of each "
      "parameter) run as one launch over a table of their pointers and sizes (on by default); off: one launch each"},
     [](EnvOptions& o, const char* v) { o.cudaLoopGroups = flag(v).value_or(true); }, nullptr, Takes::Listed},
    {{"TESSERA_VERIFY_PASSES", "TESSERA_VERIFY_PASSES=each|end|off",
      "check the graph after every compiler pass (the default of debug builds; a broken graph names the pass), "
      "once after each pipeline, or never (the default of release builds)"},
     [](EnvOptions& o, const char* v) {
       const std::string s = text(v);
       if (s == "each") o.verifyPasses = VerifyPasses::Each;
       if (s == "end") o.verifyPasses = VerifyPasses::End;
       if (flag(v) == false) o.verifyPasses = VerifyPasses::Off;
     },
     nullptr, Takes::Listed},
    {{"TESSERA_KERNEL_CACHE", "TESSERA_KERNEL_CACHE=DIR|off",
      "where compiled kernels (native CPU libraries, CUDA cubins) are cached; `off` compiles every time"},
     nullptr, [](EnvLocations& l, const char* v) { l.kernelCache = text(v); }},
    {{"TESSERA_PLUGIN_PATH", "TESSERA_PLUGIN_PATH",
      "folders (`:`-separated) searched for plugins after the project's `plugins/`"},
     nullptr,
     [](EnvLocations& l, const char* v) {
       const std::string s = text(v);
       for (size_t start = 0; start < s.size();) {
         size_t end = std::min(s.find(':', start), s.size());
         if (end > start) l.pluginPath.push_back(s.substr(start, end - start));
         start = end + 1;
       }
     }},
    {{"TESSERA_BIN", "TESSERA_BIN",
      "the `tessera` executable the IDE launches for runs (default: the one beside `tessera-studio`)"},
     nullptr, [](EnvLocations& l, const char* v) { l.tesseraBin = text(v); }},
    {{"TESSERA_PYTHON", "TESSERA_PYTHON",
      "the Python interpreter that traces a project's model.py (default: the one the Python package was built for)"},
     nullptr, [](EnvLocations& l, const char* v) { l.python = text(v); }},
    {{"TESSERA_TRACE_TIMEOUT", "TESSERA_TRACE_TIMEOUT=SECONDS",
      "how long tracing a project's model.py may take before it is stopped (default 120)"},
     [](EnvOptions& o, const char* v) {
       if (const std::optional<double> s = positive(v, kMaxSeconds)) o.traceTimeout = *s;
     },
     nullptr, Takes::Seconds},
    {{"TESSERA_STORE_LOCK_WAIT", "TESSERA_STORE_LOCK_WAIT=SECONDS",
      "how long `tessera` and the IDE wait for a run store that another process holds locked before they fail "
      "saying so (default 30; `--lock-wait SECONDS` sets it for one command)"},
     [](EnvOptions& o, const char* v) {
       if (const std::optional<double> s = positive(v, kMaxSeconds)) o.storeLockWait = *s;
     },
     nullptr, Takes::Seconds},
    {{"TESSERA_TRACE_SERVER", "TESSERA_TRACE_SERVER=0",
      "trace every model.py in a new Python interpreter instead of a child forked from a warm one (which has "
      "imported tessera already)"},
     [](EnvOptions& o, const char* v) { o.traceServer = flag(v).value_or(true); }, nullptr, Takes::Flag},
    // Read by scripts/run.sh.
    {{"TESSERA_HEADLESS", "TESSERA_HEADLESS=1", "`scripts/run.sh` trains headless even where there is a display"}},
    // Read by OpenBLAS as it loads; cpu::ensureThreadLibrarySettings (tessera, tessera-studio) sets it.
    {{"OPENBLAS_NUM_THREADS", "OPENBLAS_NUM_THREADS",
      "the threads OpenBLAS starts when it loads; `tessera` and `tessera-studio` set it to 1 unless it is set "
      "(GEMMs run on the engine's threads). Each thread that calls OpenBLAS takes a 128 MiB workspace; where that "
      "cannot be mapped (`ulimit -v`), the GEMM fails with a message naming the limit"}},
    // Read by OpenBLAS as it loads; cpu::ensureThreadLibrarySettings (tessera, tessera-studio) sets it where OpenBLAS
    // fell back to its generic kernels.
    {{"OPENBLAS_CORETYPE", "OPENBLAS_CORETYPE",
      "the kernels OpenBLAS runs (`SkylakeX`, `Haswell`, ...); where it does not know the CPU (Debian 12's "
      "OpenBLAS predates Intel's Emerald Rapids) it takes its generic SSE3 kernels, 5-9x slower: `tessera` and "
      "`tessera-studio` then set it to the kernels the CPU can run (`SkylakeX` with AVX-512, `Haswell` with "
      "AVX2) unless it is set, and the Python module warns with the value to set"}},
    // Read by libgomp as it loads; cpu::ensureThreadLibrarySettings (tessera, tessera-studio) and tessera/__init__.py set it.
    {{"OMP_WAIT_POLICY", "OMP_WAIT_POLICY",
      "how the OpenMP threads of oneDNN (the CPU convolutions) wait between parallel regions; `tessera`, "
      "`tessera-studio` and the Python module set PASSIVE unless it is set: spinning threads take the cores from "
      "the engine's own kernels (a small ResNet step took 18x longer)"}},
    // The system's.
    {{"HOME", "HOME", "the user's home folder", false}, nullptr,
     [](EnvLocations& l, const char* v) { l.home = text(v); }},
    {{"XDG_CONFIG_HOME", "XDG_CONFIG_HOME",
      "the user's configuration folder (default ~/.config): tessera/plugins, tessera/trusted.toml", false},
     nullptr, [](EnvLocations& l, const char* v) { l.configHome = text(v); }},
    {{"XDG_CACHE_HOME", "XDG_CACHE_HOME", "the user's cache folder (default ~/.cache): tessera/kernels", false},
     nullptr, [](EnvLocations& l, const char* v) { l.cacheHome = text(v); }},
    {{"PYTHONPATH", "PYTHONPATH", "Python's module path: a traced model.py imports from it", false}, nullptr,
     [](EnvLocations& l, const char* v) { l.pythonPath = text(v); }},
    // mpirun's (Open MPI, MPICH/Hydra, PMIx): any of them set means this process is one rank of several.
    {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "set by Open MPI's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherWorld(o, v, true); }},
    {{"PMI_SIZE", "PMI_SIZE", "set by MPICH's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherWorld(o, v, true); }},
    {{"PMIX_RANK", "PMIX_RANK", "set by a PMIx launcher", false},
     [](EnvOptions& o, const char* v) { o.underMpi = o.underMpi || v; }},
    // The rank's index among those on its machine, and their number: which GPU it takes (engine/backends/cuda).
    {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "set by Open MPI's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherCount(o.localRank, -1, v); }},
    {{"OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "set by Open MPI's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherCount(o.localRanks, 0, v); }},
    {{"MPI_LOCALRANKID", "MPI_LOCALRANKID", "set by MPICH's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherCount(o.localRank, -1, v); }},
    {{"MPI_LOCALNRANKS", "MPI_LOCALNRANKS", "set by MPICH's mpirun", false},
     [](EnvOptions& o, const char* v) { launcherCount(o.localRanks, 0, v); }},
    {{"SLURM_LOCALID", "SLURM_LOCALID", "set by Slurm's srun: the task's index on its node", false},
     [](EnvOptions& o, const char* v) { launcherCount(o.localRank, -1, v); }},
    // srun of a Slurm job step with several tasks (MPI then takes each rank and the world size from Slurm).
    {{"SLURM_STEP_NUM_TASKS", "SLURM_STEP_NUM_TASKS", "set by Slurm's srun: more than 1 means one rank of several", false},
     [](EnvOptions& o, const char* v) { launcherWorld(o, v, false); }},
};

// The values a usage lists ("NAME=a|b|c": a, b, c).
std::vector<std::string> valuesOf(std::string_view usage) {
  std::vector<std::string> values;
  const size_t eq = usage.find('=');
  if (eq == std::string_view::npos) return values;
  for (size_t start = eq + 1; start <= usage.size();) {
    const size_t end = std::min(usage.find('|', start), usage.size());
    values.emplace_back(usage.substr(start, end - start));
    start = end + 1;
  }
  return values;
}

// What is wrong with a set value of a row ("" when nothing is).
std::string complaint(const Row& r, const char* v) {
  switch (r.takes) {
    case Takes::Anything:
      return "";
    case Takes::Listed: {
      const std::vector<std::string> values = valuesOf(r.variable.usage);
      const auto has = [&](std::string_view s) { return std::find(values.begin(), values.end(), s) != values.end(); };
      const std::optional<bool> f = flag(v);
      if (has(v) || (f == true && has("on")) || (f == false && has("off"))) return "";
      std::string listed;
      for (const std::string& s : values) listed += (listed.empty() ? "" : ", ") + s;
      return "is not one of " + listed;
    }
    case Takes::Flag:
      return flag(v) ? "" : "is not 1 or 0 (on, off, true, false, yes, no)";
    case Takes::Threads:
      return threadCount(v) ? "" : "is not a whole number from 1 to 256";
    case Takes::Flops:
      return positive(v) ? "" : "is not a number above 0 (FLOP/s, such as 150e9)";
    case Takes::Seconds:
      return positive(v, kMaxSeconds) ? "" : "is not a number of seconds above 0, at most 86400";
  }
  return "";
}

void warnUnknownValues() {
  static std::mutex mutex;
  static auto& said = *new std::set<std::string>();  // each name=value once a process; kept past exit
  for (const Row& r : kRows) {
    const std::string name(r.variable.name);
    const char* v = std::getenv(name.c_str());
    if (!v || !*v) continue;
    const std::string what = complaint(r, v);
    if (what.empty()) continue;
    std::lock_guard lock(mutex);
    if (!said.insert(name + "=" + v).second) continue;
    std::fprintf(stderr, "tessera: %s=%s %s; it is ignored (the default applies)\n", name.c_str(), v, what.c_str());
  }
}

EnvOptions readOptions() {
  EnvOptions o;
  for (const Row& r : kRows)
    if (r.setting) r.setting(o, std::getenv(std::string(r.variable.name).c_str()));
  warnUnknownValues();
  return o;
}

// Every snapshot of the settings stays alive, so that a reference from envOptions() survives a reload; the
// store is never destroyed, as threads may still read it while the process exits.
struct Store {
  std::mutex mutex;
  std::vector<std::unique_ptr<const EnvOptions>> all;
  std::atomic<const EnvOptions*> current{nullptr};
};

Store& store() {
  static Store* s = new Store;
  return *s;
}

const EnvOptions* publishLocked(Store& s) {
  s.all.push_back(std::make_unique<const EnvOptions>(readOptions()));
  s.current.store(s.all.back().get(), std::memory_order_release);
  return s.all.back().get();
}

}  // namespace

const EnvOptions& envOptions() {
  Store& s = store();
  if (const EnvOptions* p = s.current.load(std::memory_order_acquire)) return *p;
  std::lock_guard lock(s.mutex);
  if (const EnvOptions* p = s.current.load(std::memory_order_acquire)) return *p;
  return *publishLocked(s);
}

void reloadEnvOptions() {
  Store& s = store();
  std::lock_guard lock(s.mutex);
  publishLocked(s);
}

EnvLocations envLocations() {
  EnvLocations l;
  for (const Row& r : kRows)
    if (r.location) r.location(l, std::getenv(std::string(r.variable.name).c_str()));
  return l;
}

std::span<const EnvVariable> envVariables() {
  static const std::vector<EnvVariable> variables = [] {
    std::vector<EnvVariable> v;
    for (const Row& r : kRows) v.push_back(r.variable);
    return v;
  }();
  return variables;
}

}  // namespace tsr
