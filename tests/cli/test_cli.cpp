// The tessera command line, run as a user runs it.
#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

namespace {

struct Run {
  int exitCode = -1;
  bool crashed = true;
  QString out, err;
};

Run tessera(const QStringList& args) {
  QProcess p;
  p.start(TESSERA_BIN, args);
  p.waitForFinished(60000);
  Run r;
  r.crashed = p.exitStatus() != QProcess::NormalExit;
  r.exitCode = p.exitCode();
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

}  // namespace

class TestCli : public QObject {
  Q_OBJECT
 private slots:
  void version() {
    Run r = tessera({"--version"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.startsWith("tessera "));
  }

  void opsJsonListsEveryOpWithCoreRules() {
    Run r = tessera({"ops", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonParseError err;
    QJsonDocument doc = QJsonDocument::fromJson(r.out.toUtf8(), &err);
    QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
    QJsonArray ops = doc.array();
    QVERIFY2(ops.size() >= 45, qPrintable(QString::number(ops.size())));
    QSet<QString> names;
    for (const auto& v : ops) {
      QJsonObject op = v.toObject();
      QJsonObject rules = op["rules"].toObject();
      QString name = op["name"].toString();
      names.insert(name);
      QVERIFY2(rules["infer"].toBool() && rules["cost"].toBool() && rules["cpu"].toBool(), qPrintable(name));
      QVERIFY(rules.contains("vjp") && rules.contains("batch") && rules.contains("shard") && rules.contains("cuda"));
    }
    for (const char* required : {"dot_general", "reduce_sum", "broadcast_in_dim", "gather", "scatter_add",
                                 "threefry2x32", "dynamic_update_slice", "iota", "select", "convert"})
      QVERIFY2(names.contains(required), required);
  }

  void irExampleMlp() {
    Run r = tessera({"ir", "--example", "mlp"});
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.out.count(QRegularExpression("= dot_general\\(")), 4);
    QCOMPARE(r.out.count(QRegularExpression("= relu\\(")), 3);
    QVERIFY(r.out.contains("f32[8,784]"));
    QVERIFY(r.out.contains("-> (f32[8,10])"));
    QVERIFY(r.out.contains("loc(\"layers.3\""));
  }

  // Twelve identical layers: 12 copies unrolled, one scan body with --example mlp12-scan; the last line counts.
  void irExamplesMlp12AndScan() {
    Run unrolled = tessera({"ir", "--example", "mlp12"});
    QCOMPARE(unrolled.exitCode, 0);
    QCOMPARE(unrolled.out.count(QRegularExpression("= dot_general\\(")), 12);
    QVERIFY2(unrolled.out.endsWith("// 12 dot_general, 48 nodes\n"), qPrintable(unrolled.out.right(80)));
    Run scanned = tessera({"ir", "--example", "mlp12-scan"});
    QCOMPARE(scanned.exitCode, 0);
    QCOMPARE(scanned.out.count(QRegularExpression("= dot_general\\(")), 1);
    QVERIFY(scanned.out.contains("= scan(%0, %1, %2) {length=12,"));
    QVERIFY2(scanned.out.endsWith("// 1 dot_general, 5 nodes (4 of them in nested graphs)\n"),
             qPrintable(scanned.out.right(80)));
    QTemporaryDir dir;
    QString path = dir.filePath("mlp12_scan.tir");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(scanned.out.toUtf8());
    f.close();
    Run again = tessera({"ir", "--parse", path});
    QCOMPARE(again.exitCode, 0);
    QCOMPARE(again.out, scanned.out);
  }

  void irRoundTripsThroughAFile() {
    Run r = tessera({"ir", "--example", "mlp", "--batch", "4"});
    QCOMPARE(r.exitCode, 0);
    QTemporaryDir dir;
    QString path = dir.filePath("mlp.tir");
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(r.out.toUtf8());
    f.close();
    Run again = tessera({"ir", "--parse", path});
    QCOMPARE(again.exitCode, 0);
    QCOMPARE(again.out, r.out);
  }

  void malformedIrIsAMessageNotACrash() {
    QTemporaryDir dir;
    const char* texts[] = {
        "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = nosuchop(%0) : f32[2]\n  return %1\n}\n",
        "func @f(%0: f32[2]) -> (f32[2]) {\n  %1 = add(%0, %9) : f32[2]\n  return %1\n}\n",
        "func @f(%0: f32[2] -> (f32[2]) {\n",
        "garbage",
        "",
    };
    int i = 0;
    for (const char* t : texts) {
      QString path = dir.filePath(QString("bad%1.tir").arg(i++));
      QFile f(path);
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(t);
      f.close();
      Run r = tessera({"ir", "--parse", path});
      QVERIFY2(!r.crashed, t);
      QCOMPARE(r.exitCode, 1);
      QVERIFY2(r.err.contains(path), qPrintable(r.err));
    }
    Run missing = tessera({"ir", "--parse", dir.filePath("absent.tir")});
    QCOMPARE(missing.exitCode, 1);
    QVERIFY(missing.err.contains("cannot read"));
  }

  void badArgumentsAreMessages() {
    Run r = tessera({"ir", "--example", "nosuch"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("unknown example"));
    Run b = tessera({"ir", "--batch", "0"});
    QCOMPARE(b.exitCode, 1);
    QVERIFY(b.err.contains("positive"));
  }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
