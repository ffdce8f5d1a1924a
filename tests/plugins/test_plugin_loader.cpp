// The plugin loader: deliberately broken plugins (tests/plugins/broken) are each reported with their path and
// the reason, and change nothing (no op, pass, family or panel registered, the engine keeps working); the search
// order and its duplicates; and the op_stats example's report in a compile dump, against a count of our own.
#include "tests/check.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "engine/data/file_io.h"
#include "engine/ops/registry.h"
#include "engine/passes/dump.h"
#include "engine/passes/pipeline.h"
#include "engine/plugin/library_check.h"
#include "engine/plugin/loader.h"
#include "engine/plugin/trust.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"
#include "tests/temp_dir.h"

using namespace tsr;
namespace fs = std::filesystem;

namespace {

// What the engine has registered, to compare before and after a load.
struct Registered {
  size_t ops, passes, families, panels, records;
  bool operator==(const Registered&) const = default;
};

Registered registered() {
  return {ops::registry().all().size(), passes::registeredPasses().size(), project::modelFamilyNames().size(),
          plugin::pluginPanels().size(), plugin::pluginRecords().size()};
}

std::string brokenPath(const char* kind) { return std::string(TSR_BROKEN_PLUGIN_DIR) + "/" + kind + ".so"; }
std::string examplePath(const char* name) { return std::string(TSR_PLUGIN_DIR) + "/" + name + ".so"; }

void copyFile(const std::string& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

std::string readBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void writeBytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  REQUIRE(f.is_open());
  f << bytes;
}

// SHA-256 written out from FIPS 180-4: the reference for the loader's (OpenSSL's).
std::string referenceSha256(const std::string& bytes) {
  static const uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  // The message, a 1 bit, zeros to 56 mod 64 bytes, and the length in bits, big-endian.
  std::string m = bytes + '\x80';
  while (m.size() % 64 != 56) m += '\0';
  const uint64_t bits = uint64_t(bytes.size()) * 8;
  for (int i = 7; i >= 0; --i) m += static_cast<char>((bits >> (8 * i)) & 0xff);
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t block = 0; block < m.size(); block += 64) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t) {
      w[t] = 0;
      for (int i = 0; i < 4; ++i) w[t] = (w[t] << 8) | static_cast<uint8_t>(m[block + size_t(4 * t + i)]);
    }
    for (int t = 16; t < 64; ++t) {
      uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; ++t) {
      uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[t] + w[t];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    const uint32_t add[8] = {a, b, c, d, e, f, g, hh};
    for (int i = 0; i < 8; ++i) h[i] += add[i];
  }
  std::string hex;
  for (uint32_t v : h) hex += fmt::format("{:08x}", v);
  return hex;
}

auto yes = [](const plugin::TrustRequest&) { return true; };

}  // namespace

TEST_CASE("brokenPluginIsReportedAndSkipped") {
  struct Row {
    const char* name;
    const char* kind;
    const char* reason;
  };
  const Row rows[] = {
      {"wrong API version", "wrong_version", "plugin API version 99, this Tessera loads version 1"},
      {"no entry point", "no_entry", "no entry point tessera_plugin_v1()"},
      {"missing symbol", "missing_symbol", "undefined symbol: tessera_test_function_that_does_not_exist"},
      {"init fails", "failing_init", "init failed: no device found"},
      {"op fails the rule-table check", "bad_rules",
       "op broken_bad_op: fails the rule-table check: no batching rule; differentiable but no vjp rule"},
      {"init throws", "throwing_init", "init threw: cannot read the config"},
      {"other engine", "other_engine", "built against Tessera 0.0.0-other"},
      {"duplicate op", "duplicate_op", "op 'add' is already registered"},
  };
  for (const Row& row : rows) {
    SUBCASE(row.name) {
      std::string path = brokenPath(row.kind);
      REQUIRE_MESSAGE(fs::exists(path), path.c_str());
      Registered before = registered();
      plugin::PluginRecord r = plugin::loadPlugin(path);
      REQUIRE(!r.loaded);
      TSR_COMPARE(r.path, fs::canonical(path).string());
      REQUIRE_MESSAGE(r.error.find(row.reason) != std::string::npos, r.error.c_str());
      REQUIRE((r.ops.empty() && r.passes.empty() && r.families.empty() && r.panels.empty()));
      // The error and nothing else: one record more, nothing registered, the good op of the same plugin neither.
      Registered after = registered();
      TSR_COMPARE(after.records, before.records + 1);
      after.records = before.records;
      REQUIRE(after == before);
      REQUIRE(!ops::registry().find("broken_good_op"));
      REQUIRE(!ops::registry().find("broken_bad_op"));
      for (const auto& p : passes::registeredPasses()) REQUIRE(p.name != "broken_nothing");
      // The engine keeps working: an op runs, a graph compiles.
      auto y = capture([] { return std::vector<Array>{exp(Array::fromVector(std::vector<double>{0, 1}, Shape{2}, DType::F64))}; });
      REQUIRE(y.ok());
      TSR_COMPARE((*y)[0].toDoubles()[0], 1.0);
    }
  }
}

// A library cut short (a failed copy, a full disk) is turned away before dlopen, which would die of SIGBUS
// on its missing pages or, cut only at its tail, load it: reported with the reason, nothing registered.
TEST_CASE("damagedLibraryIsReportedNotLoaded") {
  struct Row {
    const char* name;
    int64_t keep;
    const char* reason;
  };
  const Row rows[] = {
      {"empty", 0, "no ELF header"},
      {"ELF header only", 64, "truncated: the program headers"},
      {"half", -2, "truncated:"},
      {"last byte missing", -1, "truncated: the section headers"},
  };
  for (const Row& row : rows) {
    SUBCASE(row.name) {
      const int64_t keep = row.keep;
      std::string whole = readBytes(examplePath("swiglu"));
      REQUIRE(whole.size() > 4096);
      const size_t n = keep == -2 ? whole.size() / 2 : keep == -1 ? whole.size() - 1 : static_cast<size_t>(keep);
      test::TempDir tmp;
      fs::path path = fs::path(tmp.path()) / "swiglu.so";
      writeBytes(path, whole.substr(0, n));
      Registered before = registered();
      plugin::PluginRecord r = plugin::loadPlugin(path.string());
      REQUIRE(!r.loaded);
      REQUIRE_MESSAGE((r.error.find("damaged library: ") == 0 && r.error.find(row.reason) != std::string::npos),
                      r.error.c_str());
      TSR_COMPARE(r.sha256, referenceSha256(whole.substr(0, n)));
      Registered after = registered();
      after.records = before.records;
      REQUIRE(after == before);
    }
  }
}

// The checks on well-formed libraries: each example passes, and a library without the entry point is named
// as such before anything of it runs.
TEST_CASE("libraryCheck") {
  for (const char* name : {"swiglu", "op_stats"}) {
    std::string bytes = readBytes(examplePath(name));
    auto st = plugin::checkLibraryImage({reinterpret_cast<const uint8_t*>(bytes.data()), size_t(bytes.size())}, "tessera_plugin_v1");
    REQUIRE_MESSAGE(st.ok(), st.error().message);
    TSR_COMPARE(plugin::sha256Hex({reinterpret_cast<const uint8_t*>(bytes.data()), size_t(bytes.size())}),
                referenceSha256(bytes));
  }
  std::string noEntry = readBytes(brokenPath("no_entry"));
  auto st = plugin::checkLibraryImage({reinterpret_cast<const uint8_t*>(noEntry.data()), size_t(noEntry.size())}, "tessera_plugin_v1");
  REQUIRE(!st.ok());
  REQUIRE_MESSAGE(st.error().message.find("no entry point tessera_plugin_v1()") != std::string::npos,
                  st.error().message.c_str());
  // The well-known SHA-256 of "abc" (FIPS 180-2, appendix B.1).
  const uint8_t abc[] = {'a', 'b', 'c'};
  TSR_COMPARE(plugin::sha256Hex(abc), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
}

// A project's plugins/ folder loads only when trusted: not in the list, nothing loads and the prompt is asked
// with the files and their hashes; a trusted entry with another hash asks again; once the list holds the
// folder with the right hash, the plugin loads without a question.
TEST_CASE("projectPluginsNeedTrust") {
  test::TempDir home, tmp;
  setenv("XDG_CONFIG_HOME", home.path().c_str(), 1);
  unsetenv("TESSERA_PLUGIN_PATH");
  fs::path proj = fs::path(tmp.path()) / "proj";
  copyFile(TSR_PROBE_PLUGIN, proj / "plugins" / "trust_probe.so");
  const std::string hash = referenceSha256(readBytes(TSR_PROBE_PLUGIN));
  auto dirs = plugin::searchDirs(proj.string(), "");

  auto records = plugin::loadPlugins(dirs);
  TSR_COMPARE(records.size(), size_t(1));
  REQUIRE((!records[0].loaded && records[0].untrusted));
  REQUIRE_MESSAGE(records[0].error.find("not trusted (the project " + plugin::trustFolderName(proj.string()) +
                                        " is not in the trust list)") == 0,
                  records[0].error.c_str());
  TSR_COMPARE(records[0].sha256, hash);
  REQUIRE(!ops::registry().find("trust_probe_op"));

  std::vector<plugin::TrustRequest> asked;
  auto no = [&](const plugin::TrustRequest& r) { asked.push_back(r); return false; };
  plugin::loadPlugins(dirs, no);
  TSR_COMPARE(asked.size(), size_t(1));
  TSR_COMPARE(asked[0].files, (std::vector<plugin::PluginFile>{{"trust_probe.so", hash}}));
  REQUIRE(!ops::registry().find("trust_probe_op"));

  plugin::TrustList wrong;
  wrong.trust(plugin::trustFolderName(proj.string()), {{"trust_probe.so", std::string(64, 'a')}});
  REQUIRE(wrong.save(plugin::TrustList::defaultPath()).ok());
  plugin::loadPlugins(dirs, no);
  TSR_COMPARE(asked.size(), size_t(2));
  REQUIRE_MESSAGE(asked[1].reason.find("trust_probe.so changed since the project was trusted") == 0,
                  asked[1].reason.c_str());
  REQUIRE(!ops::registry().find("trust_probe_op"));

  REQUIRE(plugin::rememberTrust(asked[0]).ok());
  records = plugin::loadPlugins(dirs, no);
  TSR_COMPARE(asked.size(), size_t(2));
  TSR_COMPARE(records.size(), size_t(1));
  REQUIRE_MESSAGE(records[0].loaded, records[0].error.c_str());
  TSR_COMPARE(records[0].sha256, hash);
  REQUIRE(ops::registry().find("trust_probe_op"));
  // One record for the file: the untrusted tries were replaced by the load.
  int recordsOfIt = 0;
  for (const auto& r : plugin::pluginRecords()) recordsOfIt += r.path == records[0].path;
  TSR_COMPARE(recordsOfIt, 1);
}

// A library that changes between the question and the load (here: while the prompt is answered) is not
// loaded: what was trusted is the hash the prompt was shown.
TEST_CASE("libraryChangedAfterTrustIsNotLoaded") {
  test::TempDir home, tmp;
  setenv("XDG_CONFIG_HOME", home.path().c_str(), 1);
  fs::path lib = fs::path(tmp.path()) / "proj" / "plugins" / "trust_probe.so";
  copyFile(TSR_PROBE_PLUGIN, lib);
  auto swap = [&](const plugin::TrustRequest&) {
    writeBytes(lib, readBytes(TSR_PROBE_PLUGIN) + std::string(8, '\0'));
    return true;
  };
  auto records = plugin::loadPlugins(plugin::searchDirs((lib.parent_path().parent_path()).string(), ""), swap);
  TSR_COMPARE(records.size(), size_t(1));
  REQUIRE(!records[0].loaded);
  REQUIRE_MESSAGE(records[0].error.find("the library changed after it was trusted") == 0, records[0].error.c_str());
  TSR_COMPARE(records[0].sha256, referenceSha256(readBytes(lib.string())));
}

// The trust list's file: written and read back; mistakes named with the file and line.
TEST_CASE("trustListFile") {
  plugin::TrustList list;
  list.trust("/home/me/a b", {{"x.so", std::string(64, '1')}, {"y.so", std::string(64, '2')}});
  list.trust("/p", {{"z.so", std::string(64, 'f')}});
  list.trust("/home/me/a b", {{"x.so", std::string(64, '3')}});
  list.trust("/home/j\xc3\xb6rg/# \"q\" 'x'", {{"\xc3\xa9.so", std::string(64, '4')}});  // non-ASCII and quotes in strings
  auto back = plugin::TrustList::parse(list.toToml(), "trusted.toml");
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  TSR_COMPARE(back->projects().size(), size_t(3));
  TSR_COMPARE(back->projects()[2].folder, std::string("/home/j\xc3\xb6rg/# \"q\" 'x'"));
  TSR_COMPARE(back->projects()[0].folder, std::string("/home/me/a b"));
  TSR_COMPARE(back->projects()[0].plugins.size(), size_t(2));
  REQUIRE(back->whyUntrusted("/home/me/a b", {{"x.so", std::string(64, '3')}}).empty());
  REQUIRE(!back->whyUntrusted("/home/me/a b", {{"x.so", std::string(64, '1')}}).empty());
  REQUIRE(!back->whyUntrusted("/home/me/a b", {{"new.so", std::string(64, '1')}}).empty());
  REQUIRE(!back->whyUntrusted("/q", {}).empty());
  // A folder with a line break and three single quotes (toml++'s own writer ends such a string early), a
  // 4-byte character and a byte that is not UTF-8 (written as U+FFFD, the only form TOML can hold).
  plugin::TrustList odd;
  odd.trust("/h/a'''#b\nc\xf0\x9f\x98\x80\xff", {{"p'''.so", std::string(64, '5')}});
  const std::string oddText = odd.toToml();
  auto oddBack = plugin::TrustList::parse(oddText, "trusted.toml");
  REQUIRE_MESSAGE(oddBack.ok(), oddBack.error().message << "\n" << oddText);
  TSR_COMPARE(oddBack->projects().size(), size_t(1));
  TSR_COMPARE(oddBack->projects()[0].folder, std::string("/h/a'''#b\nc\xf0\x9f\x98\x80\xef\xbf\xbd"));
  TSR_COMPARE(oddBack->projects()[0].plugins, (std::vector<plugin::PluginFile>{{"p'''.so", std::string(64, '5')}}));
  struct Bad { const char* text; const char* error; };
  for (const Bad& b : {Bad{"[[project]]\nfolder = 3\n", "trusted.toml:2: 'folder' must be a non-empty string"},
                       Bad{"[[project]]\nfolder = \"/a\"\nplugins = { \"x.so\" = \"abc\" }\n",
                           "trusted.toml:3: plugins.'x.so' must be a SHA-256"},
                       Bad{"[[project]]\nfolder = \"/a\"\ncolour = 1\n", "trusted.toml:3: unknown key 'colour'"},
                       Bad{"project = 1\n", "trusted.toml:1: 'project' must be an array of tables"},
                       Bad{"[[project]]\nplugins = {}\n", "trusted.toml:1: a [[project]] without 'folder'"},
                       Bad{"[[project]\n", "trusted.toml:1:"},
                       // toml++ asserts on these (where assertions are on) instead of reporting them.
                       Bad{"\n[[\x01zproject]]\n", "trusted.toml:2:1: a table header must begin with a key"},
                       Bad{"[[project]]\nfolder = \"/a\x01\"\n", "trusted.toml:2:13: control character U+0001"},
                       // toml++ reaches __builtin_unreachable on this one.
                       Bad{"\xc6\x8dpty\n", "trusted.toml:1:1: a non-ASCII byte"},
                       Bad{"[[project]]\nfolder = \"/h\xd2\x86\"\n", "trusted.toml:2:13: a non-ASCII byte"},
                       Bad{"[[project]]\nfolder = 6\"/h\xd2\x86\"\n", "trusted.toml:2:11: a quote inside a bare value"},
                       // and asserts on this one.
                       Bad{"# x\n  [*o]\n", "trusted.toml:2:3: a table header must begin with a key"},
                       Bad{"[[[project]]\n", "trusted.toml:1:1: a table header must begin with a key"},
                       // and on a quote inside a bare value (tests/fuzz/corpus/plugin_manifest/value_terminator_assert).
                       Bad{"T=2--\"------ 3\t=\t2*+T=VT'=", "trusted.toml:1:6: a quote inside a bare value"}}) {
    auto r = plugin::TrustList::parse(b.text, "trusted.toml");
    REQUIRE_MESSAGE(!r.ok(), b.text);
    REQUIRE_MESSAGE(r.error().message.find(b.error) == 0, r.error().message);
  }
}

TEST_CASE("missingFileIsReported") {
  plugin::PluginRecord r = plugin::loadPlugin("/nonexistent/plugin.so");
  REQUIRE(!r.loaded);
  REQUIRE_MESSAGE(r.error.find("/nonexistent/plugin.so") != std::string::npos, r.error.c_str());
}

// The folders in order: PROJECT/plugins, TESSERA_PLUGIN_PATH's entries, the user's folder, the bundled one.
TEST_CASE("searchOrder") {
  test::TempDir home;
  setenv("XDG_CONFIG_HOME", home.path().c_str(), 1);
  setenv("TESSERA_PLUGIN_PATH", "/a:/b::/c", 1);
  auto dirs = plugin::searchDirs("/proj", "/bundled");
  std::vector<std::string> got;
  for (const auto& d : dirs) got.push_back(d.dir + " " + d.origin);
  std::vector<std::string> want = {"/proj/plugins project", "/a TESSERA_PLUGIN_PATH", "/b TESSERA_PLUGIN_PATH",
                                   "/c TESSERA_PLUGIN_PATH", home.path() + "/tessera/plugins user",
                                   "/bundled bundled"};
  TSR_COMPARE(got, want);
  unsetenv("TESSERA_PLUGIN_PATH");
}

// The first folder wins: the project's copy of swiglu loads, the one on TESSERA_PLUGIN_PATH is skipped as a
// duplicate naming the loaded one; a broken plugin beside them is reported and the others still load; a file
// reached twice (here the same folder twice) is loaded once.
TEST_CASE("discoveryLoadsInOrderAndSkipsDuplicates") {
  test::TempDir tmp;
  fs::path root(tmp.path());
  copyFile(examplePath("swiglu"), root / "proj" / "plugins" / "swiglu.so");
  copyFile(examplePath("swiglu"), root / "env" / "swiglu.so");
  copyFile(brokenPath("bad_rules"), root / "env" / "a_bad_rules.so");
  copyFile(examplePath("op_stats"), root / "env" / "op_stats.so");
  std::ofstream(root / "env" / "README.md") << "not a library";
  test::TempDir home;
  setenv("XDG_CONFIG_HOME", home.path().c_str(), 1);
  std::string env = (root / "env").string();
  setenv("TESSERA_PLUGIN_PATH", (env + ":" + env).c_str(), 1);
  auto records = plugin::loadPlugins(plugin::searchDirs((root / "proj").string(), ""), yes);
  unsetenv("TESSERA_PLUGIN_PATH");
  std::vector<std::string> got;
  for (const auto& r : records)
    got.push_back(fs::path(r.path).filename().string() + (r.loaded ? " loaded" : " skipped"));
  std::vector<std::string> want = {"swiglu.so loaded", "a_bad_rules.so skipped", "op_stats.so loaded",
                                   "swiglu.so skipped"};
  TSR_COMPARE(got, want);
  TSR_COMPARE(records[0].origin, std::string("project"));
  TSR_COMPARE(records[0].ops, std::vector<std::string>{"swiglu"});
  TSR_COMPARE(records[0].families, std::vector<std::string>{"gpt2_swiglu"});
  TSR_COMPARE(records[2].passes, std::vector<std::string>{"op_stats at end"});
  REQUIRE_MESSAGE(records[3].error.find("already loaded from " + records[0].path) != std::string::npos,
                  records[3].error.c_str());
  REQUIRE(ops::registry().find("swiglu"));
  REQUIRE(project::findModelFamily("gpt2_swiglu"));
  // Its op gets a code after the core ops.
  REQUIRE(static_cast<uint32_t>(ops::registry().find("swiglu")->code) >= ir::kNumCoreOps);
}

// op_stats runs at the end of the compiler pipeline, changes nothing, and its report lands in the dump folder
// with counts that agree with our own count of the graph's nodes.
TEST_CASE("opStatsReportInTheDump") {
  if (!passes::registeredPasses().size()) {
    plugin::PluginRecord r = plugin::loadPlugin(examplePath("op_stats"));
    REQUIRE_MESSAGE(r.loaded, r.error.c_str());
  }
  auto pm = passes::compilerPipeline();
  TSR_COMPARE(pm.describe().back(), std::string("op_stats"));
  // f(x, w) = tanh(x @ w) + x @ w: two dot_generals that CSE merges into one.
  auto cg = makeGraph([](const std::vector<Array>& a) {
    Array y = matmul(a[0], a[1]);
    return std::vector<Array>{tanh(y) + matmul(a[0], a[1])};
  }, {Aval{Shape{4, 8}, DType::F32}, Aval{Shape{8, 3}, DType::F32}});
  REQUIRE(cg.ok());
  test::TempDir dir;
  auto r = passes::dumpPipeline(cg->graph, dir.path(), ops::registry());
  REQUIRE_MESSAGE(r.ok(), r.error().message);
  fs::path file = fs::path(dir.path()) / "op_stats.txt";
  REQUIRE(fs::exists(file));
  auto read = data::readFile(file.string());
  REQUIRE_MESSAGE(read.ok(), read.error().message);
  const std::string& text = *read;
  std::map<std::string, int> count;
  for (const ir::Node& n : r->graph.nodes()) count[ops::registry().get(n.op).name]++;
  TSR_COMPARE(count["dot_general"], 1);
  REQUIRE_MESSAGE(text.find(std::to_string(r->graph.nodes().size()) + " nodes") != std::string::npos, text.c_str());
  // The dot_general row: 1 node, 2 * 4 * 8 * 3 = 192 flops = 0.000192 MFLOP... shown as 0.000.
  std::istringstream lines(text);
  std::string line;
  bool found = false;
  while (std::getline(lines, line))
    if (line.rfind("dot_general ", 0) == 0) {
      std::istringstream cols(line);
      std::string op, family;
      int nodes = 0;
      cols >> op >> family >> nodes;
      TSR_COMPARE(family, std::string("contraction"));
      TSR_COMPARE(nodes, 1);
      found = true;
    }
  REQUIRE_MESSAGE(found, text.c_str());
}
