// project.toml: any text parses to a project or to an error; never a crash, an abort or an exception.
#include "engine/project/project.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto p = tsr::project::parseProject(std::string(tsr::fuzz::text(data, size)), "project.toml", "/nonexistent/fuzz");
  (void)p.ok();
  return 0;
}
