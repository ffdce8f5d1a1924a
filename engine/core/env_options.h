#pragma once
// The environment variables Tessera reads, in one table (env_options.cpp: name, the values it takes, what it
// does, how it is read). README.md's table of environment variables is this table (test_env_options checks that
// they agree). Nothing else in the engine or the programs calls getenv.
//
// Two kinds of value:
//   - settings (EnvOptions): how the engine runs (threads, devices, the executor, logging). Read once, on first
//     use, and kept for the process: envOptions(). reloadEnvOptions() reads them again (tests that set a
//     variable; the CLI once it has set TESSERA_DEVICE or TESSERA_MATMUL_PRECISION from its options).
//   - locations (EnvLocations): folders and programs (the kernel cache, the plugin folders, the C++ compiler,
//     the tessera executable, the user's home, config and cache folders). Read where they are used, each time:
//     envLocations(). A process may point them elsewhere as it goes (the IDE's tests give it a fresh home).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tsr {

// TESSERA_CPU_CODEGEN's values.
enum class CpuCodegen { Async, Sync, Off };
// TESSERA_VERIFY_PASSES's values: verify the graph after every pass, once after the pipeline, or never.
enum class VerifyPasses { Each, End, Off };

struct EnvOptions {
  bool logCompiles = false;               // TESSERA_LOG_COMPILES
  bool debugNans = false;                 // TESSERA_DEBUG_NANS
  std::optional<double> peakFlops;        // TESSERA_PEAK_FLOPS; none: the CLI's default
  int numThreads = 0;                     // TESSERA_NUM_THREADS (1..256); 0: the cores this process may use
  bool interpreter = false;               // TESSERA_EXECUTOR=interpreter
  std::optional<CpuCodegen> cpuCodegen;   // TESSERA_CPU_CODEGEN; none: not set (async)
  bool blasGemmThreads = false;           // TESSERA_GEMM_THREADS=blas
  std::optional<std::string> cpuDevices;  // TESSERA_CPU_DEVICES as written (engine/dist parses and checks it)
  std::string device = "cpu";             // TESSERA_DEVICE
  std::string matmulPrecision;            // TESSERA_MATMUL_PRECISION as written ("" when unset)
  std::string fusedAttention = "auto";    // TESSERA_FUSED_ATTENTION=auto|on|off
  std::string fusedBatchNorm = "auto";    // TESSERA_FUSED_BATCH_NORM=auto|on|off
  bool recompute = true;                  // TESSERA_RECOMPUTE=off: the recompute pass leaves the graph alone
  bool flashKernelsV1 = false;            // TESSERA_FLASH_KERNELS=v1: the first tensor-core attention kernels
  bool convWinograd = true;               // TESSERA_CONV_ALGORITHM=auto|direct
  std::string cpuBf16Matmul = "auto";     // TESSERA_CPU_BF16_MATMUL=auto|onednn|f32
  bool bf16ExcessPrecision = true;        // TESSERA_BF16_EXCESS_PRECISION=on|off
  bool gemmAutotune = true;               // TESSERA_GEMM_AUTOTUNE=0: cuBLASLt's heuristic's first algorithm
  bool gemmAutotuneLog = false;           // TESSERA_GEMM_AUTOTUNE_LOG=1
  bool cudaGraphs = true;                 // TESSERA_CUDA_GRAPHS=off: every GPU step launched kernel by kernel
  bool cudaLoopGroups = true;             // TESSERA_CUDA_LOOP_GROUPS=off: every loop kernel launched alone
  std::optional<VerifyPasses> verifyPasses;  // TESSERA_VERIFY_PASSES; none: the build's default
  bool underMpi = false;                  // OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set (by mpirun)
  double traceTimeout = 120;             // TESSERA_TRACE_TIMEOUT: seconds a model.py may take to trace
  std::optional<double> storeLockWait;    // TESSERA_STORE_LOCK_WAIT: seconds a wait for a locked run store may
                                          // last; none: the store's default (engine/store/lock_wait.h)
  bool traceServer = true;                // TESSERA_TRACE_SERVER=0: every trace in a new interpreter
  int mpiWorldSize = 1;                   // the launcher's rank count: OMPI_COMM_WORLD_SIZE, PMI_SIZE or
                                          // SLURM_STEP_NUM_TASKS (1 where none says)
  std::optional<std::string> cudaDevice;  // TESSERA_CUDA_DEVICE as written (the CUDA backend parses and checks it)
  bool nccl = true;                       // TESSERA_NCCL=off: GPU programs' collectives on the host
  int localRank = -1;                     // this rank's index among the ranks of its machine: OMPI_COMM_WORLD_LOCAL_RANK,
                                          // MPI_LOCALRANKID or SLURM_LOCALID (-1 where none says)
  int localRanks = 0;                     // the ranks on this machine: OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS
                                          // (0 where none says)
};

struct EnvLocations {
  std::string kernelCache;              // TESSERA_KERNEL_CACHE: a folder, "off", or "" when unset
  std::vector<std::string> pluginPath;  // TESSERA_PLUGIN_PATH's folders, in order (empty entries dropped)
  std::string cxx;                      // TESSERA_CXX ("" when unset)
  std::string tesseraBin;               // TESSERA_BIN ("" when unset)
  std::string python;                   // TESSERA_PYTHON ("" when unset: the interpreter Tessera was built for)
  std::string home;                     // HOME
  std::string configHome;               // XDG_CONFIG_HOME ("" when unset: ~/.config)
  std::string cacheHome;                // XDG_CACHE_HOME ("" when unset: ~/.cache)
  std::string pythonPath;               // PYTHONPATH (a traced model.py's imports see it)
};

// The process's settings, read from the environment on first use.
const EnvOptions& envOptions();
// Reads the settings again. References from envOptions() stay valid (they keep the values they had).
void reloadEnvOptions();
// The locations as the environment gives them now.
EnvLocations envLocations();

// One row of the table.
struct EnvVariable {
  std::string_view name;   // "TESSERA_CPU_CODEGEN"
  std::string_view usage;  // as README.md's table writes it: "TESSERA_CPU_CODEGEN=async|sync|off"
  std::string_view doc;    // what it does (markdown, as in README.md)
  // Listed in README.md: the variables Tessera defines. The system's (HOME, XDG_*, mpirun's) are read, not listed.
  bool listed = true;
};
std::span<const EnvVariable> envVariables();

}  // namespace tsr
