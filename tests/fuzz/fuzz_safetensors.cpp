// safetensors: any file reads to tensors or to an error (the header length, the JSON header, dtypes, shapes,
// offsets); never a crash or an allocation the file's size does not justify.
#include "engine/train/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = tsr::fuzz::writeTemp(data, size, "model.safetensors");
  auto f = tsr::train::readSafetensors(path);
  if (f.ok())
    for (const auto& [name, a] : f->tensors) (void)a.aval().bytes();
  return 0;
}
