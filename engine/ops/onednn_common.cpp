#include "engine/ops/onednn_common.h"

#include <sched.h>

#include <algorithm>

#include "engine/core/env_options.h"

extern "C" void omp_set_num_threads(int);  // libgomp, oneDNN's CPU runtime

namespace tsr::ops {

const dnnl::engine& oneDnnEngine() {
  static const dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);  // kept past exit
  return *engine;
}

int oneDnnThreads() {
  if (int n = envOptions().numThreads; n > 0) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

void useOneDnnThreads() { omp_set_num_threads(oneDnnThreads()); }

}  // namespace tsr::ops
