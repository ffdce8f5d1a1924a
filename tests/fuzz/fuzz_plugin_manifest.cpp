// What the plugin loader reads before it loads anything: the trust list (trusted.toml) and the library image
// (ELF headers, segments, sections, dynamic symbols; library_check.h). The first byte chooses which.
#include "engine/plugin/library_check.h"
#include "engine/plugin/trust.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] == 'T') {
    auto list = tsr::plugin::TrustList::parse(tsr::fuzz::text(data + 1, size - 1), "trusted.toml");
    if (list.ok()) {
      // What it writes reads back as the same list.
      auto back = tsr::plugin::TrustList::parse(list->toToml(), "trusted.toml");
      if (!back.ok() || back->projects().size() != list->projects().size()) __builtin_trap();
      for (size_t i = 0; i < list->projects().size(); ++i)
        if (back->projects()[i].folder != list->projects()[i].folder ||
            back->projects()[i].plugins != list->projects()[i].plugins)
          __builtin_trap();
    }
  } else {
    (void)tsr::plugin::checkLibraryImage({data + 1, size - 1}, "tessera_plugin_v1");
  }
  return 0;
}
