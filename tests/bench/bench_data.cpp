// Data pipeline benchmark: BPE training (4k vocabulary), encoding, decoding, tokenizeFile, the batch loader and
// the synthetic image dataset. Prints JSON. The peer is GPT-2's own encoder.py (run with python3 and `regex`
// when present) on the same files: its speed, and whether its token ids equal ours exactly.
//   bench_data [corpus.txt]   (default: /usr/share/common-licenses and vim's help files, up to 4 MB)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "engine/data/batch_loader.h"
#include "engine/data/bpe_trainer.h"
#include "engine/data/file_io.h"
#include "engine/data/synthetic_images.h"
#include "engine/data/token_file.h"

using namespace tsr;
using namespace tsr::data;
namespace fs = std::filesystem;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string defaultCorpus(size_t limit) {
  std::string text;
  std::vector<fs::path> files;
  for (const char* dir : {"/usr/share/common-licenses", "/usr/share/vim"}) {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator(); ++it)
      if (it->is_regular_file() && (std::string(dir).ends_with("licenses") || it->path().extension() == ".txt"))
        files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (text.size() >= limit) break;
    if (auto r = readFile(f.string())) text += *r;
  }
  if (text.empty())  // nothing on this machine: a synthetic text
    for (int i = 0; text.size() < limit; ++i) text += fmt::format("Line {} of the text, it's {} words.\n", i, i % 97);
  return text.substr(0, std::min(limit, text.size()));
}

// GPT-2's src/encoder.py, condensed (same regex, same bpe loop).
constexpr const char* kEncoderPy = R"PY(
import json, regex, sys, time, struct
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
    cs = bs[:]; n = 0
    for b in range(256):
        if b not in bs: bs.append(b); cs.append(256+n); n += 1
    return dict(zip(bs, [chr(c) for c in cs]))
d, src, dst = sys.argv[1:4]
encoder = json.load(open(d + '/encoder.json'))
merges = [tuple(m.split()) for m in open(d + '/vocab.bpe', encoding='utf-8').read().split('\n')[1:-1]]
ranks = dict(zip(merges, range(len(merges)))); be = bytes_to_unicode(); cache = {}
pat = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
def bpe(token):
    if token in cache: return cache[token]
    word = tuple(token)
    while len(word) > 1:
        pairs = set(zip(word, word[1:]))
        bigram = min(pairs, key=lambda p: ranks.get(p, float('inf')))
        if bigram not in ranks: break
        first, second = bigram; new = []; i = 0
        while i < len(word):
            try: j = word.index(first, i); new.extend(word[i:j]); i = j
            except ValueError: new.extend(word[i:]); break
            if word[i] == first and i < len(word)-1 and word[i+1] == second: new.append(first+second); i += 2
            else: new.append(word[i]); i += 1
        word = tuple(new)
    cache[token] = word; return word
text = open(src, encoding='utf-8', errors='surrogateescape').read()
t0 = time.time(); ids = []
for t in regex.findall(pat, text):
    ids.extend(encoder[x] for x in bpe(''.join(be[b] for b in t.encode('utf-8', errors='surrogateescape'))))
dt = time.time() - t0
open(dst, 'wb').write(struct.pack('<%dI' % len(ids), *ids))
print(dt)
)PY";

}  // namespace

int main(int argc, char** argv) {
  std::string text = argc > 1 ? readFile(argv[1]).value() : defaultCorpus(4 << 20);
  const double mb = static_cast<double>(text.size()) / 1e6;
  fs::path dir = fs::temp_directory_path() / fmt::format("tessera_bench_data_{}", ::getpid());
  fs::create_directories(dir);
  std::string corpusPath = (dir / "corpus.txt").string();
  if (!writeFileAtomically(corpusPath, text).ok()) return 1;

  double t0 = now();
  auto trainer = BpeTrainer::create({.vocabSize = 4096});
  trainer->addText(text);
  double t1 = now();
  auto tok = trainer->train();
  double t2 = now();
  if (!tok.ok()) {
    std::cerr << tok.error().message << "\n";
    return 1;
  }
  if (!tok->saveDirectory((dir / "tok").string()).ok()) return 1;

  double e0 = now();
  auto ids = tok->encode(text);
  double e1 = now();
  ids = tok->encode(text);  // warm: pieces cached
  double e2 = now();
  auto back = tok->decode(ids);
  double e3 = now();
  auto n = tokenizeFile(corpusPath, *tok, (dir / "tokens.bin").string());
  double e4 = now();

  // The peer: GPT-2's encoder.py on the same files.
  std::string peer = "null";
  std::string script = (dir / "encoder.py").string();
  if (writeFileAtomically(script, kEncoderPy).ok()) {
    std::string cmd = fmt::format("python3 {} {} {} {} 2>/dev/null", script, (dir / "tok").string(), corpusPath,
                                  (dir / "py_ids.bin").string());
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      double seconds = 0;
      bool ran = std::fscanf(p, "%lf", &seconds) == 1;
      if (::pclose(p) == 0 && ran) {
        auto raw = readFile((dir / "py_ids.bin").string());
        std::vector<TokenId> theirs(raw->size() / 4);
        std::memcpy(theirs.data(), raw->data(), theirs.size() * 4);
        peer = fmt::format(R"J({{"name": "gpt-2 encoder.py (python3 + regex)", "encode_mb_per_s": {:.2f}, "ids_equal": {}}})J",
                           mb / seconds, theirs == ids ? "true" : "false");
      }
    }
  }

  // Batch loader: B=16, T=1024, shuffled, 4 batches prefetched.
  auto loader = BatchLoader::open((dir / "tokens.bin").string(),
                                  {.batchSize = 16, .seqLen = 1024, .shuffle = true, .seed = 1, .prefetch = 4});
  double loaderRate = 0;
  if (loader.ok()) {
    double l0 = now();
    int batches = 200;
    for (int i = 0; i < batches; ++i) (void)loader->next();
    loaderRate = batches / (now() - l0);
  }
  // Synthetic images: B=32 of 224x224x3 f32, as the ViT benchmark feeds them.
  auto images = SyntheticImages::create({.batchSize = 32, .prefetch = 2});
  double i0 = now();
  for (int i = 0; i < 4; ++i) (void)images->next();
  double imageRate = 4 * 32 / (now() - i0);

  fmt::print(R"({{
  "corpus_mb": {:.2f},
  "train_4k": {{"count_s": {:.3f}, "merge_s": {:.3f}, "total_s": {:.3f}, "distinct_pieces": {}, "vocab": {}}},
  "encode_mb_per_s": {{"cold": {:.1f}, "warm": {:.1f}}},
  "bytes_per_token": {:.2f},
  "decode_mb_per_s": {:.1f},
  "decode_exact": {},
  "tokenize_file_mb_per_s": {:.1f},
  "loader_batches_per_s_B16_T1024": {:.0f},
  "synthetic_images_per_s_224x224x3": {:.0f},
  "peer": {}
}}
)",
             mb, t1 - t0, t2 - t1, t2 - t0, trainer->numDistinctPieces(), tok->vocabSize(), mb / (e1 - e0),
             mb / (e2 - e1), static_cast<double>(text.size()) / static_cast<double>(ids.size()), mb / (e3 - e2),
             back.ok() && *back == text ? "true" : "false", n.ok() ? mb / (e4 - e3) : 0.0, loaderRate, imageRate, peer);
  fs::remove_all(dir);
  return 0;
}
