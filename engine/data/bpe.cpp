#include "engine/data/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "engine/core/check.h"

namespace tsr::data {

namespace {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using StringMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

constexpr TokenId kNoToken = std::numeric_limits<TokenId>::max();
constexpr uint32_t kNoRank = std::numeric_limits<uint32_t>::max();

uint64_t pairKey(TokenId a, TokenId b) { return (static_cast<uint64_t>(a) << 32) | b; }

// Open-addressing map (pair of ids) -> (rank, merged id): the lookup in BPE's inner loop.
class MergeMap {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    TokenId result = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  explicit MergeMap(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 1) cap *= 2;
    m_slots.resize(cap);
    m_mask = cap - 1;
  }
  // A pair that appears twice keeps its later rank, as Python's dict(zip(merges, range(...))) does.
  void insert(uint64_t key, uint32_t rank, TokenId result) {
    size_t i = slot(key);
    while (m_slots[i].key != kEmpty && m_slots[i].key != key) i = (i + 1) & m_mask;
    m_slots[i] = Entry{key, rank, result};
  }
  const Entry* find(uint64_t key) const {
    size_t i = slot(key);
    while (true) {
      const Entry& e = m_slots[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
      i = (i + 1) & m_mask;
    }
  }

 private:
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & m_mask; }
  std::vector<Entry> m_slots;
  size_t m_mask = 0;
};

// Pieces up to this many bytes are cached; longer ones rarely repeat.
constexpr size_t kMaxCachedPiece = 255;

// Piece bytes -> its tokens: an open-addressing table over two pools. It grows to kMaxCacheSlots; full at
// that size, it starts over (simpler than eviction, and the frequent pieces come back first).
class PieceCache {
 public:
  bool lookup(std::string_view piece, uint64_t hash, std::vector<TokenId>& out) const {
    if (m_slots.empty()) return false;
    const size_t mask = m_slots.size() - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
      const Slot& s = m_slots[i];
      if (s.hash == 0) return false;
      if (s.hash == hash && s.keyLen == piece.size() &&
          std::memcmp(m_keys.data() + s.keyOff, piece.data(), piece.size()) == 0) {
        out.insert(out.end(), m_ids.begin() + s.idOff, m_ids.begin() + s.idOff + s.nIds);
        return true;
      }
    }
  }
  void insert(std::string_view piece, uint64_t hash, std::span<const TokenId> ids) {
    if (ids.size() > 0xFFFF) return;
    if (m_slots.empty()) m_slots.resize(kMinCacheSlots);
    if (2 * (m_count + 1) > m_slots.size()) {
      if (m_slots.size() < kMaxCacheSlots) grow();
      else clear();
    }
    place(Slot{hash, static_cast<uint32_t>(m_keys.size()), static_cast<uint32_t>(m_ids.size()),
               static_cast<uint16_t>(piece.size()), static_cast<uint16_t>(ids.size())});
    m_keys.append(piece);
    m_ids.insert(m_ids.end(), ids.begin(), ids.end());
    ++m_count;
  }
  void clear() {
    m_slots.assign(m_slots.empty() ? 0 : kMinCacheSlots, Slot{});
    m_keys.clear();
    m_ids.clear();
    m_count = 0;
  }

 private:
  struct Slot {
    uint64_t hash = 0;  // 0 marks an empty slot; hashes are made odd
    uint32_t keyOff = 0, idOff = 0;
    uint16_t keyLen = 0, nIds = 0;
  };
  void place(const Slot& slot) {
    const size_t mask = m_slots.size() - 1;
    size_t i = slot.hash & mask;
    while (m_slots[i].hash != 0) i = (i + 1) & mask;
    m_slots[i] = slot;
  }
  void grow() {
    std::vector<Slot> old(m_slots.size() * 2);
    old.swap(m_slots);
    for (const Slot& s : old)
      if (s.hash != 0) place(s);
  }
  static constexpr size_t kMinCacheSlots = 1024;
  static constexpr size_t kMaxCacheSlots = size_t{1} << 18;  // 128k pieces per tokenizer and thread
  std::vector<Slot> m_slots;
  std::string m_keys;
  std::vector<TokenId> m_ids;
  size_t m_count = 0;
};

// Each thread keeps caches for the few tokenizers it used last, so encoding takes no lock and threads that
// encode in parallel never wait on each other. A tokenizer is known by a serial number: copies share it.
PieceCache& threadCache(uint64_t tokenizerSerial) {
  struct Entry {
    uint64_t serial = 0;
    uint64_t lastUse = 0;
    PieceCache cache;
  };
  thread_local std::array<Entry, 4> entries;
  thread_local uint64_t clock = 0;
  ++clock;
  Entry* victim = &entries[0];
  for (Entry& e : entries) {
    if (e.serial == tokenizerSerial) {
      e.lastUse = clock;
      return e.cache;
    }
    if (e.lastUse < victim->lastUse) victim = &e;
  }
  victim->serial = tokenizerSerial;
  victim->lastUse = clock;
  victim->cache.clear();
  return victim->cache;
}

std::atomic<uint64_t> g_nextSerial{1};

}  // namespace

struct BpeTokenizer::Tables {
  MergeMap merges{0};
  StringMap byBytes;
  uint64_t serial = 0;
};

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(const BpeTokenizer&) = default;
BpeTokenizer& BpeTokenizer::operator=(const BpeTokenizer&) = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

Status BpeTokenizer::build() {
  TSR_ASSIGN(m_pretokenizer, Pretokenizer::create(kGpt2Pattern));
  auto tables = std::make_shared<Tables>();
  tables->serial = g_nextSerial++;
  StringMap& byBytes = tables->byBytes;
  byBytes.reserve(m_tokens.size());
  for (size_t id = 0; id < m_tokens.size(); ++id)
    if (m_present[id]) byBytes.emplace(m_tokens[id], static_cast<TokenId>(id));
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    auto it = byBytes.find(std::string_view(&c, 1));
    TSR_CHECK(it != byBytes.end());
    m_byteToken[b] = it->second;
  }
  tables->merges = MergeMap(m_merges.size());
  for (size_t r = 0; r < m_merges.size(); ++r) {
    auto [a, b] = m_merges[r];
    auto it = byBytes.find(m_tokens[a] + m_tokens[b]);
    TSR_CHECK(it != byBytes.end());
    tables->merges.insert(pairKey(a, b), static_cast<uint32_t>(r), it->second);
  }
  m_tables = std::move(tables);
  return {};
}

Result<BpeTokenizer> BpeTokenizer::fromMerges(std::span<const Merge> merges, std::span<const std::string> specials) {
  BpeTokenizer t;
  StringMap byBytes;
  for (uint8_t b : gpt2ByteOrder()) {
    byBytes.emplace(std::string(1, static_cast<char>(b)), static_cast<TokenId>(t.m_tokens.size()));
    t.m_tokens.emplace_back(1, static_cast<char>(b));
  }
  for (size_t i = 0; i < merges.size(); ++i) {
    auto [a, b] = merges[i];
    if (a >= t.m_tokens.size() || b >= t.m_tokens.size())
      return makeError("merge {} ({}, {}) uses an id that no earlier token has", i, a, b);
    std::string merged = t.m_tokens[a] + t.m_tokens[b];
    if (byBytes.try_emplace(merged, static_cast<TokenId>(t.m_tokens.size())).second)
      t.m_tokens.push_back(std::move(merged));  // the same bytes reached by another merge keep their first id
  }
  t.m_merges.assign(merges.begin(), merges.end());
  for (const std::string& s : specials) {
    if (!isSpecialTokenText(s)) return makeError("special token '{}' is not of the form <|name|>", s);
    if (!byBytes.try_emplace(s, static_cast<TokenId>(t.m_tokens.size())).second)
      return makeError("special token '{}' is given twice", s);
    t.m_specials.emplace_back(s, static_cast<TokenId>(t.m_tokens.size()));
    t.m_tokens.push_back(s);
  }
  t.m_present.assign(t.m_tokens.size(), 1);
  TSR_TRY(t.build());
  return t;
}

int64_t BpeTokenizer::vocabSize() const { return static_cast<int64_t>(m_tokens.size()); }

std::optional<TokenId> BpeTokenizer::tokenId(std::string_view bytes) const {
  auto it = m_tables->byBytes.find(bytes);
  if (it == m_tables->byBytes.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string_view> BpeTokenizer::tokenBytes(TokenId id) const {
  if (id >= m_tokens.size() || !m_present[id]) return std::nullopt;
  return m_tokens[id];
}

std::optional<TokenId> BpeTokenizer::specialTokenId(std::string_view text) const {
  for (const auto& [s, id] : m_specials)
    if (s == text) return id;
  return std::nullopt;
}

// GPT-2's bpe(): repeatedly merge the adjacent pair of lowest rank, every occurrence left to right, until no
// pair has a rank. Done with a heap of candidate pairs over a linked list of symbols, so a long piece costs
// O(n log n) rather than O(n^2). To match GPT-2 exactly when a merge creates a pair of lower rank than the one
// being applied (possible with hand-made files), such pairs wait until every occurrence of the current pair
// is merged, as GPT-2's one pass per rank does.
void BpeTokenizer::bpe(std::string_view piece, std::vector<TokenId>& out) const {
  struct Sym {
    TokenId id;
    int32_t prev, next;
  };
  struct Cand {
    uint32_t rank;
    int32_t pos;  // the left symbol; positions grow left to right
    TokenId left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap, deferred;
  const auto n = static_cast<int32_t>(piece.size());
  syms.resize(static_cast<size_t>(n));
  heap.clear();
  deferred.clear();
  for (int32_t i = 0; i < n; ++i) syms[i] = Sym{m_byteToken[static_cast<uint8_t>(piece[i])], i - 1, i + 1};
  syms[n - 1].next = -1;

  const MergeMap& merges = m_tables->merges;
  auto candidate = [&](int32_t pos, TokenId left, TokenId right, uint32_t group) {
    const MergeMap::Entry* e = merges.find(pairKey(left, right));
    if (!e) return;
    Cand c{e->rank, pos, left, right};
    if (e->rank < group && group != kNoRank) {
      deferred.push_back(c);
    } else {
      heap.push_back(c);
      std::push_heap(heap.begin(), heap.end(), std::greater<>{});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) candidate(i, syms[i].id, syms[i + 1].id, kNoRank);

  uint32_t group = kNoRank;
  while (!heap.empty() || !deferred.empty()) {
    if (!deferred.empty() && (heap.empty() || heap.front().rank != group)) {
      for (const Cand& c : deferred) {
        heap.push_back(c);
        std::push_heap(heap.begin(), heap.end(), std::greater<>{});
      }
      deferred.clear();
      continue;
    }
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    Cand c = heap.back();
    heap.pop_back();
    group = c.rank;
    Sym& s = syms[c.pos];
    if (s.id != c.left || s.next < 0 || syms[s.next].id != c.right) continue;  // stale
    const int32_t right = s.next;
    s.id = merges.find(pairKey(c.left, c.right))->result;
    s.next = syms[right].next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    syms[right].id = kNoToken;
    if (s.prev >= 0) candidate(s.prev, syms[s.prev].id, s.id, group);
    if (s.next >= 0) candidate(c.pos, s.id, syms[s.next].id, group);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void BpeTokenizer::encodePiece(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out.push_back(m_byteToken[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kMaxCachedPiece) {
    bpe(piece, out);
    return;
  }
  PieceCache& cache = threadCache(m_tables->serial);
  const uint64_t hash = std::hash<std::string_view>{}(piece) | 1;
  if (cache.lookup(piece, hash, out)) return;
  size_t start = out.size();
  bpe(piece, out);
  cache.insert(piece, hash, std::span<const TokenId>(out).subspan(start));
}

void BpeTokenizer::encodeOrdinary(std::string_view text, std::vector<TokenId>& out,
                                  const std::function<void(std::vector<TokenId>&)>& flush,
                                  size_t flushEvery) const {
  m_pretokenizer.forEach(text, [&](std::string_view piece) {
    encodePiece(piece, out);
    if (flush && out.size() >= flushEvery) flush(out);
  });
}

void BpeTokenizer::encodeTo(std::string_view text, std::vector<TokenId>& out, SpecialTokens special,
                            const std::function<void(std::vector<TokenId>&)>& flush, size_t flushEvery) const {
  if (special == SpecialTokens::AsText || m_specials.empty()) {
    encodeOrdinary(text, out, flush, flushEvery);
  } else {
    splitOnSpecialTokens(
        text, m_specials, [&](std::string_view t) { encodeOrdinary(t, out, flush, flushEvery); },
        [&](TokenId id) { out.push_back(id); });
  }
  if (flush && !out.empty()) flush(out);
}

std::vector<TokenId> BpeTokenizer::encode(std::string_view text, SpecialTokens special) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 16);
  encodeTo(text, out, special);
  return out;
}

Result<std::string> BpeTokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenId id = ids[i];
    if (id >= m_tokens.size() || !m_present[id])
      return makeError("decode: token id {} at position {} is not in the vocabulary (ids 0..{})", id, i,
                       m_tokens.size() - 1);
    out += m_tokens[id];
  }
  return out;
}

void splitOnSpecialTokens(std::string_view text, const std::vector<std::pair<std::string, TokenId>>& specials,
                          const std::function<void(std::string_view)>& onText,
                          const std::function<void(TokenId)>& onSpecial) {
  // Every special token starts with "<|", so scanning for that finds all candidates in one pass.
  size_t pos = 0;
  size_t textStart = 0;
  while ((pos = text.find("<|", pos)) != std::string_view::npos) {
    const std::pair<std::string, TokenId>* best = nullptr;
    for (const auto& s : specials)
      if (text.substr(pos, s.first.size()) == s.first && (!best || s.first.size() > best->first.size())) best = &s;
    if (!best) {
      ++pos;
      continue;
    }
    if (pos > textStart) onText(text.substr(textStart, pos - textStart));
    onSpecial(best->second);
    pos += best->first.size();
    textStart = pos;
  }
  if (textStart < text.size()) onText(text.substr(textStart));
}

bool isSpecialTokenText(std::string_view text) {
  return text.size() > 4 && text.starts_with("<|") && text.ends_with("|>");
}

}  // namespace tsr::data
