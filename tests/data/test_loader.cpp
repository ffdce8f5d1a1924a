// Token files (format bytes checked by hand, llm.c's format, atomic writes, errors), tokenizeFile, the (B, T)
// batch loader (slices of the stream, shifted targets, shuffling, resume, prefetch shutdown, data parallel
// split) and the synthetic image dataset.
#include "tests/check.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "engine/data/batch_loader.h"
#include "engine/data/bpe.h"
#include "engine/data/file_io.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/token_file.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::data;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<int32_t> ints(const Array& a) {
  const auto* p = static_cast<const int32_t*>(a.buffer()->data());
  return {p, p + a.numel()};
}

std::vector<float> floats(const Array& a) {
  const auto* p = static_cast<const float*>(a.buffer()->data());
  return {p, p + a.numel()};
}

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

// Tokens whose value is their position (mod 65000), so a batch shows where it came from.
std::vector<uint32_t> positions(int64_t n) {
  std::vector<uint32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint32_t>(i % 65000);
  return t;
}

struct TempTokens {
  test::TempDir dir;
  std::string path;
  std::vector<uint32_t> tokens;
  explicit TempTokens(int64_t n, std::vector<uint32_t> t = {}) : path(dir.path() + "/tokens.bin") {
    tokens = t.empty() ? positions(n) : std::move(t);
    if (!writeTokenFile(path, tokens, 65536).ok()) TSR_FATAL("cannot write " << path);
  }
};

BatchLoader openLoader(const std::string& path, LoaderOptions o) {
  auto l = BatchLoader::open(path, o);
  if (!l.ok()) TSR_FATAL(l.error().message);
  return std::move(l).value();
}

std::pair<std::vector<int32_t>, std::vector<int32_t>> take(BatchLoader& l) {
  auto b = l.next();
  if (!b.ok()) TSR_FATAL(b.error().message);
  return {ints(b->inputs), ints(b->targets)};
}

}  // namespace

TEST_CASE("tokenFileHeaderIsAsDocumented") {
  test::TempDir dir;
  std::string path = dir.path() + "/t.bin";
  std::vector<uint32_t> tokens = {1, 2, 50256, 7};
  REQUIRE(writeTokenFile(path, tokens, 50257).ok());
  std::string raw = *readFile(path);
  TSR_COMPARE(raw.size(), size_t(64 + 4 * 2));
  TSR_COMPARE(raw.substr(0, 8), std::string("TSRTOKEN"));
  uint32_t version, bytes, vocab;
  uint64_t count;
  std::memcpy(&version, raw.data() + 8, 4);
  std::memcpy(&bytes, raw.data() + 12, 4);
  std::memcpy(&count, raw.data() + 16, 8);
  std::memcpy(&vocab, raw.data() + 24, 4);
  TSR_COMPARE(version, 1u);
  TSR_COMPARE(bytes, 2u);
  TSR_COMPARE(count, uint64_t(4));
  TSR_COMPARE(vocab, 50257u);
  REQUIRE(std::all_of(raw.begin() + 28, raw.begin() + 64, [](char c) { return c == 0; }));
  TSR_COMPARE(uint8_t(raw[64 + 4]), uint8_t(50256 & 0xFF));  // little-endian u16
  TSR_COMPARE(uint8_t(raw[64 + 5]), uint8_t(50256 >> 8));

  auto f = TokenFile::open(path);
  REQUIRE(f.ok());
  TSR_COMPARE(f->size(), int64_t(4));
  TSR_COMPARE(f->vocabSize(), 50257u);
  TSR_COMPARE(f->read(0, 4), tokens);
  TSR_COMPARE((*f)[2], 50256u);
}

TEST_CASE("tokenFileHoldsU32Tokens") {
  test::TempDir dir;
  std::string path = dir.path() + "/t.bin";
  std::vector<uint32_t> tokens = {0, 65536, 100000, 199999};
  REQUIRE(writeTokenFile(path, tokens, 200000).ok());  // too big for u16: u32 picked
  auto f = TokenFile::open(path);
  REQUIRE(f.ok());
  TSR_COMPARE(f->tokenBytes(), 4);
  TSR_COMPARE(f->read(0, 4), tokens);
  REQUIRE(!writeTokenFile(path, tokens, 200000, 2).ok());  // u16 asked for a vocabulary that does not fit
}

TEST_CASE("tokenFileReadsLlmcFormat") {
  test::TempDir dir;
  std::string path = dir.path() + "/llmc.bin";
  std::string raw;
  put<int32_t>(raw, 20240520);
  put<int32_t>(raw, 1);  // u16
  put<int32_t>(raw, 3);
  raw.resize(1024, '\0');
  for (uint16_t t : {uint16_t(5), uint16_t(50256), uint16_t(9)}) put(raw, t);
  test::writeFile(path, raw);
  auto f = TokenFile::open(path);
  REQUIRE_MESSAGE(f.ok(), f.error().message);
  TSR_COMPARE(f->read(0, 3), (std::vector<uint32_t>{5, 50256, 9}));
}

TEST_CASE("tokenFileWriterIsAtomic") {
  test::TempDir dir;
  std::string path = dir.path() + "/t.bin";
  {
    auto w = TokenFileWriter::create(path, 100);
    REQUIRE(w.ok());
    REQUIRE(w->append(std::vector<uint32_t>{1, 2, 3}).ok());
    auto bad = w->append(std::vector<uint32_t>{4, 100});
    REQUIRE(!bad.ok());
    REQUIRE(contains(bad.error().message, "token 100"));
    REQUIRE(contains(bad.error().message, "number 4"));
    // Dropped unfinished: nothing under the name, no temporary left.
  }
  TSR_COMPARE(test::countFiles(dir.path(), true), 0);
  // An existing file is replaced only once the new one is complete.
  REQUIRE(writeTokenFile(path, std::vector<uint32_t>{7, 8}, 100).ok());
  {
    auto w = TokenFileWriter::create(path, 100);
    REQUIRE(w->append(std::vector<uint32_t>{1, 2, 3}).ok());
    TSR_COMPARE(TokenFile::open(path)->size(), int64_t(2));
    REQUIRE(w->finish().ok());
  }
  TSR_COMPARE(TokenFile::open(path)->read(0, 3), (std::vector<uint32_t>{1, 2, 3}));
  TSR_COMPARE(test::countFiles(dir.path(), true), 1);
}

TEST_CASE("tokenFileErrorsNameTheFile") {
  test::TempDir dir;
  std::string d = dir.path();
  auto missing = TokenFile::open(d + "/missing.bin");
  REQUIRE(!missing.ok());
  REQUIRE(contains(missing.error().message, d + "/missing.bin"));

  test::writeFile(d + "/text.bin", std::string(100, 'x'));
  auto text = TokenFile::open(d + "/text.bin");
  REQUIRE(!text.ok());
  REQUIRE(contains(text.error().message, "not a token file"));

  REQUIRE(writeTokenFile(d + "/t.bin", positions(100), 65536).ok());
  std::string raw = *readFile(d + "/t.bin");
  test::writeFile(d + "/truncated.bin", raw.substr(0, raw.size() - 3));
  auto truncated = TokenFile::open(d + "/truncated.bin");
  REQUIRE(!truncated.ok());
  REQUIRE(contains(truncated.error().message, "truncated.bin"));
  REQUIRE(contains(truncated.error().message, "100 tokens"));

  std::string v2 = raw;
  v2[8] = 2;
  test::writeFile(d + "/v2.bin", v2);
  auto version = TokenFile::open(d + "/v2.bin");
  REQUIRE(!version.ok());
  REQUIRE(contains(version.error().message, "version 2"));

  std::string b3 = raw;
  b3[12] = 3;
  test::writeFile(d + "/b3.bin", b3);
  REQUIRE(contains(TokenFile::open(d + "/b3.bin").error().message, "3 bytes per token"));

  auto dirAsFile = TokenFile::open(d);
  REQUIRE(!dirAsFile.ok());
}

TEST_CASE("tokenizeFileEqualsEncode") {
  // A byte-level tokenizer without merges: one token per byte, so a 1.5 MB text streams in several blocks.
  auto t = BpeTokenizer::fromMerges({}, std::vector<std::string>{"<|endoftext|>"});
  REQUIRE(t.ok());
  test::TempDir dir;
  std::string d = dir.path();
  std::string text;
  std::mt19937 rng(4);
  while (text.size() < 1500000) {
    text += "doc " + std::to_string(rng()) + " café\n";
    if (rng() % 50 == 0) text += "<|endoftext|>";
  }
  test::writeFile(d + "/in.txt", text);
  auto n = tokenizeFile(d + "/in.txt", *t, d + "/out.bin", {.appendEndOfText = true});
  REQUIRE_MESSAGE(n.ok(), n.error().message);
  auto want = t->encode(text, SpecialTokens::Allowed);
  want.push_back(*t->specialTokenId("<|endoftext|>"));
  TSR_COMPARE(*n, int64_t(want.size()));
  auto f = TokenFile::open(d + "/out.bin");
  REQUIRE(f.ok());
  TSR_COMPARE(f->vocabSize(), uint32_t(t->vocabSize()));
  REQUIRE(f->read(0, f->size()) == want);

  auto missing = tokenizeFile(d + "/nope.txt", *t, d + "/out2.bin");
  REQUIRE(!missing.ok());
  REQUIRE(contains(missing.error().message, "nope.txt"));
  REQUIRE(!std::filesystem::exists(d + "/out2.bin"));
}

TEST_CASE("sequentialBatchesAreSlicesOfTheStream") {
  const int64_t B = 3, T = 5;
  TempTokens tt(3 * 4 * T + 7);  // 67 tokens: 13 windows of 5+1, 4 batches, 1 window left over
  for (int prefetch : {0, 2}) {
    BatchLoader l = openLoader(tt.path, {.batchSize = B, .seqLen = T, .prefetch = prefetch});
    TSR_COMPARE(l.windowsPerEpoch(), int64_t(13));
    TSR_COMPARE(l.batchesPerEpoch(), int64_t(4));
    for (int64_t step = 0; step < 10; ++step) {  // two and a half epochs
      int64_t j = step % 4;
      auto b = l.next();
      REQUIRE(b.ok());
      TSR_COMPARE(b->inputs.shape(), (Shape{B, T}));
      TSR_COMPARE(b->inputs.dtype(), DType::I32);
      TSR_COMPARE(b->targets.shape(), (Shape{B, T}));
      TSR_COMPARE(b->epoch, step / 4);
      TSR_COMPARE(b->batch, j);
      auto in = ints(b->inputs), tg = ints(b->targets);
      for (int64_t r = 0; r < B; ++r)
        for (int64_t c = 0; c < T; ++c) {
          int64_t pos = (j * B + r) * T + c;
          TSR_COMPARE(in[size_t(r * T + c)], int32_t(tt.tokens[size_t(pos)]));
          TSR_COMPARE(tg[size_t(r * T + c)], int32_t(tt.tokens[size_t(pos + 1)]));
        }
    }
  }
}

TEST_CASE("permutationIsABijection") {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 4097ull}) {
    Permutation p(n, 42);
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(p(i));
    TSR_COMPARE(seen.size(), size_t(n));
    TSR_COMPARE(*seen.rbegin(), n - 1);
  }
  // Not the identity, and keyed.
  Permutation a(1000, 1), b(1000, 2);
  int fixed = 0, same = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    fixed += a(i) == i;
    same += a(i) == b(i);
  }
  REQUIRE(fixed < 20);
  REQUIRE(same < 20);
}

TEST_CASE("shuffleIsDeterministicBySeed") {
  const int64_t B = 4, T = 8;
  TempTokens tt(40 * T + 1);  // 40 windows, 10 batches per epoch
  bool shapesOk = true;
  auto epochs = [&](uint64_t seed, int prefetch) -> std::vector<std::vector<int32_t>> {
    BatchLoader l = openLoader(tt.path, {.batchSize = B, .seqLen = T, .shuffle = true, .seed = seed, .prefetch = prefetch});
    std::vector<std::vector<int32_t>> firstTokens(3);
    for (int e = 0; e < 3; ++e)
      for (int j = 0; j < 10; ++j) {
        auto [in, tg] = take(l);
        for (int64_t r = 0; r < B; ++r) {
          shapesOk &= in[size_t(r * T)] % T == 0;  // windows start at multiples of T
          for (int64_t c = 0; c + 1 < T; ++c) shapesOk &= tg[size_t(r * T + c)] == in[size_t(r * T + c + 1)];
          shapesOk &= tg[size_t(r * T + T - 1)] == in[size_t(r * T + T - 1)] + 1;
          firstTokens[size_t(e)].push_back(in[size_t(r * T)]);
        }
      }
    return firstTokens;
  };
  auto a = epochs(7, 3), again = epochs(7, 0), other = epochs(8, 2);
  REQUIRE(shapesOk);  // targets are inputs shifted by one
  TSR_COMPARE(a, again);  // same seed, same order, with or without prefetch
  REQUIRE(a != other);
  REQUIRE(a[0] != a[1]);  // each epoch has its own order
  for (const auto& e : a) {  // every window exactly once per epoch
    std::set<int32_t> windows(e.begin(), e.end());
    TSR_COMPARE(windows.size(), size_t(40));
  }
}

TEST_CASE("resumeContinuesWithTheSameBatches") {
  const int64_t B = 2, T = 4;
  TempTokens tt(13 * T + 1);  // 13 windows: 6 batches per epoch
  for (bool shuffle : {false, true}) {
    LoaderOptions o{.batchSize = B, .seqLen = T, .shuffle = shuffle, .seed = 99, .prefetch = 3};
    BatchLoader a = openLoader(tt.path, o);
    for (int i = 0; i < 4; ++i) take(a);
    std::string saved = a.state().toJson();
    std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> after;
    for (int i = 0; i < 9; ++i) after.push_back(take(a));  // across the epoch boundary

    LoaderOptions fresh = o;
    fresh.seed = 12345;  // the state's seed wins
    BatchLoader b = openLoader(tt.path, fresh);
    take(b);  // a worker is running and has batches queued
    auto state = LoaderState::fromJson(saved);
    REQUIRE(state.ok());
    TSR_COMPARE(state->epoch, int64_t(0));
    TSR_COMPARE(state->batch, int64_t(4));
    REQUIRE(b.restore(*state).ok());
    TSR_COMPARE(b.state(), *state);
    for (int i = 0; i < 9; ++i) TSR_COMPARE(take(b), after[size_t(i)]);
    TSR_COMPARE(b.state(), a.state());
  }
}

TEST_CASE("prefetchWorkerStopsCleanly") {
  TempTokens tt(10000);
  for (int round = 0; round < 20; ++round) {
    BatchLoader l = openLoader(tt.path, {.batchSize = 4, .seqLen = 16, .shuffle = true, .prefetch = 2});
    if (round % 3 == 0) continue;  // never started
    for (int i = 0; i < round; ++i) take(l);
    if (round % 2) REQUIRE(l.restore(l.state()).ok());
    // Let the worker fill the queue and block on it; destruction must still join.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Moved-from and moved-to loaders stop their workers too.
  BatchLoader a = openLoader(tt.path, {.batchSize = 4, .seqLen = 16, .prefetch = 4});
  take(a);
  BatchLoader b = std::move(a);
  auto [in, tg] = take(b);
  TSR_COMPARE(in[0], int32_t(64));
}

TEST_CASE("processesSplitTheGlobalBatches") {
  const int64_t B = 2, T = 4;
  TempTokens tt(20 * T + 1);  // 20 windows: 10 global batches, 5 per process
  for (bool shuffle : {false, true}) {
    BatchLoader all = openLoader(tt.path, {.batchSize = B, .seqLen = T, .shuffle = shuffle, .seed = 3, .prefetch = 0});
    std::vector<std::vector<int32_t>> global;
    for (int i = 0; i < 10; ++i) global.push_back(take(all).first);
    for (int64_t p = 0; p < 2; ++p) {
      BatchLoader mine = openLoader(tt.path, {.batchSize = B, .seqLen = T, .shuffle = shuffle, .seed = 3,
                                              .prefetch = 1, .processIndex = p, .processCount = 2});
      TSR_COMPARE(mine.batchesPerEpoch(), int64_t(5));
      for (int j = 0; j < 5; ++j) TSR_COMPARE(take(mine).first, global[size_t(2 * j + p)]);
    }
  }
}

TEST_CASE("loaderErrors") {
  TempTokens tt(100);
  auto missing = BatchLoader::open("/nonexistent/tokens.bin", {});
  REQUIRE(!missing.ok());
  REQUIRE(contains(missing.error().message, "/nonexistent/tokens.bin"));
  auto small = BatchLoader::open(tt.path, {.batchSize = 4, .seqLen = 32});
  REQUIRE(!small.ok());
  REQUIRE(contains(small.error().message, "100 tokens"));
  REQUIRE(contains(small.error().message, "129 tokens"));
  REQUIRE(!BatchLoader::open(tt.path, {.batchSize = 0, .seqLen = 4}).ok());
  REQUIRE(!BatchLoader::open(tt.path, {.batchSize = 1, .seqLen = 4, .processIndex = 2, .processCount = 2}).ok());
  REQUIRE(!BatchLoader::open(tt.path, {.batchSize = 1, .seqLen = 4, .prefetch = -1}).ok());

  BatchLoader l = openLoader(tt.path, {.batchSize = 2, .seqLen = 4});
  LoaderState other = l.state();
  other.seqLen = 8;
  auto r = l.restore(other);
  REQUIRE(!r.ok());
  REQUIRE(contains(r.error().message, "T=8"));
  LoaderState far = l.state();
  far.batch = 1000;
  REQUIRE(!l.restore(far).ok());
  REQUIRE(!LoaderState::fromJson("{").ok());
  REQUIRE(contains(LoaderState::fromJson("{\"epoch\": 1}").error().message, "missing \"batch\""));
  REQUIRE(contains(LoaderState::fromJson(R"({"epoch": "x"})").error().message, "\"epoch\""));
}

TEST_CASE("syntheticImagesAreDeterministic") {
  SyntheticImageOptions o{.batchSize = 4, .height = 6, .width = 5, .channels = 3, .seed = 1, .prefetch = 0};
  auto a = SyntheticImages::create(o);
  REQUIRE(a.ok());
  auto b1 = a->batch(10), b2 = a->batch(10);
  REQUIRE((b1.ok() && b2.ok()));
  TSR_COMPARE(b1->images.shape(), (Shape{4, 6, 5, 3}));
  TSR_COMPARE(b1->images.dtype(), DType::F32);
  TSR_COMPARE(b1->labels.shape(), (Shape{4}));
  TSR_COMPARE(floats(b1->images), floats(b2->images));
  TSR_COMPARE(ints(b1->labels), (std::vector<int32_t>{10, 11, 12, 13}));  // index % 1000
  // A sample does not depend on the batch it is in.
  auto shifted = a->batch(12);
  auto f1 = floats(b1->images), f2 = floats(shifted->images);
  REQUIRE(std::equal(f1.begin() + 2 * 90, f1.end(), f2.begin()));
  // The same whichever number of threads makes it.
  SyntheticImageOptions threaded = o;
  threaded.threads = 3;
  TSR_COMPARE(floats(SyntheticImages::create(threaded)->batch(10)->images), f1);
  threaded.threads = 1;
  TSR_COMPARE(floats(SyntheticImages::create(threaded)->batch(10)->images), f1);
  // Another seed, other images.
  o.seed = 2;
  auto c = SyntheticImages::create(o);
  REQUIRE(floats(c->batch(10)->images) != f1);
  // NCHW holds the same values transposed.
  o.seed = 1;
  o.layout = ImageLayout::NCHW;
  auto nchw = SyntheticImages::create(o)->batch(10);
  TSR_COMPARE(nchw->images.shape(), (Shape{4, 3, 6, 5}));
  auto g = floats(nchw->images);
  for (int64_t bb = 0; bb < 4; ++bb)
    for (int64_t h = 0; h < 6; ++h)
      for (int64_t w = 0; w < 5; ++w)
        for (int64_t ch = 0; ch < 3; ++ch)
          TSR_COMPARE(g[size_t(((bb * 3 + ch) * 6 + h) * 5 + w)], f1[size_t(((bb * 6 + h) * 5 + w) * 3 + ch)]);
  // bf16 holds the f32 values rounded.
  o.layout = ImageLayout::NHWC;
  o.dtype = DType::BF16;
  auto half = SyntheticImages::create(o)->batch(10);
  TSR_COMPARE(half->images.dtype(), DType::BF16);
  auto hv = half->images.toFloats();
  for (size_t i = 0; i < hv.size(); ++i) TSR_COMPARE(hv[i], bf16BitsToFloat(floatToBf16Bits(f1[i])));
}

TEST_CASE("syntheticImagesLookStandardNormal") {
  SyntheticImageOptions o{.batchSize = 2, .seed = 5, .randomLabels = true, .prefetch = 0};  // 2 x 224 x 224 x 3
  auto s = SyntheticImages::create(o);
  auto b = s->batch(0);
  REQUIRE(b.ok());
  TSR_COMPARE(b->images.shape(), (Shape{2, 224, 224, 3}));
  auto v = floats(b->images);
  double mean = 0, sq = 0, fourth = 0;
  for (float x : v) {
    REQUIRE(std::isfinite(x));
    mean += x;
    sq += double(x) * x;
    fourth += double(x) * x * x * x;
  }
  mean /= double(v.size());
  double var = sq / double(v.size()) - mean * mean;
  double kurtosis = fourth / double(v.size()) / (var * var);
  REQUIRE_MESSAGE(std::abs(mean) < 0.01, std::to_string(mean).c_str());  // 300k samples: sd of the mean ~0.002
  REQUIRE_MESSAGE(std::abs(var - 1) < 0.02, std::to_string(var).c_str());
  REQUIRE_MESSAGE(std::abs(kurtosis - 3) < 0.1, std::to_string(kurtosis).c_str());
  std::set<int32_t> labels;
  for (int64_t i = 0; i < 5000; ++i) {
    int32_t l = s->label(i);
    REQUIRE((l >= 0 && l < 1000));
    labels.insert(l);
  }
  REQUIRE(labels.size() > 990);
}

TEST_CASE("syntheticImagesPrefetchInOrder") {
  SyntheticImageOptions o{.batchSize = 3, .height = 4, .width = 4, .channels = 3, .seed = 9, .size = 10, .prefetch = 2};
  auto s = SyntheticImages::create(o);
  REQUIRE(s.ok());
  std::vector<int64_t> firsts;
  for (int i = 0; i < 5; ++i) {
    auto b = s->next();
    REQUIRE(b.ok());
    firsts.push_back(b->first);
    TSR_COMPARE(floats(b->images), floats(s->batch(b->first)->images));
  }
  TSR_COMPARE(firsts, (std::vector<int64_t>{0, 3, 6, 9, 2}));  // wraps around at size 10
  s->seek(4);
  TSR_COMPARE(s->next()->first, int64_t(4));
  TSR_COMPARE(ints(s->batch(9)->labels), (std::vector<int32_t>{9, 0, 1}));
  REQUIRE(!SyntheticImages::create({.dtype = DType::I32}).ok());
  REQUIRE(!SyntheticImages::create({.batchSize = 0}).ok());
}
