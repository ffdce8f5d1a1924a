#include "engine/data/bpe_trainer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <queue>
#include <unordered_set>

#include "engine/data/file_io.h"

namespace tsr::data {

namespace {

uint64_t pairKey(TokenId a, TokenId b) { return (static_cast<uint64_t>(a) << 32) | b; }
TokenId leftOf(uint64_t p) { return static_cast<TokenId>(p >> 32); }
TokenId rightOf(uint64_t p) { return static_cast<TokenId>(p & 0xffffffffu); }

// The state of one training run: pieces as symbol sequences, pair counts, and which pieces hold each pair.
class MergeLearner {
 public:
  template <class Counts>
  explicit MergeLearner(const Counts& pieceCounts) {
    for (uint8_t b : gpt2ByteOrder()) {
      m_byteId[b] = static_cast<TokenId>(m_tokens.size());
      m_idOf.emplace(std::string(1, static_cast<char>(b)), static_cast<TokenId>(m_tokens.size()));
      m_tokens.emplace_back(1, static_cast<char>(b));
    }
    // Sorted pieces make every container's contents independent of hash-map iteration order.
    std::vector<std::pair<std::string_view, int64_t>> sorted(pieceCounts.begin(), pieceCounts.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [piece, count] : sorted) {
      if (piece.size() < 2) continue;  // no pairs
      std::vector<TokenId> syms(piece.size());
      for (size_t i = 0; i < piece.size(); ++i) syms[i] = m_byteId[static_cast<uint8_t>(piece[i])];
      auto w = static_cast<uint32_t>(m_words.size());
      for (size_t i = 0; i + 1 < syms.size(); ++i) add(pairKey(syms[i], syms[i + 1]), count, w);
      m_words.push_back(std::move(syms));
      m_counts.push_back(count);
    }
    for (const auto& [p, c] : m_pairCounts) m_heap.push(HeapEntry{c, p});
    m_increased.clear();
  }

  // Learns merges until the vocabulary (plus `reserved` special tokens) reaches vocabSize.
  std::vector<BpeTokenizer::Merge> run(int64_t vocabSize, int64_t reserved, int64_t minPairCount) {
    std::vector<BpeTokenizer::Merge> merges;
    while (static_cast<int64_t>(m_tokens.size()) + reserved < vocabSize) {
      auto best = popBest();
      if (!best || best->count < minPairCount) break;
      TokenId a = leftOf(best->pair), b = rightOf(best->pair);
      std::string merged = m_tokens[a] + m_tokens[b];
      auto [it, isNew] = m_idOf.try_emplace(merged, static_cast<TokenId>(m_tokens.size()));
      if (isNew) m_tokens.push_back(std::move(merged));
      // A pair merged earlier can form again once a later merge creates one of its halves next to the other.
      // Encoding merges it at once (its rank is lower), so training merges it again without a second rank.
      if (m_merged.insert(best->pair).second) merges.emplace_back(a, b);
      applyMerge(best->pair, it->second);
    }
    return merges;
  }

 private:
  struct HeapEntry {
    int64_t count;
    uint64_t pair;
  };
  // Lower priority: fewer occurrences, then (left bytes, right bytes) sorting later.
  struct Less {
    const std::vector<std::string>* tokens;
    bool operator()(const HeapEntry& x, const HeapEntry& y) const {
      if (x.count != y.count) return x.count < y.count;
      const std::string& xl = (*tokens)[leftOf(x.pair)];
      const std::string& yl = (*tokens)[leftOf(y.pair)];
      if (xl != yl) return xl > yl;
      return (*tokens)[rightOf(x.pair)] > (*tokens)[rightOf(y.pair)];
    }
  };

  void add(uint64_t p, int64_t c, uint32_t w) {
    m_pairCounts[p] += c;
    auto& list = m_pairWords[p];
    if (list.empty() || list.back() != w) list.push_back(w);
    m_increased.push_back(p);
  }
  void remove(uint64_t p, int64_t c) { m_pairCounts[p] -= c; }

  // Heap entries are refreshed lazily: counts only fall except for pairs just formed, which are pushed anew.
  std::optional<HeapEntry> popBest() {
    while (!m_heap.empty()) {
      HeapEntry top = m_heap.top();
      m_heap.pop();
      auto it = m_pairCounts.find(top.pair);
      int64_t actual = it == m_pairCounts.end() ? 0 : it->second;
      if (actual == top.count) return top;
      if (actual > 0) m_heap.push(HeapEntry{actual, top.pair});
    }
    return std::nullopt;
  }

  // Replaces every occurrence of pair (a, b) by `merged` in the pieces that hold it, left to right, and updates
  // the counts of the pairs around each occurrence.
  void applyMerge(uint64_t pair, TokenId merged) {
    const TokenId a = leftOf(pair), b = rightOf(pair);
    std::vector<uint32_t> words = std::move(m_pairWords[pair]);
    m_pairWords.erase(pair);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    m_increased.clear();
    for (uint32_t w : words) {
      std::vector<TokenId>& s = m_words[w];
      const int64_t c = m_counts[w];
      size_t j = 0;
      for (size_t i = 0; i < s.size();) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          if (j > 0) {
            remove(pairKey(s[j - 1], a), c);
            add(pairKey(s[j - 1], merged), c, w);
          }
          if (i + 2 < s.size()) {
            remove(pairKey(b, s[i + 2]), c);
            add(pairKey(merged, s[i + 2]), c, w);
          }
          remove(pair, c);
          s[j++] = merged;
          i += 2;
        } else {
          s[j++] = s[i++];
        }
      }
      s.resize(j);
    }
    m_pairCounts.erase(pair);
    std::sort(m_increased.begin(), m_increased.end());
    m_increased.erase(std::unique(m_increased.begin(), m_increased.end()), m_increased.end());
    for (uint64_t p : m_increased)
      if (int64_t c = m_pairCounts[p]; c > 0) m_heap.push(HeapEntry{c, p});
  }

  std::vector<std::string> m_tokens;
  std::unordered_map<std::string, TokenId> m_idOf;
  std::array<TokenId, 256> m_byteId{};
  std::vector<std::vector<TokenId>> m_words;
  std::vector<int64_t> m_counts;
  std::unordered_map<uint64_t, int64_t> m_pairCounts;
  std::unordered_map<uint64_t, std::vector<uint32_t>> m_pairWords;
  std::vector<uint64_t> m_increased;
  std::unordered_set<uint64_t> m_merged;
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, Less> m_heap{Less{&m_tokens}};
};

}  // namespace

Result<BpeTrainer> BpeTrainer::create(BpeTrainOptions options) {
  for (const std::string& s : options.specialTokens)
    if (!isSpecialTokenText(s)) return makeError("BPE training: special token '{}' is not of the form <|name|>", s);
  int64_t minimum = 256 + static_cast<int64_t>(options.specialTokens.size());
  if (options.vocabSize < minimum)
    return makeError("BPE training: a vocabulary of {} is too small; the 256 byte tokens and {} special tokens "
                     "need {}",
                     options.vocabSize, options.specialTokens.size(), minimum);
  if (options.minPairCount < 1) return makeError("BPE training: minPairCount must be at least 1");
  BpeTrainer t;
  TSR_ASSIGN(t.m_pretokenizer, Pretokenizer::create(kGpt2Pattern));
  for (const std::string& s : options.specialTokens) t.m_specials.emplace_back(s, 0);
  t.m_options = std::move(options);
  return t;
}

void BpeTrainer::addText(std::string_view text) {
  auto count = [&](std::string_view part) {
    m_pretokenizer.forEach(part, [&](std::string_view piece) {
      auto it = m_pieceCounts.find(piece);
      if (it != m_pieceCounts.end()) ++it->second;
      else m_pieceCounts.emplace(std::string(piece), 1);
    });
  };
  if (m_specials.empty()) count(text);
  else splitOnSpecialTokens(text, m_specials, count, [](TokenId) {});
}

Status BpeTrainer::addFile(const std::string& path) {
  TSR_ASSIGN(MappedFile f, MappedFile::open(path));
  addText(f.bytes());
  return {};
}

Result<BpeTokenizer> BpeTrainer::train() const {
  MergeLearner learner(m_pieceCounts);
  std::vector<BpeTokenizer::Merge> merges =
      learner.run(m_options.vocabSize, static_cast<int64_t>(m_options.specialTokens.size()), m_options.minPairCount);
  return BpeTokenizer::fromMerges(merges, m_options.specialTokens);
}

Result<BpeTokenizer> trainBpe(std::string_view corpus, const BpeTrainOptions& options) {
  TSR_ASSIGN(BpeTrainer trainer, BpeTrainer::create(options));
  trainer.addText(corpus);
  return trainer.train();
}

}  // namespace tsr::data
