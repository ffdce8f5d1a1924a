// The plugin loader: deliberately broken plugins (tests/plugins/broken) are each reported with their path and
// the reason, and change nothing (no op, pass, family or panel registered, the engine keeps working); the search
// order and its duplicates; and the op_stats example's report in a compile dump, against a count of our own.
#include <QtTest>

#include <QCryptographicHash>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/data/file_io.h"
#include "engine/ops/registry.h"
#include "engine/passes/dump.h"
#include "engine/passes/pipeline.h"
#include "engine/plugin/library_check.h"
#include "engine/plugin/loader.h"
#include "engine/plugin/trust.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

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

QByteArray readBytes(const std::string& path) {
  QFile f(QString::fromStdString(path));
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

void writeBytes(const fs::path& path, const QByteArray& bytes) {
  fs::create_directories(path.parent_path());
  QFile f(QString::fromStdString(path.string()));
  QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
  f.write(bytes);
}

// SHA-256 by Qt's own implementation, against the loader's (OpenSSL's).
std::string qtSha256(const QByteArray& bytes) {
  return QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex().toStdString();
}

auto yes = [](const plugin::TrustRequest&) { return true; };

}  // namespace

class TestPluginLoader : public QObject {
  Q_OBJECT
 private slots:
  void brokenPluginIsReportedAndSkipped_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("reason");
    QTest::newRow("wrong API version") << "wrong_version" << "plugin API version 99, this Tessera loads version 1";
    QTest::newRow("no entry point") << "no_entry" << "no entry point tessera_plugin_v1()";
    QTest::newRow("missing symbol") << "missing_symbol" << "undefined symbol: tessera_test_function_that_does_not_exist";
    QTest::newRow("init fails") << "failing_init" << "init failed: no device found";
    QTest::newRow("op fails the rule-table check")
        << "bad_rules" << "op broken_bad_op: fails the rule-table check: no batching rule; differentiable but no vjp rule";
    QTest::newRow("init throws") << "throwing_init" << "init threw: cannot read the config";
    QTest::newRow("other engine") << "other_engine" << "built against Tessera 0.0.0-other";
    QTest::newRow("duplicate op") << "duplicate_op" << "op 'add' is already registered";
  }
  void brokenPluginIsReportedAndSkipped() {
    QFETCH(QString, kind);
    QFETCH(QString, reason);
    std::string path = brokenPath(qPrintable(kind));
    QVERIFY2(fs::exists(path), path.c_str());
    Registered before = registered();
    plugin::PluginRecord r = plugin::loadPlugin(path);
    QVERIFY(!r.loaded);
    QCOMPARE(QString::fromStdString(r.path), QString::fromStdString(fs::canonical(path).string()));
    QVERIFY2(r.error.find(reason.toStdString()) != std::string::npos, r.error.c_str());
    QVERIFY(r.ops.empty() && r.passes.empty() && r.families.empty() && r.panels.empty());
    // The error and nothing else: one record more, nothing registered, the good op of the same plugin neither.
    Registered after = registered();
    QCOMPARE(after.records, before.records + 1);
    after.records = before.records;
    QVERIFY(after == before);
    QVERIFY(!ops::registry().find("broken_good_op"));
    QVERIFY(!ops::registry().find("broken_bad_op"));
    for (const auto& p : passes::registeredPasses()) QVERIFY(p.name != "broken_nothing");
    // The engine keeps working: an op runs, a graph compiles.
    auto y = capture([] { return std::vector<Array>{exp(Array::fromVector(std::vector<double>{0, 1}, Shape{2}, DType::F64))}; });
    QVERIFY(y.ok());
    QCOMPARE((*y)[0].toDoubles()[0], 1.0);
  }

  // A library cut short (a failed copy, a full disk) is turned away before dlopen, which would die of SIGBUS
  // on its missing pages or, cut only at its tail, load it: reported with the reason, nothing registered.
  void damagedLibraryIsReportedNotLoaded_data() {
    QTest::addColumn<qint64>("keep");  // bytes kept; negative: counted from the end
    QTest::addColumn<QString>("reason");
    QTest::newRow("empty") << qint64(0) << "no ELF header";
    QTest::newRow("ELF header only") << qint64(64) << "truncated: the program headers";
    QTest::newRow("half") << qint64(-2) << "truncated:";
    QTest::newRow("last byte missing") << qint64(-1) << "truncated: the section headers";
  }
  void damagedLibraryIsReportedNotLoaded() {
    QFETCH(qint64, keep);
    QFETCH(QString, reason);
    QByteArray whole = readBytes(examplePath("swiglu"));
    QVERIFY(whole.size() > 4096);
    qint64 n = keep == -2 ? whole.size() / 2 : keep == -1 ? whole.size() - 1 : keep;
    QTemporaryDir tmp;
    fs::path path = fs::path(tmp.path().toStdString()) / "swiglu.so";
    writeBytes(path, whole.left(n));
    Registered before = registered();
    plugin::PluginRecord r = plugin::loadPlugin(path.string());
    QVERIFY(!r.loaded);
    QVERIFY2(r.error.find("damaged library: ") == 0 && r.error.find(reason.toStdString()) != std::string::npos, r.error.c_str());
    QCOMPARE(r.sha256, qtSha256(whole.left(n)));
    Registered after = registered();
    after.records = before.records;
    QVERIFY(after == before);
  }

  // The checks on well-formed libraries: each example passes, and a library without the entry point is named
  // as such before anything of it runs.
  void libraryCheck() {
    for (const char* name : {"swiglu", "op_stats"}) {
      QByteArray bytes = readBytes(examplePath(name));
      auto st = plugin::checkLibraryImage({reinterpret_cast<const uint8_t*>(bytes.data()), size_t(bytes.size())}, "tessera_plugin_v1");
      QVERIFY2(st.ok(), st.ok() ? "" : st.error().message.c_str());
      QCOMPARE(plugin::sha256Hex({reinterpret_cast<const uint8_t*>(bytes.data()), size_t(bytes.size())}), qtSha256(bytes));
    }
    QByteArray noEntry = readBytes(brokenPath("no_entry"));
    auto st = plugin::checkLibraryImage({reinterpret_cast<const uint8_t*>(noEntry.data()), size_t(noEntry.size())}, "tessera_plugin_v1");
    QVERIFY(!st.ok());
    QVERIFY2(st.error().message.find("no entry point tessera_plugin_v1()") != std::string::npos, st.error().message.c_str());
    // The well-known SHA-256 of "abc" (FIPS 180-2, appendix B.1).
    const uint8_t abc[] = {'a', 'b', 'c'};
    QCOMPARE(plugin::sha256Hex(abc), std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  }

  // A project's plugins/ folder loads only when trusted: not in the list, nothing loads and the prompt is asked
  // with the files and their hashes; a trusted entry with another hash asks again; once the list holds the
  // folder with the right hash, the plugin loads without a question.
  void projectPluginsNeedTrust() {
    QTemporaryDir home, tmp;
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());
    qunsetenv("TESSERA_PLUGIN_PATH");
    fs::path proj = fs::path(tmp.path().toStdString()) / "proj";
    copyFile(TSR_PROBE_PLUGIN, proj / "plugins" / "trust_probe.so");
    const std::string hash = qtSha256(readBytes(TSR_PROBE_PLUGIN));
    auto dirs = plugin::searchDirs(proj.string(), "");

    auto records = plugin::loadPlugins(dirs);
    QCOMPARE(records.size(), size_t(1));
    QVERIFY(!records[0].loaded && records[0].untrusted);
    QVERIFY2(records[0].error.find("not trusted (the project " + plugin::trustFolderName(proj.string()) +
                                   " is not in the trust list)") == 0, records[0].error.c_str());
    QCOMPARE(records[0].sha256, hash);
    QVERIFY(!ops::registry().find("trust_probe_op"));

    std::vector<plugin::TrustRequest> asked;
    auto no = [&](const plugin::TrustRequest& r) { asked.push_back(r); return false; };
    plugin::loadPlugins(dirs, no);
    QCOMPARE(asked.size(), size_t(1));
    QCOMPARE(asked[0].files, (std::vector<plugin::PluginFile>{{"trust_probe.so", hash}}));
    QVERIFY(!ops::registry().find("trust_probe_op"));

    plugin::TrustList wrong;
    wrong.trust(plugin::trustFolderName(proj.string()), {{"trust_probe.so", std::string(64, 'a')}});
    QVERIFY(wrong.save(plugin::TrustList::defaultPath()).ok());
    plugin::loadPlugins(dirs, no);
    QCOMPARE(asked.size(), size_t(2));
    QVERIFY2(asked[1].reason.find("trust_probe.so changed since the project was trusted") == 0, asked[1].reason.c_str());
    QVERIFY(!ops::registry().find("trust_probe_op"));

    QVERIFY(plugin::rememberTrust(asked[0]).ok());
    records = plugin::loadPlugins(dirs, no);
    QCOMPARE(asked.size(), size_t(2));
    QCOMPARE(records.size(), size_t(1));
    QVERIFY2(records[0].loaded, records[0].error.c_str());
    QCOMPARE(records[0].sha256, hash);
    QVERIFY(ops::registry().find("trust_probe_op"));
    // One record for the file: the untrusted tries were replaced by the load.
    int recordsOfIt = 0;
    for (const auto& r : plugin::pluginRecords()) recordsOfIt += r.path == records[0].path;
    QCOMPARE(recordsOfIt, 1);
  }

  // A library that changes between the question and the load (here: while the prompt is answered) is not
  // loaded: what was trusted is the hash the prompt was shown.
  void libraryChangedAfterTrustIsNotLoaded() {
    QTemporaryDir home, tmp;
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());
    fs::path lib = fs::path(tmp.path().toStdString()) / "proj" / "plugins" / "trust_probe.so";
    copyFile(TSR_PROBE_PLUGIN, lib);
    auto swap = [&](const plugin::TrustRequest&) {
      writeBytes(lib, readBytes(TSR_PROBE_PLUGIN) + QByteArray(8, '\0'));
      return true;
    };
    auto records = plugin::loadPlugins(plugin::searchDirs((lib.parent_path().parent_path()).string(), ""), swap);
    QCOMPARE(records.size(), size_t(1));
    QVERIFY(!records[0].loaded);
    QVERIFY2(records[0].error.find("the library changed after it was trusted") == 0, records[0].error.c_str());
    QCOMPARE(records[0].sha256, qtSha256(readBytes(lib.string())));
  }

  // The trust list's file: written and read back; mistakes named with the file and line.
  void trustListFile() {
    plugin::TrustList list;
    list.trust("/home/me/a b", {{"x.so", std::string(64, '1')}, {"y.so", std::string(64, '2')}});
    list.trust("/p", {{"z.so", std::string(64, 'f')}});
    list.trust("/home/me/a b", {{"x.so", std::string(64, '3')}});
    list.trust("/home/j\xc3\xb6rg/# \"q\" 'x'", {{"\xc3\xa9.so", std::string(64, '4')}});  // non-ASCII and quotes in strings
    auto back = plugin::TrustList::parse(list.toToml(), "trusted.toml");
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
    QCOMPARE(back->projects().size(), size_t(3));
    QCOMPARE(back->projects()[2].folder, std::string("/home/j\xc3\xb6rg/# \"q\" 'x'"));
    QCOMPARE(back->projects()[0].folder, std::string("/home/me/a b"));
    QCOMPARE(back->projects()[0].plugins.size(), size_t(2));
    QVERIFY(back->whyUntrusted("/home/me/a b", {{"x.so", std::string(64, '3')}}).empty());
    QVERIFY(!back->whyUntrusted("/home/me/a b", {{"x.so", std::string(64, '1')}}).empty());
    QVERIFY(!back->whyUntrusted("/home/me/a b", {{"new.so", std::string(64, '1')}}).empty());
    QVERIFY(!back->whyUntrusted("/q", {}).empty());
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
                         Bad{"[[project]]\nfolder = 6\"/h\xd2\x86\"\n", "trusted.toml:2:14: a non-ASCII byte"},
                         // and asserts on this one.
                         Bad{"# x\n  [*o]\n", "trusted.toml:2:3: a table header must begin with a key"},
                         Bad{"[[[project]]\n", "trusted.toml:1:1: a table header must begin with a key"}}) {
      auto r = plugin::TrustList::parse(b.text, "trusted.toml");
      QVERIFY2(!r.ok(), b.text);
      QVERIFY2(r.error().message.find(b.error) == 0, r.error().message.c_str());
    }
  }

  void missingFileIsReported() {
    plugin::PluginRecord r = plugin::loadPlugin("/nonexistent/plugin.so");
    QVERIFY(!r.loaded);
    QVERIFY2(r.error.find("/nonexistent/plugin.so") != std::string::npos, r.error.c_str());
  }

  // The folders in order: PROJECT/plugins, TESSERA_PLUGIN_PATH's entries, the user's folder, the bundled one.
  void searchOrder() {
    QTemporaryDir home;
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());
    qputenv("TESSERA_PLUGIN_PATH", "/a:/b::/c");
    auto dirs = plugin::searchDirs("/proj", "/bundled");
    std::vector<std::string> got;
    for (const auto& d : dirs) got.push_back(d.dir + " " + d.origin);
    std::vector<std::string> want = {"/proj/plugins project", "/a TESSERA_PLUGIN_PATH", "/b TESSERA_PLUGIN_PATH",
                                     "/c TESSERA_PLUGIN_PATH", (home.path() + "/tessera/plugins user").toStdString(),
                                     "/bundled bundled"};
    QCOMPARE(got, want);
    qunsetenv("TESSERA_PLUGIN_PATH");
  }

  // The first folder wins: the project's copy of swiglu loads, the one on TESSERA_PLUGIN_PATH is skipped as a
  // duplicate naming the loaded one; a broken plugin beside them is reported and the others still load; a file
  // reached twice (here the same folder twice) is loaded once.
  void discoveryLoadsInOrderAndSkipsDuplicates() {
    QTemporaryDir tmp;
    fs::path root(tmp.path().toStdString());
    copyFile(examplePath("swiglu"), root / "proj" / "plugins" / "swiglu.so");
    copyFile(examplePath("swiglu"), root / "env" / "swiglu.so");
    copyFile(brokenPath("bad_rules"), root / "env" / "a_bad_rules.so");
    copyFile(examplePath("op_stats"), root / "env" / "op_stats.so");
    std::ofstream(root / "env" / "README.md") << "not a library";
    QTemporaryDir home;
    qputenv("XDG_CONFIG_HOME", home.path().toUtf8());
    std::string env = (root / "env").string();
    qputenv("TESSERA_PLUGIN_PATH", QByteArray::fromStdString(env + ":" + env));
    auto records = plugin::loadPlugins(plugin::searchDirs((root / "proj").string(), ""), yes);
    qunsetenv("TESSERA_PLUGIN_PATH");
    std::vector<std::string> got;
    for (const auto& r : records)
      got.push_back(fs::path(r.path).filename().string() + (r.loaded ? " loaded" : " skipped"));
    std::vector<std::string> want = {"swiglu.so loaded", "a_bad_rules.so skipped", "op_stats.so loaded",
                                     "swiglu.so skipped"};
    QCOMPARE(got, want);
    QCOMPARE(records[0].origin, std::string("project"));
    QCOMPARE(records[0].ops, std::vector<std::string>{"swiglu"});
    QCOMPARE(records[0].families, std::vector<std::string>{"gpt2_swiglu"});
    QCOMPARE(records[2].passes, std::vector<std::string>{"op_stats at end"});
    QVERIFY2(records[3].error.find("already loaded from " + records[0].path) != std::string::npos, records[3].error.c_str());
    QVERIFY(ops::registry().find("swiglu"));
    QVERIFY(project::findModelFamily("gpt2_swiglu"));
    // Its op gets a code after the core ops.
    QVERIFY(static_cast<uint32_t>(ops::registry().find("swiglu")->code) >= ir::kNumCoreOps);
  }

  // op_stats runs at the end of the compiler pipeline, changes nothing, and its report lands in the dump folder
  // with counts that agree with our own count of the graph's nodes.
  void opStatsReportInTheDump() {
    if (!passes::registeredPasses().size()) {
      plugin::PluginRecord r = plugin::loadPlugin(examplePath("op_stats"));
      QVERIFY2(r.loaded, r.error.c_str());
    }
    auto pm = passes::compilerPipeline();
    QCOMPARE(QString::fromStdString(pm.describe().back()), QString("op_stats"));
    // f(x, w) = tanh(x @ w) + x @ w: two dot_generals that CSE merges into one.
    auto cg = makeGraph([](const std::vector<Array>& a) {
      Array y = matmul(a[0], a[1]);
      return std::vector<Array>{tanh(y) + matmul(a[0], a[1])};
    }, {Aval{Shape{4, 8}, DType::F32}, Aval{Shape{8, 3}, DType::F32}});
    QVERIFY(cg.ok());
    QTemporaryDir dir;
    auto r = passes::dumpPipeline(cg->graph, dir.path().toStdString(), ops::registry());
    QVERIFY2(r.ok(), r.ok() ? "" : r.error().message.c_str());
    fs::path file = fs::path(dir.path().toStdString()) / "op_stats.txt";
    QVERIFY(fs::exists(file));
    auto read = data::readFile(file.string());
    QVERIFY2(read.ok(), read.ok() ? "" : read.error().message.c_str());
    const std::string& text = *read;
    std::map<std::string, int> count;
    for (const ir::Node& n : r->graph.nodes()) count[ops::registry().get(n.op).name]++;
    QCOMPARE(count["dot_general"], 1);
    QVERIFY2(text.find(std::to_string(r->graph.nodes().size()) + " nodes") != std::string::npos, text.c_str());
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
        QCOMPARE(family, std::string("contraction"));
        QCOMPARE(nodes, 1);
        found = true;
      }
    QVERIFY2(found, text.c_str());
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestPluginLoader)
#include "test_plugin_loader.moc"
