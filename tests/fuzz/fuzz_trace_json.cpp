// Trace JSON import (File › Open Trace…): any text reads to a timeline or to an error.
#include "engine/inspect/timeline.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = tsr::inspect::parseTraceTimeline(tsr::fuzz::text(data, size), "trace.json");
  (void)t.ok();
  return 0;
}
