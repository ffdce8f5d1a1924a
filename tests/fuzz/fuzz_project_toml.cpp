// project.toml: any text parses to a project or to an error; never a crash, an abort or an exception.
#include <cstdlib>

#include "engine/project/project.h"
#include "tests/fuzz/fuzz_util.h"

// TSR_FUZZ_AVOID_PENDING=1: no input with a control character or a byte over 0x7f, the known crashes of
// tests/fuzz/pending/project_toml/ (toml++'s assertion and unreachable code), so that a search gets past them.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool avoidPending = std::getenv("TSR_FUZZ_AVOID_PENDING") != nullptr;
  if (avoidPending)
    for (size_t i = 0; i < size; ++i)
      if ((data[i] < 0x20 && data[i] != '\t' && data[i] != '\n' && data[i] != '\r') || data[i] >= 0x7f) return 0;
  auto p = tsr::project::parseProject(std::string(tsr::fuzz::text(data, size)), "project.toml", "/nonexistent/fuzz");
  (void)p.ok();
  return 0;
}
