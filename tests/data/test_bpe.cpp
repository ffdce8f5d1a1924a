// Byte-level BPE: pre-tokenization against splits produced by Python's `regex` with GPT-2's pattern, encoding
// against hand-derived token sequences on a small hand-written vocabulary (checked with a transliteration of
// GPT-2's encoder.py) and against a naive GPT-2 bpe() loop on random vocabularies, training against hand counts,
// exact byte round trips, the file formats and their errors.
#include "tests/check.h"

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "engine/data/bpe.h"
#include "engine/data/bpe_trainer.h"
#include "engine/data/file_io.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::data;

namespace {

// GPT-2's bytes_to_unicode(), written out again here (the reference, not the code under test).
struct Gpt2Alphabet {
  std::vector<int> order;             // bytes in token-id order
  std::map<int, std::string> spell;   // byte -> UTF-8 of its code point
  Gpt2Alphabet() {
    std::vector<int> cs;
    for (int b = '!'; b <= '~'; ++b) order.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) order.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) order.push_back(b);
    cs = order;
    int n = 0;
    for (int b = 0; b < 256; ++b)
      if (std::find(order.begin(), order.end(), b) == order.end()) {
        order.push_back(b);
        cs.push_back(256 + n++);
      }
    for (size_t i = 0; i < order.size(); ++i) {
      int cp = cs[i];
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      spell[order[i]] = s;
    }
  }
  std::string spellBytes(std::string_view bytes) const {
    std::string s;
    for (char c : bytes) s += spell.at(static_cast<uint8_t>(c));
    return s;
  }
};

const Gpt2Alphabet& alphabet() {
  static const Gpt2Alphabet a;
  return a;
}

std::string jsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// A vocabulary written as GPT-2's files: the 256 byte tokens, one token per merge (spelled), then extra tokens.
struct HandVocab {
  std::vector<std::string> merges;  // "left right", spelled
  std::map<std::string, TokenId> ids;
  std::string encoderJson, vocabBpe;

  HandVocab(std::vector<std::string> m, std::vector<std::string> extra = {}) : merges(std::move(m)) {
    std::vector<std::string> tokens;
    for (int b : alphabet().order) tokens.push_back(alphabet().spell.at(b));
    for (const std::string& line : merges) {
      std::string joined = line;
      joined.erase(std::remove(joined.begin(), joined.end(), ' '), joined.end());
      if (std::find(tokens.begin(), tokens.end(), joined) == tokens.end()) tokens.push_back(joined);
    }
    for (const std::string& e : extra) tokens.push_back(e);
    encoderJson = "{";
    for (size_t i = 0; i < tokens.size(); ++i) {
      ids[tokens[i]] = static_cast<TokenId>(i);
      encoderJson += (i ? ", \"" : "\"") + jsonEscape(tokens[i]) + "\": " + std::to_string(i);
    }
    encoderJson += "}";
    vocabBpe = "#version: 0.2\n";
    for (const std::string& line : merges) vocabBpe += line + "\n";
  }
  std::vector<TokenId> idsOf(const std::vector<std::string>& spelled) const {
    std::vector<TokenId> out;
    for (const auto& s : spelled) out.push_back(ids.at(s));
    return out;
  }
};

// The vocabulary of the hand-derived cases (the expectations were also checked with GPT-2's encoder.py).
const HandVocab& smallVocab() {
  static const HandVocab v({"h e", "Ġ t", "Ġt he", "e r", "l o", "lo w", "Ġ low", "Ġlow er", "i n", "in g", "Ã ©",
                            "c a", "ca f", "Ġ Ġ", "1 2", "12 3", "' s", "æ Ĺ", "æĹ ¥"},
                           {"<|endoftext|>"});
  return v;
}

BpeTokenizer loadSmall() {
  auto t = BpeTokenizer::parse(smallVocab().encoderJson, smallVocab().vocabBpe);
  if (!t.ok()) TSR_FATAL(t.error().message);
  return std::move(t).value();
}

// GPT-2's bpe() transliterated: merge the lowest-ranked pair, every occurrence left to right, until none ranks.
std::vector<std::string> referenceBpe(std::vector<std::string> word,
                                      const std::map<std::pair<std::string, std::string>, int>& ranks) {
  while (word.size() > 1) {
    int best = -1;
    std::pair<std::string, std::string> bigram;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = ranks.find({word[i], word[i + 1]});
      if (it != ranks.end() && (best < 0 || it->second < best)) {
        best = it->second;
        bigram = it->first;
      }
    }
    if (best < 0) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == bigram.first && word[i + 1] == bigram.second) {
        next.push_back(word[i] + word[i + 1]);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word = std::move(next);
  }
  return word;
}

std::string randomBytes(std::mt19937& rng, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::vector<std::string> toStrings(const std::vector<std::string_view>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("pretokenizerSplitsLikeGpt2") {
  // Expected splits printed by Python's `regex` module with GPT-2's pattern.
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"Hello world", {"Hello", " world"}},
      {"I'm sure it's they're we've you'll he'd don't",
       {"I", "'m", " sure", " it", "'s", " they", "'re", " we", "'ve", " you", "'ll", " he", "'d", " don", "'t"}},
      {"'S 'LL 'tis", {"'", "S", " '", "LL", " '", "tis"}},
      {"abc123 4567 x9", {"abc", "123", " 4567", " x", "9"}},
      {"Hello, world!!! (ok) -- [x]", {"Hello", ",", " world", "!!!", " (", "ok", ")", " --", " [", "x", "]"}},
      {"a  b   c", {"a", " ", " b", "  ", " c"}},
      {"line1\nline2\n\n  indented\n", {"line", "1", "\n", "line", "2", "\n\n ", " indented", "\n"}},
      {"trailing spaces   ", {"trailing", " spaces", "   "}},
      {"tabs\tand\t\tmore", {"tabs", "\t", "and", "\t", "\t", "more"}},
      {"café résumé naïve", {"café", " résumé", " naïve"}},
      {"日本語のテキスト 日本", {"日本語のテキスト", " 日本"}},
      {"emoji 😀😀 ok 👍🏽!", {"emoji", " 😀😀", " ok", " 👍🏽!"}},
      {"x²³ ½ Ⅻ", {"x", "²³", " ½", " Ⅻ"}},
      {"   leading", {"  ", " leading"}},
      {"a\r\nb", {"a", "\r", "\n", "b"}},
      {"", {}},
  };
  auto p = Pretokenizer::create();
  REQUIRE(p.ok());
  for (const auto& [text, want] : cases) {
    auto got = toStrings(p->split(text));
    if (got != want) FAIL(("split of '" + text + "' differs").c_str());
  }
}

TEST_CASE("pretokenizerKeepsInvalidUtf8AsItsOwnPieces") {
  auto p = Pretokenizer::create();
  REQUIRE(p.ok());
  TSR_COMPARE(toStrings(p->split("ab\xff\xfe" "cd")), (std::vector<std::string>{"ab", "\xff\xfe", "cd"}));
  TSR_COMPARE(toStrings(p->split(" \xc3")), (std::vector<std::string>{" ", "\xc3"}));
  TSR_COMPARE(toStrings(p->split("\x80")), (std::vector<std::string>{"\x80"}));
  // The pieces tile any byte string.
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::string s = randomBytes(rng, rng() % 64);
    std::string joined;
    for (auto piece : p->split(s)) {
      REQUIRE(!piece.empty());
      joined += piece;
    }
    TSR_COMPARE(joined, s);
  }
}

TEST_CASE("pretokenizerRejectsBadPattern") {
  auto p = Pretokenizer::create("(unclosed");
  REQUIRE(!p.ok());
  REQUIRE(contains(p.error().message, "offset"));
}

TEST_CASE("byteAlphabetIsGpt2s") {
  const auto& order = gpt2ByteOrder();
  for (int i = 0; i < 256; ++i) TSR_COMPARE(int(order[i]), alphabet().order[i]);
  for (int b = 0; b < 256; ++b) TSR_COMPARE(byteToUnicode(uint8_t(b)), alphabet().spell.at(b));
  // Ids that GPT-2's encoder.json gives: "!" 0, "Ċ" (newline) 198, "Ġ" (space) 220.
  TSR_COMPARE(int(order[0]), int('!'));
  TSR_COMPARE(int(order[198]), int('\n'));
  TSR_COMPARE(int(order[220]), int(' '));
  TSR_COMPARE(byteToUnicode(' '), std::string("Ġ"));
  TSR_COMPARE(byteToUnicode(0xAD), std::string("Ń"));
  std::mt19937 rng(1);
  std::string bytes = randomBytes(rng, 1000);
  TSR_COMPARE(unicodeToBytes(bytesToUnicode(bytes)).value(), bytes);
  REQUIRE(!unicodeToBytes("日").has_value());  // outside the alphabet
  REQUIRE(!unicodeToBytes("\xc1\x81").has_value());  // overlong
}

TEST_CASE("encodeMatchesHandDerivedTokens") {
  BpeTokenizer t = loadSmall();
  const HandVocab& v = smallVocab();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"the", {"t", "he"}},
      {" the", {"Ġthe"}},                // (h,e) ranks first, then (Ġ,t), then (Ġt,he)
      {" lower", {"Ġlower"}},            // (e,r) before (l,o) by rank
      {" lowing", {"Ġlow", "ing"}},
      {"café", {"caf", "Ã©"}},
      {"  the", {"Ġ", "Ġthe"}},          // "\s+(?!\S)" leaves the last space to the word
      {"    x", {"ĠĠ", "Ġ", "Ġ", "x"}},  // "   " merges (Ġ,Ġ) once, left first
      {"it's 1234", {"i", "t", "'s", "Ġ", "123", "4"}},
      {"日本", {"æĹ¥", "æ", "ľ", "¬"}},
      {"the\n", {"t", "he", "Ċ"}},
      {"😀", {"ð", "Ł", "ĺ", "Ģ"}},
      {"the lowering café, 日本's 123 \n\n  it",
       {"t", "he", "Ġlower", "ing", "Ġ", "caf", "Ã©", ",", "Ġ", "æĹ¥", "æ", "ľ", "¬", "'s", "Ġ", "123", "Ġ", "Ċ",
        "Ċ", "Ġ", "Ġ", "i", "t"}},
  };
  for (const auto& [text, spelled] : cases) {
    auto ids = t.encode(text);
    if (ids != v.idsOf(spelled)) FAIL(("encoding of '" + text + "' differs").c_str());
    TSR_COMPARE(t.decode(ids).value(), text);
  }
  TSR_COMPARE(t.vocabSize(), int64_t(256 + 19 + 1));
  TSR_COMPARE(t.numMerges(), int64_t(19));
  TSR_COMPARE(t.tokenId("he").value(), v.ids.at("he"));
  TSR_COMPARE(std::string(t.tokenBytes(v.ids.at("Ġthe")).value()), std::string(" the"));
}

TEST_CASE("encodeRecognisesSpecialTokensWhenAllowed") {
  BpeTokenizer t = loadSmall();
  const HandVocab& v = smallVocab();
  TokenId eot = v.ids.at("<|endoftext|>");
  TSR_COMPARE(t.specialTokenId("<|endoftext|>").value(), eot);
  TSR_COMPARE(t.specialTokens().size(), size_t(1));
  // As text (GPT-2's encoder.py): the special token's text is split like any other.
  auto asText = t.encode("the<|endoftext|>");
  TSR_COMPARE(asText, v.idsOf({"t", "he", "<", "|", "e", "n", "d", "o", "f", "t", "e", "x", "t", "|", ">"}));
  auto allowed = t.encode("the<|endoftext|> the<|endoftext|>", SpecialTokens::Allowed);
  TSR_COMPARE(allowed, (std::vector<TokenId>{v.ids.at("t"), v.ids.at("he"), eot, v.ids.at("Ġthe"), eot}));
  TSR_COMPARE(t.decode(allowed).value(), std::string("the<|endoftext|> the<|endoftext|>"));
  // "<|" that starts no special token stays text.
  TSR_COMPARE(t.decode(t.encode("a <|x|> <|", SpecialTokens::Allowed)).value(), std::string("a <|x|> <|"));
}

TEST_CASE("encodeMatchesReferenceBpeOnRandomVocabularies") {
  // Random merges over a three-letter alphabet, ranks shuffled so that some merges rank below the merges that
  // create their halves (legal in a file): the exact GPT-2 loop is the reference.
  std::mt19937 rng(11);
  const std::string letters = "abc";
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<std::string> pool = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> pairs;
    std::set<std::string> made(pool.begin(), pool.end());
    while (pairs.size() < 25) {
      const std::string& l = pool[rng() % pool.size()];
      const std::string& r = pool[rng() % pool.size()];
      if (l.size() + r.size() > 8 || std::find(pairs.begin(), pairs.end(), std::pair{l, r}) != pairs.end()) continue;
      pairs.emplace_back(l, r);
      if (made.insert(l + r).second) pool.push_back(l + r);
    }
    // Shuffle a third of the ranks.
    for (size_t i = 0; i < pairs.size() / 3; ++i) std::swap(pairs[rng() % pairs.size()], pairs[rng() % pairs.size()]);
    std::vector<std::string> lines;
    std::map<std::pair<std::string, std::string>, int> ranks;
    for (size_t i = 0; i < pairs.size(); ++i) {
      lines.push_back(pairs[i].first + " " + pairs[i].second);
      ranks[pairs[i]] = static_cast<int>(i);
    }
    HandVocab v(lines);
    auto t = BpeTokenizer::parse(v.encoderJson, v.vocabBpe);
    REQUIRE_MESSAGE(t.ok(), t.error().message);
    for (int w = 0; w < 200; ++w) {
      size_t n = 1 + rng() % (w < 190 ? 24 : 400);  // some long words take the heap's long path
      std::string word;
      std::vector<std::string> chars;
      for (size_t i = 0; i < n; ++i) {
        word += letters[rng() % 3];
        chars.push_back(word.substr(word.size() - 1));
      }
      std::vector<TokenId> got;
      t->encodePiece(word, got);
      if (got != v.idsOf(referenceBpe(chars, ranks)))
        FAIL(("trial " + std::to_string(trial) + ": BPE of '" + word + "' differs from the reference").c_str());
    }
  }
}

TEST_CASE("encodeIsStableAcrossCacheRestartsAndThreads") {
  BpeTrainOptions o;
  o.vocabSize = 500;
  std::string corpus;
  std::mt19937 rng(8);
  for (int i = 0; i < 20000; ++i) corpus += " w" + std::to_string(rng() % 5000) + (i % 7 ? "" : "\n");
  auto t = trainBpe(corpus, o);
  REQUIRE(t.ok());
  auto want = t->encode(corpus);
  // Over 128k distinct pieces fill the per-thread cache, which then starts over.
  std::string many;
  for (int i = 0; i < 300000; ++i) many += " x" + std::to_string(i);
  auto manyIds = t->encode(many);
  TSR_COMPARE(t->decode(manyIds).value(), many);
  TSR_COMPARE(t->encode(corpus), want);
  // Threads encoding with one tokenizer and with copies of it agree with the single-threaded result.
  BpeTokenizer copy = *t;
  std::vector<std::vector<TokenId>> results(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] { results[size_t(k)] = (k % 2 ? copy : *t).encode(corpus); });
  for (auto& th : threads) th.join();
  for (const auto& r : results) REQUIRE(r == want);
}

TEST_CASE("decodeRejectsUnknownIds") {
  BpeTokenizer t = loadSmall();
  std::vector<TokenId> ids = {0, 1, 5000};
  auto r = t.decode(ids);
  REQUIRE(!r.ok());
  REQUIRE(contains(r.error().message, "5000"));
  REQUIRE(contains(r.error().message, "position 2"));
}

TEST_CASE("encodeRoundTripsArbitraryBytes") {
  BpeTokenizer t = loadSmall();
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string s = randomBytes(rng, rng() % 300);
    if (i % 3 == 0)  // mixed with text the merges apply to
      s = "the lower " + s + " café 日本";
    TSR_COMPARE(t.decode(t.encode(s)).value(), s);
    TSR_COMPARE(t.decode(t.encode(s, SpecialTokens::Allowed)).value(), s);
  }
}

TEST_CASE("streamingEncodeEqualsEncode") {
  BpeTokenizer t = loadSmall();
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "the lowering café <|endoftext|> 日本's 1234\n";
  auto whole = t.encode(text, SpecialTokens::Allowed);
  std::vector<TokenId> streamed, buffer;
  int flushes = 0;
  t.encodeTo(text, buffer, SpecialTokens::Allowed,
             [&](std::vector<TokenId>& ids) {
               streamed.insert(streamed.end(), ids.begin(), ids.end());
               ids.clear();
               ++flushes;
             },
             1000);
  REQUIRE(flushes > 10);
  TSR_COMPARE(streamed, whole);
}

TEST_CASE("loadReportsBadFiles") {
  const HandVocab& v = smallVocab();
  auto expectError = [](const Result<BpeTokenizer>& r, std::vector<std::string> parts) {
    REQUIRE(!r.ok());
    for (const auto& p : parts)
      if (!contains(r.error().message, p)) FAIL(("'" + r.error().message + "' lacks '" + p + "'").c_str());
  };
  expectError(BpeTokenizer::load("/nonexistent/encoder.json", "/nonexistent/vocab.bpe"),
              {"/nonexistent/encoder.json", "cannot open"});
  expectError(BpeTokenizer::parse("{\"a\": 1,", v.vocabBpe), {"encoder.json", "not valid JSON"});
  expectError(BpeTokenizer::parse("[1, 2]", v.vocabBpe), {"encoder.json", "object"});
  expectError(BpeTokenizer::parse("{\"a\": \"x\"}", v.vocabBpe), {"encoder.json", "\"a\"", "integer"});
  expectError(BpeTokenizer::parse("{\"a\": 0, \"b\": 0}", v.vocabBpe), {"id 0", "\"a\"", "\"b\""});
  expectError(BpeTokenizer::parse("{\"日\": 0}", v.vocabBpe), {"\"日\"", "alphabet"});
  expectError(BpeTokenizer::parse("{\"a\": 0}", v.vocabBpe), {"encoder.json", "byte 0x00", "no token"});
  // vocab.bpe errors name the line.
  std::string badLine = "#version: 0.2\nh e\nthree parts here\n";
  expectError(BpeTokenizer::parse(v.encoderJson, badLine, "enc.json", "merges.bpe"),
              {"merges.bpe:3", "two tokens", "three parts here"});
  expectError(BpeTokenizer::parse(v.encoderJson, "#version: 0.2\nh e\nqq r\n"), {"vocab.bpe:3", "\"qq\"", "not a token"});
  expectError(BpeTokenizer::parse(v.encoderJson, "#version: 0.2\nh e\nx y\n"),
              {"vocab.bpe:3", "\"xy\"", "not a token in encoder.json"});
  expectError(BpeTokenizer::parse(v.encoderJson, "h e\nsingle\n"), {"vocab.bpe:2"});
  // A vocab.bpe without a version line and with CRLF line ends still loads.
  auto crlf = BpeTokenizer::parse(v.encoderJson, "h e\r\nĠ t\r\n");
  REQUIRE(crlf.ok());
  TSR_COMPARE(crlf->numMerges(), int64_t(2));
}

TEST_CASE("loadsFilesFromDisk") {
  test::TempDir dir;
  const HandVocab& v = smallVocab();
  std::string d = dir.path();
  REQUIRE(writeFileAtomically(d + "/encoder.json", v.encoderJson).ok());
  REQUIRE(writeFileAtomically(d + "/vocab.bpe", v.vocabBpe).ok());
  auto t = BpeTokenizer::loadDirectory(d);
  REQUIRE(t.ok());
  TSR_COMPARE(t->encode(" lowing"), v.idsOf({"Ġlow", "ing"}));
}

TEST_CASE("trainFirstMergesMatchHandCount") {
  // Pieces: "low", " lower", " lowest", " low". Pair counts: (l,o) 4, (o,w) 4, (Ġ,l) 3, (w,e) 2, others 1.
  // (l,o) and (o,w) tie at 4; "l" sorts before "o". Then (lo,w) 4, (Ġ,low) 3, (Ġlow,e) 2; all else is 1.
  BpeTrainOptions o;
  o.vocabSize = 300;
  o.minPairCount = 2;
  auto t = trainBpe("low lower lowest low", o);
  REQUIRE(t.ok());
  std::vector<std::pair<std::string, std::string>> merges;
  for (auto [a, b] : t->merges())
    merges.emplace_back(std::string(*t->tokenBytes(a)), std::string(*t->tokenBytes(b)));
  TSR_COMPARE(merges, (std::vector<std::pair<std::string, std::string>>{
                       {"l", "o"}, {"lo", "w"}, {" ", "low"}, {" low", "e"}}));
  // Ids: 256 bytes in GPT-2's order, one per merge, then <|endoftext|>.
  TSR_COMPARE(t->vocabSize(), int64_t(256 + 4 + 1));
  TSR_COMPARE(t->tokenId("lo").value(), TokenId(256));
  TSR_COMPARE(t->tokenId(" lowe").value(), TokenId(259));
  TSR_COMPARE(t->specialTokenId("<|endoftext|>").value(), TokenId(260));
  TSR_COMPARE(t->byteToken('!'), TokenId(0));
  TSR_COMPARE(t->byteToken(' '), TokenId(220));
  // The learned merges encode the corpus as training left it.
  auto ids = t->encode("low lower lowest");
  std::vector<std::string> pieces;
  for (TokenId id : ids) pieces.emplace_back(*t->tokenBytes(id));
  TSR_COMPARE(pieces, (std::vector<std::string>{"low", " lowe", "r", " lowe", "s", "t"}));
}

TEST_CASE("trainBreaksTiesByBytes") {
  // Every pair occurs once. By bytes, (" ","a") < (" ","x") < ("a","b"); then (" a","b") follows (" ","x")
  // because " " is a prefix of " a". Byte ids would order them differently (space is id 220, 'a' is 64).
  BpeTrainOptions o;
  o.vocabSize = 256 + 3 + 1;
  o.minPairCount = 1;
  auto t = trainBpe(" x ab", o);
  REQUIRE(t.ok());
  std::vector<std::string> made;
  for (auto [a, b] : t->merges()) made.push_back(std::string(*t->tokenBytes(a)) + "+" + std::string(*t->tokenBytes(b)));
  TSR_COMPARE(made, (std::vector<std::string>{" +a", " +x", " a+b"}));
}

TEST_CASE("trainStopsAtVocabSizeAndMinCount") {
  std::string corpus;
  std::mt19937 rng(5);
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and", "runs"};
  for (int i = 0; i < 3000; ++i) corpus += std::string(i ? " " : "") + words[rng() % 10];
  BpeTrainOptions o;
  o.vocabSize = 280;
  auto t = trainBpe(corpus, o);
  REQUIRE(t.ok());
  TSR_COMPARE(t->vocabSize(), int64_t(280));
  TSR_COMPARE(t->numMerges(), int64_t(280 - 256 - 1));
  // A tiny corpus runs out of pairs seen twice long before 4096.
  o.vocabSize = 4096;
  auto small = trainBpe("abc abd", o);
  REQUIRE(small.ok());
  TSR_COMPARE(small->numMerges(), int64_t(1));  // (a,b) occurs twice; after it every pair occurs once
}

TEST_CASE("trainRejectsBadOptions") {
  BpeTrainOptions o;
  o.vocabSize = 200;
  auto r = trainBpe("abc", o);
  REQUIRE(!r.ok());
  REQUIRE(contains(r.error().message, "too small"));
  o.vocabSize = 1000;
  o.specialTokens = {"EOT"};
  r = trainBpe("abc", o);
  REQUIRE(!r.ok());
  REQUIRE(contains(r.error().message, "<|name|>"));
}

TEST_CASE("trainedTokenizerRoundTripsBytesAndFiles") {
  std::string corpus;
  std::mt19937 rng(9);
  const char* words[] = {"alpha", "beta", "gamma", "délta", "日本", "42", "it's", "\n", "  ", "!!"};
  for (int i = 0; i < 20000; ++i) {
    // Two draws, in this order: in one expression their order would be the compiler's choice.
    const std::string word = words[rng() % 10];
    corpus += (rng() % 2 ? " " : "") + word;
    if (i % 500 == 499) corpus += "<|endoftext|>";
  }
  corpus += randomBytes(rng, 5000);  // invalid UTF-8 trains too
  BpeTrainOptions o;
  o.vocabSize = 600;
  auto t = trainBpe(corpus, o);
  REQUIRE(t.ok());
  TSR_COMPARE(t->vocabSize(), int64_t(600));
  // No merge crosses a special token: none of the learned tokens holds "<|endoftext|>" or a part of it and text.
  for (TokenId id = 0; id < 599; ++id) REQUIRE(!contains(std::string(*t->tokenBytes(id)), "<|endoftext"));
  for (int i = 0; i < 200; ++i) {
    std::string s = randomBytes(rng, rng() % 200);
    TSR_COMPARE(t->decode(t->encode(s)).value(), s);
  }
  auto ids = t->encode(corpus, SpecialTokens::Allowed);
  REQUIRE(ids.size() < corpus.size() / 2);
  TSR_COMPARE(t->decode(ids).value(), corpus);

  // Save and load: same files, same merges, same encodings.
  test::TempDir dir;
  std::string d = dir.path() + "/tok";
  REQUIRE(t->saveDirectory(d).ok());
  auto back = BpeTokenizer::loadDirectory(d);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  TSR_COMPARE(back->merges(), t->merges());
  TSR_COMPARE(back->vocabSize(), t->vocabSize());
  TSR_COMPARE(back->specialTokenId("<|endoftext|>"), t->specialTokenId("<|endoftext|>"));
  TSR_COMPARE(back->encoderJson(), t->encoderJson());
  TSR_COMPARE(back->vocabBpe(), t->vocabBpe());
  TSR_COMPARE(back->encode(corpus, SpecialTokens::Allowed), ids);
  REQUIRE(readFile(d + "/vocab.bpe")->starts_with("#version: 0.2\n"));
  // No temporary files are left behind.
  TSR_COMPARE(test::countFiles(d), 2);
}

TEST_CASE("trainingIsDeterministic") {
  std::string corpus;
  std::mt19937 rng(2);
  for (int i = 0; i < 5000; ++i) corpus += " w" + std::to_string(rng() % 300);
  BpeTrainOptions o;
  o.vocabSize = 400;
  auto a = trainBpe(corpus, o);
  BpeTrainer trainer = std::move(BpeTrainer::create(o).value());
  // Fed in parts cut where pieces start (" w..."), the counts and so the merges are the same.
  size_t cut1 = corpus.find(" w", 1000), cut2 = corpus.find(" w", 20000);
  trainer.addText(corpus.substr(0, cut1));
  trainer.addText(corpus.substr(cut1, cut2 - cut1));
  trainer.addText(corpus.substr(cut2));
  auto b = trainer.train();
  REQUIRE((a.ok() && b.ok()));
  TSR_COMPARE(a->merges(), b->merges());
}
