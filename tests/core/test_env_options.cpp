// The environment options (engine/core/env_options.h): README.md's table is the code's table, settings are read
// once and again on reloadEnvOptions(), locations each time they are asked for, and each value parses as the
// table says.
#include "tests/check.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "engine/core/env_options.h"

using namespace tsr;

namespace {

// Sets (or, with nullopt, unsets) variables for one test and puts the old values back after it.
class ScopedEnv {
 public:
  void set(const std::string& name, std::optional<std::string> value) {
    if (!m_saved.count(name)) {
      const char* old = std::getenv(name.c_str());
      m_saved[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    if (value) ::setenv(name.c_str(), value->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : m_saved) {
      if (value) ::setenv(name.c_str(), value->c_str(), 1);
      else ::unsetenv(name.c_str());
    }
    reloadEnvOptions();
  }

 private:
  std::map<std::string, std::optional<std::string>> m_saved;
};

// README.md's rows of the environment-variable table, as written.
std::vector<std::string> readmeRows() {
  std::ifstream in(TSR_SOURCE_DIR "/README.md");
  std::vector<std::string> rows;
  std::string line;
  bool inTable = false;
  while (std::getline(in, line)) {
    if (line == "| variable | effect |") {
      inTable = true;
      std::getline(in, line);  // | --- | --- |
      continue;
    }
    if (!inTable) continue;
    if (line.empty() || line[0] != '|') break;
    rows.push_back(line);
  }
  return rows;
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

}  // namespace

TEST_CASE("readmeTableIsTheCodesTable") {
  std::vector<std::string> want;
  for (const EnvVariable& v : envVariables())
    if (v.listed) want.push_back("| `" + escaped(v.usage) + "` | " + std::string(v.doc) + " |");
  const std::vector<std::string> got = readmeRows();
  REQUIRE_MESSAGE(!got.empty(), "README.md has no '| variable | effect |' table");
  for (size_t i = 0; i < std::max(want.size(), got.size()); ++i)
    REQUIRE_MESSAGE((i < want.size() && i < got.size() && want[i] == got[i]),
                    "row " << i << ": README has\n  " << (i < got.size() ? got[i] : "nothing")
                           << "\nthe table (engine/core/env_options.cpp) has\n  "
                           << (i < want.size() ? want[i] : "nothing"));
}

TEST_CASE("everyVariableOnceWithItsDoc") {
  std::set<std::string_view> names;
  for (const EnvVariable& v : envVariables()) {
    REQUIRE_MESSAGE(names.insert(v.name).second, std::string(v.name));
    REQUIRE(v.usage.substr(0, v.name.size()) == v.name);
    REQUIRE(!v.doc.empty());
  }
  REQUIRE((names.count("TESSERA_CPU_DEVICES") && names.count("TESSERA_PLUGIN_PATH") && names.count("HOME")));
}

TEST_CASE("settingsAreReadOnceUntilReloaded") {
  ScopedEnv env;
  env.set("TESSERA_NUM_THREADS", "7");
  reloadEnvOptions();
  const EnvOptions& before = envOptions();
  TSR_COMPARE(before.numThreads, 7);
  env.set("TESSERA_NUM_THREADS", "3");
  TSR_COMPARE(envOptions().numThreads, 7);  // kept until read again
  reloadEnvOptions();
  TSR_COMPARE(envOptions().numThreads, 3);
  TSR_COMPARE(before.numThreads, 7);  // a reference taken before keeps its values
}

TEST_CASE("settingsParse") {
  ScopedEnv env;
  for (const char* name : {"TESSERA_LOG_COMPILES", "TESSERA_DEBUG_NANS", "TESSERA_PEAK_FLOPS", "TESSERA_EXECUTOR",
                           "TESSERA_CPU_CODEGEN", "TESSERA_GEMM_THREADS", "TESSERA_CPU_DEVICES", "TESSERA_DEVICE",
                           "TESSERA_MATMUL_PRECISION", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                           "SLURM_STEP_NUM_TASKS"})
    env.set(name, std::nullopt);
  env.set("TESSERA_NUM_THREADS", "1000");
  reloadEnvOptions();
  {
    const EnvOptions& o = envOptions();
    REQUIRE((!o.logCompiles && !o.debugNans && !o.interpreter && !o.blasGemmThreads && !o.underMpi));
    TSR_COMPARE(o.mpiWorldSize, 1);
    REQUIRE((!o.peakFlops && !o.cpuCodegen && !o.cpuDevices));
    TSR_COMPARE(o.device, std::string("cpu"));
    TSR_COMPARE(o.matmulPrecision, std::string());
    TSR_COMPARE(o.numThreads, 0);  // more than 256: the default, the cores
  }
  env.set("TESSERA_LOG_COMPILES", "0");  // "0" is off
  env.set("TESSERA_DEBUG_NANS", "yes");
  env.set("TESSERA_PEAK_FLOPS", "2.5e9");
  env.set("TESSERA_NUM_THREADS", "many");
  env.set("TESSERA_EXECUTOR", "interpreter");
  env.set("TESSERA_CPU_CODEGEN", "sync");
  env.set("TESSERA_GEMM_THREADS", "blas");
  env.set("TESSERA_CPU_DEVICES", "4x");  // kept as written: engine/dist says what is wrong with it
  env.set("TESSERA_DEVICE", "");
  env.set("TESSERA_MATMUL_PRECISION", "tf32");
  env.set("PMI_SIZE", "2");
  reloadEnvOptions();
  const EnvOptions& o = envOptions();
  REQUIRE(!o.logCompiles);
  REQUIRE(o.debugNans);
  TSR_COMPARE(*o.peakFlops, 2.5e9);
  TSR_COMPARE(o.numThreads, 0);  // not a number: the cores
  REQUIRE(o.interpreter);
  REQUIRE(o.cpuCodegen == CpuCodegen::Sync);
  REQUIRE(o.blasGemmThreads);
  TSR_COMPARE(*o.cpuDevices, std::string("4x"));
  TSR_COMPARE(o.device, std::string("cpu"));  // empty: the default
  TSR_COMPARE(o.matmulPrecision, std::string("tf32"));
  REQUIRE(o.underMpi);
  TSR_COMPARE(o.mpiWorldSize, 2);
  // srun sets its task count for one-task steps too: only more than one makes a rank of several.
  env.set("PMI_SIZE", std::nullopt);
  env.set("SLURM_STEP_NUM_TASKS", "1");
  reloadEnvOptions();
  REQUIRE(!envOptions().underMpi);
  TSR_COMPARE(envOptions().mpiWorldSize, 1);
  env.set("SLURM_STEP_NUM_TASKS", "6");
  reloadEnvOptions();
  REQUIRE(envOptions().underMpi);
  TSR_COMPARE(envOptions().mpiWorldSize, 6);
  env.set("TESSERA_CPU_CODEGEN", "0");
  reloadEnvOptions();
  REQUIRE(envOptions().cpuCodegen == CpuCodegen::Off);
  env.set("TESSERA_CPU_CODEGEN", "whatever");
  reloadEnvOptions();
  REQUIRE(envOptions().cpuCodegen == CpuCodegen::Async);
}

// A value outside what a setting takes is read as its default, whole: "4x" is not 4, "abc" FLOP/s not 0 (an MFU
// divided by 0). Switches read 1/on/true/yes and 0/off/false/no alike, auto|on|off settings too.
TEST_CASE("badValuesReadAsTheDefault") {
  ScopedEnv env;
  const auto read = [&](const char* name, const char* value) {
    env.set(name, value);
    reloadEnvOptions();
    return envOptions();
  };
  TSR_COMPARE(read("TESSERA_NUM_THREADS", "3").numThreads, 3);
  TSR_COMPARE(read("TESSERA_NUM_THREADS", "4x").numThreads, 0);
  TSR_COMPARE(read("TESSERA_NUM_THREADS", "2.5").numThreads, 0);
  TSR_COMPARE(read("TESSERA_NUM_THREADS", "-2").numThreads, 0);
  for (const char* bad : {"abc", "0", "-1e9", "inf", "1e9x"}) REQUIRE(!read("TESSERA_PEAK_FLOPS", bad).peakFlops);
  TSR_COMPARE(*read("TESSERA_PEAK_FLOPS", "320e9").peakFlops, 320e9);
  TSR_COMPARE(read("TESSERA_TRACE_TIMEOUT", "soon").traceTimeout, 120.0);
  TSR_COMPARE(read("TESSERA_TRACE_TIMEOUT", "7.5").traceTimeout, 7.5);
  for (const char* bad : {"soon", "0", "-5", "86401"}) REQUIRE(!read("TESSERA_STORE_LOCK_WAIT", bad).storeLockWait);
  TSR_COMPARE(*read("TESSERA_STORE_LOCK_WAIT", "0.25").storeLockWait, 0.25);
  REQUIRE(!read("TESSERA_LOG_COMPILES", "false").logCompiles);
  REQUIRE(read("TESSERA_LOG_COMPILES", "on").logCompiles);
  REQUIRE(!read("TESSERA_LOG_COMPILES", "maybe").logCompiles);
  REQUIRE(!read("TESSERA_RECOMPUTE", "no").recompute);
  REQUIRE(read("TESSERA_RECOMPUTE", "maybe").recompute);
  REQUIRE(!read("TESSERA_TRACE_SERVER", "false").traceServer);
  // auto|on|off: as the consumers compare it (nn::fusedAttentionFor reads "on", "off", anything else as auto).
  TSR_COMPARE(read("TESSERA_FUSED_ATTENTION", "1").fusedAttention, std::string("on"));
  TSR_COMPARE(read("TESSERA_FUSED_ATTENTION", "false").fusedAttention, std::string("off"));
  TSR_COMPARE(read("TESSERA_FUSED_ATTENTION", "sometimes").fusedAttention, std::string("auto"));
  TSR_COMPARE(read("TESSERA_FUSED_BATCH_NORM", "yes").fusedBatchNorm, std::string("on"));
  REQUIRE(read("TESSERA_VERIFY_PASSES", "no").verifyPasses == VerifyPasses::Off);
  REQUIRE(read("TESSERA_CPU_CODEGEN", "false").cpuCodegen == CpuCodegen::Off);
}

// The GPU's switches that default to on: only "off" (or "0") turns them off.
TEST_CASE("cudaSwitchesDefaultOn") {
  ScopedEnv env;
  env.set("TESSERA_CUDA_GRAPHS", std::nullopt);
  env.set("TESSERA_CUDA_LOOP_GROUPS", std::nullopt);
  reloadEnvOptions();
  REQUIRE((envOptions().cudaGraphs && envOptions().cudaLoopGroups));
  env.set("TESSERA_CUDA_GRAPHS", "off");
  env.set("TESSERA_CUDA_LOOP_GROUPS", "0");
  reloadEnvOptions();
  REQUIRE((!envOptions().cudaGraphs && !envOptions().cudaLoopGroups));
  env.set("TESSERA_CUDA_GRAPHS", "on");
  env.set("TESSERA_CUDA_LOOP_GROUPS", "on");
  reloadEnvOptions();
  REQUIRE((envOptions().cudaGraphs && envOptions().cudaLoopGroups));
}

// Which GPU a rank takes: TESSERA_CUDA_DEVICE as written (the CUDA backend checks it), the launcher's local rank
// and local rank count (Open MPI's before MPICH's before Slurm's), and TESSERA_NCCL.
TEST_CASE("gpuSettingsParse") {
  ScopedEnv env;
  for (const char* name : {"TESSERA_CUDA_DEVICE", "TESSERA_NCCL", "OMPI_COMM_WORLD_LOCAL_RANK",
                           "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_LOCALID"})
    env.set(name, std::nullopt);
  reloadEnvOptions();
  {
    const EnvOptions& o = envOptions();
    REQUIRE((!o.cudaDevice && o.nccl));
    TSR_COMPARE(o.localRank, -1);
    TSR_COMPARE(o.localRanks, 0);
  }
  env.set("TESSERA_CUDA_DEVICE", "3x");
  env.set("TESSERA_NCCL", "off");
  env.set("SLURM_LOCALID", "5");
  env.set("MPI_LOCALRANKID", "2");
  env.set("MPI_LOCALNRANKS", "4");
  reloadEnvOptions();
  {
    const EnvOptions& o = envOptions();
    TSR_COMPARE(*o.cudaDevice, std::string("3x"));
    REQUIRE(!o.nccl);
    TSR_COMPARE(o.localRank, 2);
    TSR_COMPARE(o.localRanks, 4);
  }
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "8");
  env.set("TESSERA_NCCL", "on");
  reloadEnvOptions();
  TSR_COMPARE(envOptions().localRank, 1);
  TSR_COMPARE(envOptions().localRanks, 8);
  REQUIRE(envOptions().nccl);
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "one");  // not a number: the next launcher's
  reloadEnvOptions();
  TSR_COMPARE(envOptions().localRank, 2);
}

TEST_CASE("locationsAreReadEachTime") {
  ScopedEnv env;
  env.set("TESSERA_PLUGIN_PATH", "/a:/b::/c:");
  env.set("XDG_CONFIG_HOME", "/config");
  env.set("TESSERA_KERNEL_CACHE", "off");
  EnvLocations l = envLocations();
  TSR_COMPARE(l.pluginPath, (std::vector<std::string>{"/a", "/b", "/c"}));
  TSR_COMPARE(l.configHome, std::string("/config"));
  TSR_COMPARE(l.kernelCache, std::string("off"));
  env.set("TESSERA_PLUGIN_PATH", std::nullopt);
  env.set("TESSERA_KERNEL_CACHE", "/cache");
  l = envLocations();
  REQUIRE(l.pluginPath.empty());
  TSR_COMPARE(l.kernelCache, std::string("/cache"));
}
