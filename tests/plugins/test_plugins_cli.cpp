// Plugins from the command line, run as a user runs it: `tessera plugins` lists the three examples of the build
// tree with their versions, paths and registrations; broken plugins on TESSERA_PLUGIN_PATH are reported with
// their path and reason while every command still runs; the op_stats report lands in a compile dump; a project
// of the swiglu plugin's family trains.
#include <QtTest>

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

Run tessera(const QStringList& args, const QString& pluginPath = QString()) {
  QProcess p;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.remove("TESSERA_PLUGIN_PATH");
  if (!pluginPath.isEmpty()) env.insert("TESSERA_PLUGIN_PATH", pluginPath);
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
