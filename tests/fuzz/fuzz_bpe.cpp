// BPE tokenizer files: encoder.json and vocab.bpe (the input split at its first NUL byte) load or give an
// error naming the file and line; a tokenizer that loads encodes and decodes a text.
#include "engine/data/bpe.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all = tsr::fuzz::text(data, size);
  size_t nul = all.find('\0');
  std::string_view encoder = all.substr(0, nul), vocab = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  auto t = tsr::data::BpeTokenizer::parse(encoder, vocab);
  if (t.ok()) {
    auto ids = t->encode("Hello world, h\xc3\xa9llo 123!\n");
    (void)t->decode(ids);
  }
  return 0;
}
