// Plugins from the command line, run as a user runs it: `tessera plugins` lists the three examples of the build
// tree with their versions, paths and registrations; broken plugins on TESSERA_PLUGIN_PATH are reported with
// their path and reason while every command still runs; the op_stats report lands in a compile dump; a project
// of the swiglu plugin's family trains.
#include <QtTest>

#include <QCryptographicHash>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

namespace {

struct Run {
  int exitCode = -1;
  QString out, err;
};

Run tessera(const QStringList& args, const QString& pluginPath = QString(), const QString& configHome = QString()) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove("TESSERA_PLUGIN_PATH");
  if (!pluginPath.isEmpty()) env.insert("TESSERA_PLUGIN_PATH", pluginPath);
  if (!configHome.isEmpty()) env.insert("XDG_CONFIG_HOME", configHome);
  p.setProcessEnvironment(env);
  p.start(TESSERA_BIN, args);
  p.waitForFinished(300000);
  Run r;
  r.exitCode = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

QString readFile(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
}

QByteArray readBytes(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

bool writeBytes(const QString& path, const QByteArray& bytes) {
  QDir().mkpath(QFileInfo(path).absolutePath());
  QFile f(path);
  return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(bytes) == bytes.size();
}

QString sha256(const QByteArray& bytes) {
  return QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex());
}

// `tessera plugins PROJECT --json ...`: the records by file path.
QMap<QString, QJsonObject> pluginsByPath(const Run& r) {
  QMap<QString, QJsonObject> out;
  for (const auto& v : QJsonDocument::fromJson(r.out.toUtf8()).array()) out[v.toObject()["path"].toString()] = v.toObject();
  return out;
}

}  // namespace

class TestPluginsCli : public QObject {
  Q_OBJECT
 private slots:
  void listsTheExamples() {
    Run r = tessera({"plugins", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonArray plugins = QJsonDocument::fromJson(r.out.toUtf8()).array();
    QMap<QString, QJsonObject> byName;
    for (const auto& v : plugins) byName[v.toObject()["name"].toString()] = v.toObject();
    QStringList expected = {"swiglu", "op_stats"};
#ifdef TSR_HAVE_PANEL_PLUGIN
    expected << "op_mix_panel";
#endif
    for (const QString& name : expected) {
      QVERIFY2(byName.contains(name), qPrintable(r.out));
      QVERIFY2(byName[name]["loaded"].toBool(), qPrintable(byName[name]["error"].toString()));
      QCOMPARE(byName[name]["version"].toString(), QString("1.0.0"));
      QCOMPARE(byName[name]["path"].toString(), QString(TSR_PLUGIN_DIR "/%1.so").arg(name));
      QCOMPARE(byName[name]["origin"].toString(), QString("bundled"));
    }
    QCOMPARE(byName["swiglu"]["ops"].toArray().first().toString(), QString("swiglu"));
    QCOMPARE(byName["swiglu"]["families"].toArray().first().toString(), QString("gpt2_swiglu"));
    QCOMPARE(byName["op_stats"]["passes"].toArray().first().toString(), QString("op_stats at end"));
    Run text = tessera({"plugins"});
    QCOMPARE(text.exitCode, 0);
    QVERIFY2(text.out.contains("swiglu 1.0.0  " TSR_PLUGIN_DIR "/swiglu.so (bundled)"), qPrintable(text.out));
    QVERIFY(text.out.contains("ops: swiglu") && text.out.contains("model families: gpt2_swiglu"));
  }

  // Broken plugins first in the search order: each is named with its reason, the good ones still load, and
  // other commands run (and warn on stderr).
  void brokenPluginsAreReportedAndCommandsRun() {
    Run r = tessera({"plugins"}, TSR_BROKEN_PLUGIN_DIR);
    QCOMPARE(r.exitCode, 0);
    for (const char* why : {"plugin API version 99", "no entry point tessera_plugin_v1()", "undefined symbol",
                            "init failed: no device found", "fails the rule-table check", "init threw",
                            "built against Tessera 0.0.0-other", "op 'add' is already registered"})
      QVERIFY2(r.out.contains(why), qPrintable(why + QString("\n") + r.out));
    QVERIFY(r.out.contains(TSR_BROKEN_PLUGIN_DIR "/wrong_version.so"));
    QVERIFY(r.out.contains("ops: swiglu"));
    Run ops = tessera({"ops"}, TSR_BROKEN_PLUGIN_DIR);
    QCOMPARE(ops.exitCode, 0);
    QVERIFY(ops.out.contains("swiglu"));
    QVERIFY(!ops.out.contains("broken_good_op"));
    QVERIFY2(ops.err.contains("tessera: plugin " TSR_BROKEN_PLUGIN_DIR "/bad_rules.so skipped: op broken_bad_op"),
             qPrintable(ops.err));
  }

  // A damaged swiglu.so (cut short) and a library without the entry point named op_stats.so, in a project's
  // trusted plugins/ folder, are reported with their path and reason, and do not shadow the bundled plugins of
  // those names: the bundled swiglu and op_stats load. Each record carries the library's SHA-256.
  void damagedPluginsDoNotShadowTheBundledOnes() {
    QTemporaryDir dir, home;
    QByteArray swiglu = readBytes(TSR_PLUGIN_DIR "/swiglu.so");
    QVERIFY(writeBytes(dir.filePath("plugins/swiglu.so"), swiglu.left(swiglu.size() * 3 / 4)));
    QVERIFY(QFile::copy(TSR_BROKEN_PLUGIN_DIR "/no_entry.so", dir.filePath("plugins/op_stats.so")));
    Run r = tessera({"plugins", dir.path(), "--json", "--trust-plugins"}, QString(), home.path());
    QCOMPARE(r.exitCode, 0);
    auto byPath = pluginsByPath(r);
    QString damaged = QFileInfo(dir.filePath("plugins/swiglu.so")).canonicalFilePath();
    QString noEntry = QFileInfo(dir.filePath("plugins/op_stats.so")).canonicalFilePath();
    QVERIFY2(byPath.contains(damaged) && byPath.contains(noEntry), qPrintable(r.out));
    QVERIFY(!byPath[damaged]["loaded"].toBool());
    QVERIFY2(byPath[damaged]["error"].toString().startsWith("damaged library: truncated"), qPrintable(r.out));
    QCOMPARE(byPath[damaged]["sha256"].toString(), sha256(swiglu.left(swiglu.size() * 3 / 4)));
    QVERIFY(!byPath[noEntry]["loaded"].toBool());
    QVERIFY2(byPath[noEntry]["error"].toString().contains("no entry point tessera_plugin_v1()"), qPrintable(r.out));
    for (const char* name : {"swiglu", "op_stats"}) {
      QString bundled = QString(TSR_PLUGIN_DIR "/%1.so").arg(name);
      QVERIFY2(byPath.contains(bundled) && byPath[bundled]["loaded"].toBool(), qPrintable(r.out));
      QCOMPARE(byPath[bundled]["sha256"].toString(), sha256(readBytes(bundled)));
    }
  }

  // Native code in a project's plugins/ folder: not loaded without trust (reported, the command runs); loaded
  // with --trust-plugins for one command; `tessera plugins PROJECT --trust` puts the folder and the library's
  // SHA-256 in the trust list, after which it loads without the flag; a changed library needs trust again.
  void projectPluginsNeedTrust() {
    QTemporaryDir dir, home;
    QString lib = dir.filePath("plugins/trust_probe.so");
    QVERIFY(writeBytes(lib, readBytes(TSR_PROBE_PLUGIN)));
    QString canonical = QFileInfo(lib).canonicalFilePath();
    Run r = tessera({"plugins", dir.path(), "--json"}, QString(), home.path());
    QCOMPARE(r.exitCode, 0);
    auto byPath = pluginsByPath(r);
    QVERIFY2(byPath.contains(canonical), qPrintable(r.out));
    QVERIFY(!byPath[canonical]["loaded"].toBool() && !byPath[canonical]["trusted"].toBool());
    QVERIFY2(byPath[canonical]["error"].toString().startsWith("not trusted"), qPrintable(r.out));
    // The flag may stand after any subcommand.
    Run ops = tessera({"ops", "--trust-plugins"}, QString(), home.path());
    QCOMPARE(ops.exitCode, 0);
    r = tessera({"plugins", dir.path(), "--json", "--trust-plugins"}, QString(), home.path());
    QVERIFY2(pluginsByPath(r)[canonical]["loaded"].toBool(), qPrintable(r.out));
    QVERIFY(!QFile::exists(home.filePath("tessera/trusted.toml")));  // once only: nothing remembered

    r = tessera({"plugins", dir.path(), "--trust"}, QString(), home.path());
    QCOMPARE(r.exitCode, 0);
    QString list = readFile(home.filePath("tessera/trusted.toml"));
    QVERIFY2(list.contains(QFileInfo(dir.path()).canonicalFilePath()), qPrintable(list));
    QVERIFY2(list.contains(sha256(readBytes(TSR_PROBE_PLUGIN))), qPrintable(list));
    r = tessera({"plugins", dir.path(), "--json"}, QString(), home.path());
    QVERIFY2(pluginsByPath(r)[canonical]["loaded"].toBool(), qPrintable(r.out));

    QVERIFY(writeBytes(lib, readBytes(TSR_PROBE_PLUGIN) + QByteArray(16, '\0')));  // still a good library
    r = tessera({"plugins", dir.path(), "--json"}, QString(), home.path());
    QJsonObject changed = pluginsByPath(r)[canonical];
    QVERIFY(!changed["loaded"].toBool());
    QVERIFY2(changed["error"].toString().contains("trust_probe.so changed since the project was trusted"), qPrintable(r.out));
    Run train = tessera({"model-info", dir.path()}, QString(), home.path());
    QVERIFY2(train.err.contains("tessera: plugin " + canonical + " skipped: not trusted"), qPrintable(train.err));
  }

  // The report's swiglu row against the optimised graph that `tessera compile` prints: one per layer forward.
  void opStatsReportInTheDump() {
    QTemporaryDir dir;
    Run r = tessera({"compile", TSR_SOURCE_DIR "/sample_projects/gpt2_swiglu", "--dump", dir.path()});
    QCOMPARE(r.exitCode, 0);
    int inGraph = static_cast<int>(r.out.count(QRegularExpression("= swiglu\\(")));
    QCOMPARE(inGraph, 2);
    QVERIFY2(r.out.contains("op_stats"), qPrintable(r.out.right(2000)));
    QString stats = readFile(dir.filePath("op_stats.txt"));
    QRegularExpressionMatch m = QRegularExpression("\\nswiglu +elementwise +(\\d+) ").match(stats);
    QVERIFY2(m.hasMatch(), qPrintable(stats));
    QCOMPARE(m.captured(1).toInt(), inGraph);
  }

  // gpt2_swiglu from the command line: 20 steps on a copy of the project (its corpus's first 30 kB).
  void trainsFromTheCli() {
    QTemporaryDir dir;
    QString toml = readFile(TSR_SOURCE_DIR "/sample_projects/gpt2_swiglu/project.toml");
    toml.replace("path = \"../gpt2_mini/data/corpus.txt\"", "path = \"corpus.txt\"");
    QFile corpus(dir.filePath("corpus.txt"));
    QVERIFY(corpus.open(QIODevice::WriteOnly));
    corpus.write(readFile(TSR_SOURCE_DIR "/sample_projects/gpt2_mini/data/corpus.txt").left(30000).toUtf8());
    corpus.close();
    QFile project(dir.filePath("project.toml"));
    QVERIFY(project.open(QIODevice::WriteOnly));
    project.write(toml.toUtf8());
    project.close();
    Run r = tessera({"train", dir.path(), "--steps", "20", "--sample", "0"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("gpt2_swiglu with"), qPrintable(r.out));
    QVERIFY(r.out.contains("step    20/20"));
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestPluginsCli)
#include "test_plugins_cli.moc"
