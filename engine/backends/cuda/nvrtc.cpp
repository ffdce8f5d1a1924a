#include "engine/backends/cuda/nvrtc.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include "engine/backends/cuda/cuda_status.h"
#include "engine/core/hash.h"
#include "engine/runtime/kernel_cache.h"

namespace tsr::cuda {

namespace fs = std::filesystem;

namespace {

std::string numbered(const std::string& source) {
  std::string out;
  std::istringstream in(source);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) out += fmt::format("{:4} {}\n", n, line);
  return out;
}

bool readFile(const fs::path& p, std::vector<char>& out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return !out.empty();
}

void writeFileAtomically(const fs::path& p, const std::vector<char>& data) {
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  fs::path tmp = p;
  tmp += fmt::format(".tmp{}", static_cast<long>(getpid()));
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) return;
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) return;
  }
  fs::rename(tmp, p, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return fmt::format("NVRTC {}.{}", major, minor);
}

std::string kernelCacheDir() { return runtime::kernelCacheDir(); }

Result<CompiledModule> compileCuda(const std::string& source, const std::string& name, const NvrtcOptions& options) {
  // --fmad=false: a * b + c rounds twice, as the CPU kernels (built with -ffp-contract=off) do.
  std::vector<std::string> opts = {fmt::format("--gpu-architecture=sm_{}", options.sm), "--std=c++17",
                                   "-default-device", "--fmad=false"};
  if (options.lineInfo) opts.push_back("--generate-line-info");
  std::string keyText = nvrtcVersionString();
  for (const auto& o : opts) keyText += " " + o;
  const std::string key = fmt::format("{:016x}", fnv1a(source, fnv1a(keyText)));
  const std::string dir = kernelCacheDir();
  CompiledModule out;
  if (!dir.empty() && readFile(fs::path(dir) / (key + ".cubin"), out.cubin)) {
    out.fromCache = true;
    return out;
  }
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
      r != NVRTC_SUCCESS)
    return makeError("NVRTC: cannot create program {}: {}", name, nvrtcGetErrorString(r));
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(prog, &logSize);
  std::string log(logSize, '\0');
  if (logSize) nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  if (r != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&prog);
    return makeError("NVRTC: {} does not compile ({}):\n{}\n--- source ---\n{}", name, nvrtcGetErrorString(r), log,
                     numbered(source));
  }
  size_t n = 0;
  nvrtcGetCUBINSize(prog, &n);
  out.cubin.resize(n);
  nvrtcGetCUBIN(prog, out.cubin.data());
  nvrtcDestroyProgram(&prog);
  out.log = std::move(log);
  if (!dir.empty()) writeFileAtomically(fs::path(dir) / (key + ".cubin"), out.cubin);
  return out;
}

Result<std::shared_ptr<LoadedModule>> LoadedModule::load(const CompiledModule& m) {
  std::shared_ptr<LoadedModule> lm(new LoadedModule());
  cudaLibrary_t lib = nullptr;
  TSR_CUDA(cudaLibraryLoadData(&lib, m.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  lm->m_library = lib;
  return lm;
}

LoadedModule::~LoadedModule() {
  if (m_library) cudaLibraryUnload(static_cast<cudaLibrary_t>(m_library));
}

Result<const void*> LoadedModule::kernel(const std::string& name) const {
  cudaKernel_t k = nullptr;
  cudaError_t e = cudaLibraryGetKernel(&k, static_cast<cudaLibrary_t>(m_library), name.c_str());
  if (e != cudaSuccess) return makeError("CUDA: kernel {} not found in its module: {}", name, cudaGetErrorString(e));
  return static_cast<const void*>(k);
}

Status launchKernel(const void* kernel, int64_t gridX, int blockX, void** args, int sharedBytes, void* stream) {
  if (gridX <= 0) return {};
  if (gridX > 0x7fffffff) return makeError("CUDA: grid of {} blocks is too large", gridX);
  TSR_CUDA(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(gridX)), dim3(static_cast<unsigned>(blockX)), args,
                            static_cast<size_t>(sharedBytes), static_cast<cudaStream_t>(stream)));
  return {};
}

Status launchKernel2d(const void* kernel, int64_t gridX, int64_t gridY, int blockX, void** args, int sharedBytes,
                      void* stream) {
  if (gridX <= 0 || gridY <= 0) return {};
  if (gridX > 0x7fffffff || gridY > 65535) return makeError("CUDA: grid {} x {} is too large", gridX, gridY);
  TSR_CUDA(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(gridX), static_cast<unsigned>(gridY)),
                            dim3(static_cast<unsigned>(blockX)), args, static_cast<size_t>(sharedBytes),
                            static_cast<cudaStream_t>(stream)));
  return {};
}

}  // namespace tsr::cuda
