// Input a hostile (or careless) user gives the tessera command, each case one that used to kill it by a signal
// (SIGFPE, SIGABRT from an uncaught exception, a hang): now each ends with a message that names what is wrong
// and a non-zero exit status. The projects are the files in tests/cli/hostile, copied to a temporary folder.
#include <QtTest>

#include "tests/test_main.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>

#include <sys/resource.h>

#include <cmath>

#include <sqlite3.h>

#include "engine/store/run_store.h"
#include "engine/train/safetensors.h"
#include "tests/cli/cli_test_util.h"

using namespace tsr::test;

namespace {

const QString kHostile = QStringLiteral(TSR_HOSTILE);

// tessera with extra environment and, when given, a limit on its address space (as `ulimit -v` sets it).
Run tesseraWith(const QStringList& args, const QStringList& env = {}, rlim_t addressSpace = 0) {
  QProcess p;
  QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
  for (const QString& kv : env) e.insert(kv.section('=', 0, 0), kv.section('=', 1));
  p.setProcessEnvironment(e);
  if (addressSpace)
    p.setChildProcessModifier([addressSpace] {
      rlimit r{addressSpace, addressSpace};
      ::setrlimit(RLIMIT_AS, &r);
    });
  p.start(TESSERA_BIN, args);
  Run r;
  if (!p.waitForFinished(240000)) {
    p.kill();
    p.waitForFinished();
    r.err = "timed out (killed)";
    return r;
  }
  r.crashed = p.exitStatus() != QProcess::NormalExit;
  r.exitCode = p.exitCode();
  r.out = QString::fromUtf8(p.readAllStandardOutput());
  r.err = QString::fromUtf8(p.readAllStandardError());
  return r;
}

// A copy of a reproducer project in `dir`/NAME; returns its folder.
QString copyHostile(const QTemporaryDir& dir, const QString& name) {
  QString to = dir.filePath(name);
  QDir().mkpath(to);
  QFile::copy(kHostile + "/" + name + "/project.toml", to + "/project.toml");
  return to;
}

// Exited by itself with status 1 and a message holding every part.
void failsWith(const Run& r, const QStringList& parts) {
  QVERIFY2(!r.crashed, qPrintable("died by a signal: " + r.err));
  QVERIFY2(r.exitCode == 1, qPrintable(QString("exit %1: %2").arg(r.exitCode).arg(r.err)));
  for (const QString& part : parts) QVERIFY2(r.err.contains(part), qPrintable(r.err + "\nlacks: " + part));
}

QByteArray readAll(const QString& path) {
  QFile f(path);
  return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

}  // namespace

class TestHostileInput : public QObject {
  Q_OBJECT
 private slots:
  // mlp_sharding with [mesh] shape = [8], axes = ["data"]; its rules still name 'model' (was SIGFPE).
  void meshWithoutAnAxisTheRulesName() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "mesh_without_rule_axis");
    failsWith(tessera({"shard", "plan", p}),
              {"[sharding] rule 'layers\\.0\\.weight'", "axis 'model' is not in Mesh('data': 8)"});
    failsWith(tesseraWith({"train", p, "--steps", "1"}, {"TESSERA_CPU_DEVICES=8"}),
              {"sharding rule 'layers\\.0\\.weight'", "axis 'model' is not in Mesh('data': 8)"});
  }

  // A rule whose PartitionSpec has 100 dims for a rank-2 weight: an error, not a silent replication.
  void specOfMoreDimsThanTheArray() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "spec_100_dims");
    failsWith(tessera({"shard", "plan", p}),
              {"rule 'layers\\.0\\.weight' matches params.layers.0.weight [784,1024]", "has 100 dims"});
    failsWith(tesseraWith({"train", p, "--steps", "1"}, {"TESSERA_CPU_DEVICES=8"}),
              {"layers.0.weight [784,1024]", "has 100 dims"});
  }

  // shape = [9223372036854775807, 2]: the device count overflowed (was SIGABRT, std::length_error).
  void meshShapeThatOverflows() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "mesh_huge");
    for (const char* command : {"train", "compile"})
      failsWith(tessera({command, p}), {"project.toml:", "'shape' is 9223372036854775807, above the limit of 1048576"});
    failsWith(tessera({"shard", "show", "--mesh", "9223372036854775807x2", "--shape", "8,8"}),
              {"mesh: 'mesh shape' is 9223372036854775807 x 2, more than the limit of 1048576"});
  }

  // n_layer = 100000 (was SIGABRT, std::bad_alloc).
  void tooManyLayers() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "n_layer_huge");
    for (const char* command : {"train", "model-info", "compile"})
      failsWith(tessera({command, p}), {"project.toml:5: 'n_layer' is 100000, above the limit of 4096"});
  }

  // shard show --width 2147483647 (was SIGABRT, std::bad_alloc).
  void drawingWiderThanAnyScreen() {
    failsWith(tessera({"shard", "show", "--mesh", "2x2", "--shape", "8,8", "--spec", "a,b", "--width", "2147483647"}),
              {"'--width' is 2147483647, above the limit of 4096"});
    Run ok = tessera({"shard", "show", "--mesh", "2x2", "--shape", "8,8", "--spec", "a,b", "--width", "40"});
    QCOMPARE(ok.exitCode, 0);
  }

  // [data] path = "/dev/zero": read whole, it never ended (was SIGABRT, std::bad_alloc).
  void corpusThatNeverEnds() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "data_dev_zero");
    failsWith(tessera({"train", p}), {"[data] path /dev/zero is not a regular file"});
  }

  // The digit source's prototypes (1 GiB) under a 2 GiB address space: its error came from a constructor that
  // ran outside capture() (was SIGABRT, uncaught tsr::Exception), and OpenBLAS's threads must not hang it.
  void dataSourceThatCannotAllocate() {
#if defined(__SANITIZE_ADDRESS__) || (defined(__has_feature) && __has_feature(address_sanitizer))
    // AddressSanitizer reserves terabytes of address space for its shadow when the program starts, which a limit
    // on the address space forbids: an instrumented tessera cannot start under one at all.
    QSKIP("AddressSanitizer cannot run under a limit on the address space (its shadow memory)");
#endif
    QTemporaryDir dir;
    QString p = copyHostile(dir, "digits_too_large");
    failsWith(tesseraWith({"train", p, "--db", dir.filePath("runs.db")}, {}, rlim_t(2) << 30),
              {"out of memory"});
  }

  // A step whose planned arena (2.3 GiB of activations) exceeds a 2 GiB address space: a warning before its
  // first run names both sizes, and the allocation that follows fails with a message, not the OOM killer.
  void arenaLargerThanMemory() {
#if defined(__SANITIZE_ADDRESS__) || (defined(__has_feature) && __has_feature(address_sanitizer))
    QSKIP("AddressSanitizer cannot run under a limit on the address space (its shadow memory)");
#endif
    QTemporaryDir dir;
    QString p = copyHostile(dir, "arena_too_large");
    failsWith(tesseraWith({"train", p, "--db", dir.filePath("runs.db")}, {}, rlim_t(2) << 30),
              {"warning: 'train_step' plans 2.25 GiB for its intermediates, more than the", "out of memory"});
  }

  // A data file beside the project: read, but the run says so and records it.
  void corpusOutsideTheProject() {
    QTemporaryDir dir;
    QString p = copyHostile(dir, "data_outside_project");
    QDir().mkpath(dir.filePath("outside"));
    QByteArray corpus;
    for (int i = 0; i < 60; ++i) corpus += "Permission is hereby granted, free of charge, to any person.\n";
    writeFile(dir.filePath("outside/corpus.txt"), corpus);
    Run r = tessera({"train", p, "--sample", "0"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const QString outside = QFileInfo(dir.filePath("outside/corpus.txt")).canonicalFilePath();
    QVERIFY2(r.out.contains("warning: ") && r.out.contains(outside + ", outside the project folder"),
             qPrintable(r.out + r.err));
    auto db = tsr::store::RunStore::open((p + "/runs.db").toStdString());
    QVERIFY(db.ok());
    auto params = db->params(1);
    QVERIFY(params.ok());
    QCOMPARE(QString::fromStdString(params->at("data.outside_project")), outside);
  }

  // A kernel name that is not UTF-8 (a damaged or foreign store) in `runs export-trace` (was SIGABRT, nlohmann
  // type_error 316): written with U+FFFD in its place.
  void kernelNameThatIsNotUtf8() {
    QTemporaryDir dir;
    std::string path = dir.filePath("runs.db").toStdString();
    {
      auto db = tsr::store::RunStore::open(path);
      QVERIFY(db.ok());
      auto run = db->createRun("r", "p", "");
      auto profile = db->createProfile(*run, "profile", 1, 1);
      QVERIFY(profile.ok());
      QVERIFY(db->addKernelEvents(*profile, {{"cpu:0", 0, "fusion\xff\xfe.3", 3, 100, 50, 1e3, 64}}).ok());
    }
    QString out = dir.filePath("trace.json");
    Run r = tessera({"runs", "--db", QString::fromStdString(path), "export-trace", "1", "-o", out});
    QVERIFY2(!r.crashed && r.exitCode == 0, qPrintable(r.err));
    QJsonParseError err;
    QJsonDocument doc = QJsonDocument::fromJson(readAll(out), &err);
    QVERIFY2(err.error == QJsonParseError::NoError, qPrintable(err.errorString()));
    bool found = false;
    for (const auto& e : doc.object()["traceEvents"].toArray())
      found |= e.toObject()["name"].toString() == QString::fromUtf8("fusion\xEF\xBF\xBD\xEF\xBF\xBD.3");
    QVERIFY(found);
  }

  // `runs list` and `runs show` on an empty file and on another program's database: "not a Tessera run store",
  // and the file is left byte for byte as it was (it used to get our schema).
  void readOnlyCommandsWriteNothing() {
    QTemporaryDir dir;
    QString empty = dir.filePath("empty.db");
    writeFile(empty, "");
    QString foreign = dir.filePath("foreign.db");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(foreign.toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine')", nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    for (const QString& file : {empty, foreign}) {
      QByteArray before = readAll(file);
      for (const QStringList& command : {QStringList{"list"}, QStringList{"show", "1"}, QStringList{"export", "1"}}) {
        failsWith(tessera(QStringList{"runs", "--db", file} + command), {file, "not a Tessera run store"});
        QCOMPARE(readAll(file), before);
      }
    }
    // The empty file is what train takes for a new store: said so, not as if it were another program's.
    failsWith(tessera({"runs", "--db", empty, "list"}),
              {empty + ": not a Tessera run store yet (an empty file: no run has been written to it; tessera train "
                       "makes it one)"});
  }

  // A store damaged on disk: every read command ends with SQLite's message and the file's name, never a
  // signal, and never "no run 1" for a run that is there.
  void damagedStoreNeverAborts() {
    QTemporaryDir dir;
    QString good = dir.filePath("good.db");
    {
      auto db = tsr::store::RunStore::open(good.toStdString());
      QVERIFY(db.ok());
      auto run = db->createRun("r", "p", std::string(20000, 'c'));  // spills onto overflow pages
      for (int step = 0; step < 400; ++step) QVERIFY(db->logMetrics(*run, step, {{"loss", 1.0 / (1 + step)}}).ok());
      auto profile = db->createProfile(*run, "profile", 1, 1);
      std::vector<tsr::store::KernelEvent> events;
      for (int i = 0; i < 200; ++i) events.push_back({"cpu:0", 0, "fusion." + std::to_string(i), i, i * 10, 5, 1, 1});
      QVERIFY(db->addKernelEvents(*profile, events).ok());
    }
    const QByteArray bytes = readAll(good);
    QVERIFY(bytes.size() > 8 * 4096);
    int damaged = 0;
    // Each page after the first (the schema) overwritten with noise, in turn, and the file cut short.
    for (int page = 1; page * 4096 < bytes.size(); ++page) {
      QByteArray b = bytes;
      for (int i = 0; i < 4096 && page * 4096 + i < b.size(); ++i) b[page * 4096 + i] = static_cast<char>((i * 131 + page) & 0xff);
      QString path = dir.filePath(QString("damaged%1.db").arg(page));
      writeFile(path, b);
      for (const QStringList& command :
           {QStringList{"list"}, QStringList{"show", "1"}, QStringList{"export", "1"},
            QStringList{"export-trace", "1", "-o", dir.filePath("t.json")}}) {
        Run r = tessera(QStringList{"runs", "--db", path} + command);
        QVERIFY2(!r.crashed, qPrintable(command.join(' ') + " on page " + QString::number(page) + ": " + r.err));
        if (r.exitCode != 0) {
          ++damaged;
          QVERIFY2(r.err.contains(QFileInfo(path).fileName()), qPrintable(r.err));
          QVERIFY2(!r.err.contains("no run 1"), qPrintable(r.err));
        }
      }
    }
    QVERIFY2(damaged > 0, "no damage was noticed at all");
    QString cut = dir.filePath("cut.db");
    writeFile(cut, bytes.left(bytes.size() / 2));
    Run r = tessera({"runs", "--db", cut, "show", "1"});
    QVERIFY2(!r.crashed, qPrintable(r.err));
  }

  // `tessera eval` on a checkpoint whose weights are NaN: exit 1 and say so (it printed "nan" and exited 0).
  void evalOfANaNCheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    std::string ckpt = dir.filePath("checkpoints/run-1/latest.safetensors").toStdString();
    auto ck = tsr::train::readSafetensors(ckpt);
    QVERIFY(ck.ok());
    for (auto& [name, t] : ck->tensors)
      if (name.rfind("params.", 0) == 0 && t.dtype() == tsr::DType::F32)
        t = tsr::Array::full(t.shape(), std::nan(""), tsr::DType::F32);
    std::string bad = dir.filePath("nan.safetensors").toStdString();
    QVERIFY(tsr::train::writeSafetensors(bad, *ck).ok());
    failsWith(tessera({"eval", dir.path(), "--checkpoint", QString::fromStdString(bad)}),
              {QString::fromStdString(bad), "validation loss is", "nan on batch 1 of 2"});
  }
};

TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestHostileInput)
#include "test_hostile_input.moc"
