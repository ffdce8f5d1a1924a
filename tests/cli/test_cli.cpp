// The tessera command line, run as a user runs it.
#include <QtTest>

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QTemporaryDir>
#include <QThread>

#include <sqlite3.h>

#include "tests/cli/cli_test_util.h"

using namespace tsr::test;

class TestCli : public QObject {
  Q_OBJECT
 private slots:
  void version() {
    Run r = tessera({"--version"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.startsWith("tessera "));
  }

  // The thread libraries read their settings when they load, before main: tessera sets OMP_WAIT_POLICY and
  // OPENBLAS_NUM_THREADS where they are unset and executes itself again, so the running process has them (a
  // .preinit_array setting was lost: OpenBLAS started a thread per core). A value the user set is kept.
  void threadLibrarySettingsReachTheLibraries() {
    for (bool userSet : {false, true}) {
      QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
      env.remove("OMP_WAIT_POLICY");
      env.remove("OPENBLAS_NUM_THREADS");
      if (userSet) env.insert("OMP_WAIT_POLICY", "ACTIVE");
      QProcess p;
      p.setProcessEnvironment(env);
      // Long enough to be read while it runs (it measures the SGEMM peak before its steps).
      p.start(TESSERA_BIN, {"bench", QString(TSR_SAMPLES) + "/mlp_sharding", "--set", "mesh.shape=[1]", "--set",
                            "mesh.axes=[\"data\"]", "--steps", "50"});
      QVERIFY(p.waitForStarted());
      QByteArray environ;
      for (int i = 0; i < 100 && p.state() == QProcess::Running; ++i) {
        QFile f(QString("/proc/%1/environ").arg(p.processId()));
        if (f.open(QIODevice::ReadOnly)) environ = f.readAll();
        if (environ.contains("OPENBLAS_NUM_THREADS=")) break;
        QTest::qWait(50);
      }
      p.kill();
      p.waitForFinished();
      const QList<QByteArray> vars = environ.split('\0');
      QVERIFY2(vars.contains("OPENBLAS_NUM_THREADS=1"), environ.constData());
      QVERIFY2(vars.contains(userSet ? "OMP_WAIT_POLICY=ACTIVE" : "OMP_WAIT_POLICY=PASSIVE"), environ.constData());
    }
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

  void modelInfoOfThePublishedConfigs() {
    Run gpt2 = tessera({"model-info", TSR_SAMPLES "/gpt2_124m"});
    QCOMPARE(gpt2.exitCode, 0);
    QVERIFY2(gpt2.out.contains("124,439,808"), qPrintable(gpt2.out + gpt2.err));
    QVERIFY(gpt2.out.contains(QRegularExpression("\\nh\\.11 +7,087,872 ")));  // one block: 12 d^2 + 13 d
    QVERIFY(gpt2.out.contains(QRegularExpression("\\nwte +38,597,376 ")));   // 50257 x 768
    QVERIFY(gpt2.out.contains("FLOPs per token"));
    Run vit = tessera({"model-info", TSR_SAMPLES "/vit_base"});
    QCOMPARE(vit.exitCode, 0);
    QVERIFY2(vit.out.contains("86,567,656"), qPrintable(vit.out + vit.err));
    QVERIFY(vit.out.contains("FLOPs per sample"));
    // torchvision's ResNet-18 and -50 (ImageNet stem, 1000 classes): the sample's family at their settings.
    const QStringList imagenet = {"--set", "model.stem=imagenet", "--set", "model.width=64", "--set",
                                  "model.num_classes=1000", "--set", "model.image_size=224"};
    Run r18 = tessera(QStringList{"model-info", TSR_SAMPLES "/resnet_cifar"} + imagenet);
    QCOMPARE(r18.exitCode, 0);
    QVERIFY2(r18.out.contains("11,689,512"), qPrintable(r18.out + r18.err));
    Run r50 = tessera(QStringList{"model-info", TSR_SAMPLES "/resnet_cifar", "--set", "model.depth=50"} + imagenet);
    QCOMPARE(r50.exitCode, 0);
    QVERIFY2(r50.out.contains("25,557,032"), qPrintable(r50.out + r50.err));
  }

  // The resnet_cifar sample (a copy, so that its folder stays clean) trains from its own data: the loss falls
  // within a few steps, and eval reads the checkpoint's running statistics.
  void resnetCifarSampleTrainsAndEvaluates() {
    QTemporaryDir dir;
    QVERIFY(QDir().mkpath(dir.filePath("data")));
    for (const char* f : {"project.toml", "data/data_batch_1.bin", "data/test_batch.bin"})
      QVERIFY(QFile::copy(QString(TSR_SAMPLES "/resnet_cifar/") + f, dir.filePath(f)));
    Run t = tessera({"train", dir.path(), "--steps", "12", "--set", "train.eval_every=0", "--set", "train.batch_size=16"});
    QVERIFY2(t.exitCode == 0, qPrintable(t.out + t.err));
    QVERIFY2(t.out.contains("CIFAR-10: 400 training images in 1 files, 80 test images"), qPrintable(t.out));
    QRegularExpressionMatch m = QRegularExpression("loss ([0-9.]+) -> ([0-9.]+)").match(t.out);
    QVERIFY2(m.hasMatch(), qPrintable(t.out));
    QVERIFY2(m.captured(2).toDouble() < 0.5 * m.captured(1).toDouble(), qPrintable(t.out));
    Run e = tessera({"eval", dir.path()});
    QVERIFY2(e.exitCode == 0, qPrintable(e.out + e.err));
    QVERIFY2(e.out.contains("validation loss"), qPrintable(e.out + e.err));
  }

  // The unet_toy sample (a copy: it ships no data, the shapes kind draws it) trains a few steps; `runs show`
  // lists the evaluations' val_pixel_accuracy and val_mean_iou, and `eval` prints them, every value in [0, 1].
  void unetToySampleLogsSegmentationMetrics() {
    QTemporaryDir dir;
    QVERIFY(QFile::copy(QString(TSR_SAMPLES "/unet_toy/project.toml"), dir.filePath("project.toml")));
    Run t = tessera({"train", dir.path(), "--steps", "4", "--set", "train.eval_every=2", "--set", "train.eval_steps=1"});
    QVERIFY2(t.exitCode == 0, qPrintable(t.out + t.err));
    QVERIFY2(t.out.contains("shapes: 1792 training and 256 validation images of 32x32, seed 0"), qPrintable(t.out));
    auto inUnitRange = [](const QString& text) {
      bool ok = false;
      const double v = text.toDouble(&ok);
      return ok && v >= 0 && v <= 1;
    };
    Run shown = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(shown.exitCode == 0, qPrintable(shown.out + shown.err));
    for (const char* key : {"val_pixel_accuracy", "val_mean_iou"}) {
      // key, step, latest, min, max
      QRegularExpressionMatch m =
          QRegularExpression(QString("\\n  %1 +(\\d+) +(\\S+) +(\\S+) +(\\S+)\\n").arg(key)).match(shown.out);
      QVERIFY2(m.hasMatch(), qPrintable(QString(key) + "\n" + shown.out));
      QCOMPARE(m.captured(1).toInt(), 4);
      for (int i = 2; i <= 4; ++i) QVERIFY2(inUnitRange(m.captured(i)), qPrintable(QString(key) + ": " + m.captured(0)));
    }
    Run e = tessera({"eval", dir.path()});
    QVERIFY2(e.exitCode == 0, qPrintable(e.out + e.err));
    QVERIFY2(e.out.startsWith("validation loss "), qPrintable(e.out + e.err));
    for (const char* key : {"pixel_accuracy", "mean_iou"}) {
      QRegularExpressionMatch m = QRegularExpression(QString(", %1 ([0-9.]+)[, ]").arg(key)).match(e.out);
      QVERIFY2(m.hasMatch() && inUnitRange(m.captured(1)), qPrintable(QString(key) + ": " + e.out));
    }
  }

  // `tessera families` lists each family's declaration; `tessera new` writes a project from it that trains.
  void familiesAndNewProjects() {
    Run list = tessera({"families", "--json"});
    QCOMPARE(list.exitCode, 0);
    QJsonDocument doc = QJsonDocument::fromJson(list.out.toUtf8());
    QVERIFY2(doc.isArray(), qPrintable(list.out + list.err));
    QStringList names;
    for (const QJsonValue& f : doc.array()) names << f["name"].toString();
    QVERIFY(names.mid(0, 3) == (QStringList{"gpt2", "vit", "mlp"}));
    QJsonObject mlp = doc.array()[2].toObject();
    QCOMPARE(mlp["data_kinds"].toArray()[0].toString(), QString("synthetic-digits"));
    QJsonObject sizes = mlp["keys"].toArray()[0].toObject();
    QCOMPARE(sizes["default"].toString(), QString("[784, 1024, 1024, 1024, 10]"));
    QVERIFY(!sizes["help"].toString().isEmpty());

    QTemporaryDir dir;
    Run made = tessera({"new", dir.filePath("digits"), "--family", "mlp", "--set", "sizes=[16, 32, 4]"});
    QVERIFY2(made.exitCode == 0, qPrintable(made.err));
    Run trained = tessera({"train", dir.filePath("digits"), "--steps", "3", "--quiet"});
    QVERIFY2(trained.exitCode == 0, qPrintable(trained.out + trained.err));
    QVERIFY(QFileInfo::exists(dir.filePath("digits/runs.db")));
    // The run records the steps it was asked for (the project says 200) and every [model] key.
    Run shown = tessera({"runs", "--project", dir.filePath("digits"), "show", "1"});
    QVERIFY2(shown.out.contains(QRegularExpression("train\\.steps\\W+3\\b")), qPrintable(shown.out));
    QVERIFY2(shown.out.contains(QRegularExpression("model\\.sizes\\W+\\[16, 32, 4\\]")), qPrintable(shown.out));
    // Mistakes name the key; nothing is written.
    Run bad = tessera({"new", dir.filePath("bad"), "--family", "vit", "--set", "layerz=2"});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.contains("[model] layerz: the vit family has no such key"), qPrintable(bad.err));
    QVERIFY(!QFileInfo::exists(dir.filePath("bad/project.toml")));
    Run again = tessera({"new", dir.filePath("digits"), "--family", "mlp"});
    QCOMPARE(again.exitCode, 1);
    QVERIFY2(again.err.contains("exists already"), qPrintable(again.err));
  }

  // kind = "npy": x and y from .npy files (headers written here by hand); the loss falls well below its start.
  void trainOnNpyArraysLowersTheLoss() {
    QTemporaryDir dir;
    auto npy = [](const QByteArray& dict, const QByteArray& data) {
      QByteArray header = dict;
      while ((10 + header.size() + 1) % 64 != 0) header += ' ';
      header += '\n';
      QByteArray out("\x93NUMPY\x01\x00", 8);
      out += char(header.size() & 0xFF);
      out += char(header.size() >> 8);
      return out + header + data;
    };
    // Two classes of 8 features: class c has mean +-1 in every feature, under noise of deviation about 0.6.
    const int n = 256, d = 8;
    QByteArray x, y;
    uint32_t state = 12345;
    auto uniform = [&state] {
      state = state * 1664525u + 1013904223u;
      return static_cast<float>(state >> 8) / static_cast<float>(1 << 24) - 0.5f;
    };
    for (int i = 0; i < n; ++i) {
      const int64_t label = i % 2;
      for (int j = 0; j < d; ++j) {
        const float v = (label ? 1.0f : -1.0f) + 2.0f * (uniform() + uniform());
        x.append(reinterpret_cast<const char*>(&v), 4);
      }
      y.append(reinterpret_cast<const char*>(&label), 8);
    }
    writeFile(dir.filePath("x.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (256, 8), }", x));
    writeFile(dir.filePath("y.npy"), npy("{'descr': '<i8', 'fortran_order': False, 'shape': (256,), }", y));
    writeFile(dir.filePath("project.toml"), R"([model]
family = "mlp"
sizes = [8, 16, 2]
[data]
kind = "npy"
x = "x.npy"
y = "y.npy"
[train]
steps = 30
batch_size = 16
optimizer = "adam"
lr = 1e-2
warmup_steps = 0
eval_every = 30
)");
    Run t = tessera({"train", dir.path(), "--db", dir.filePath("store.db")});
    QCOMPARE(t.exitCode, 0);
    QVERIFY2(t.out.contains("256 samples: 231 for training, 25 for validation"), qPrintable(t.out + t.err));
    QRegularExpressionMatch m = QRegularExpression("loss ([0-9.]+) -> ([0-9.]+)").match(t.out);
    QVERIFY2(m.hasMatch(), qPrintable(t.out));
    const double first = m.captured(1).toDouble(), last = m.captured(2).toDouble();
    QVERIFY2(last < 0.5 * first, qPrintable(t.out));
    QVERIFY2(t.out.contains(QRegularExpression("validation loss 0\\.[0-3]")), qPrintable(t.out));
  }

  void trainThenListShowAndExportRuns() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QString db = dir.filePath("store.db");
    Run t = tessera({"train", dir.path(), "--db", db});
    QCOMPARE(t.exitCode, 0);
    QVERIFY2(t.out.contains(QRegularExpression("step +6/6 \\| loss [0-9.]+ .*\\| ETA \\d+s")), qPrintable(t.out));
    QVERIFY(QFile::exists(db));

    Run list = tessera({"runs", "--db", db, "list"});
    QCOMPARE(list.exitCode, 0);
    QVERIFY2(list.out.contains(QRegularExpression("\\n +1  tiny_mlp .* finished +6 +[0-9]+\\.[0-9]{4}  ")),
             qPrintable(list.out));
    QVERIFY(list.out.contains("1 runs in"));

    Run show = tessera({"runs", "--db", db, "show", "1"});
    QCOMPARE(show.exitCode, 0);
    QVERIFY2(show.out.contains(QRegularExpression("\\n  loss +6 ")), qPrintable(show.out));
    QVERIFY(show.out.contains("val_loss"));
    QVERIFY(show.out.contains(QRegularExpression("train\\.batch_size +8\\n")));

    Run csv = tessera({"runs", "--db", db, "export", "1", "--csv"});
    QCOMPARE(csv.exitCode, 0);
    QStringList lines = csv.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.front(), QString("run,step,key,value,time"));
    QCOMPARE(lines.filter(QRegularExpression("^1,\\d+,loss,")).size(), 6);
    QVERIFY(lines.filter(QRegularExpression("^1,1,loss,")).size() == 1);
    QString out = dir.filePath("metrics.csv");
    QCOMPARE(tessera({"runs", "--db", db, "export", "1", "--csv", "--out", out}).exitCode, 0);
    QFile f(out);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(QString::fromUtf8(f.readAll()), csv.out);

    // --project reads PROJECT/runs.db; the run went to --db, so there is none.
    Run none = tessera({"runs", "--project", dir.path(), "list"});
    QCOMPARE(none.exitCode, 1);
    QVERIFY2(none.err.contains("no run store at"), qPrintable(none.err));
    Run unknown = tessera({"runs", "--db", db, "show", "42"});
    QCOMPARE(unknown.exitCode, 1);
    QVERIFY2(unknown.err.contains("no run 42"), qPrintable(unknown.err));
    QCOMPARE(tessera({"runs", "--db", db, "export", "42", "--csv"}).exitCode, 1);
  }

  // A 3x2 grid makes 6 runs, each tagged with the sweep and its values, each trained with its overrides.
  void sweepGridMakesTaggedRuns() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    Run sweep = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3,3e-3,1e-2", "--grid", "train.batch_size=4,8",
                         "--steps", "2", "--name", "grid1", "--parallel", "2"});
    auto logs = [&] {
      QString all;
      QDir logDir(dir.filePath(".tessera/sweeps/grid1"));
      for (const QString& f : logDir.entryList(QDir::Files)) {
        QFile file(logDir.filePath(f));
        if (file.open(QIODevice::ReadOnly)) all += "\n--- " + f + "\n" + QString::fromUtf8(file.readAll());
      }
      return all;
    };
    QVERIFY2(sweep.exitCode == 0, qPrintable(sweep.out + sweep.err + logs()));
    QVERIFY2(sweep.out.contains("6 runs tagged sweep=grid1"), qPrintable(sweep.out));
    Run list = tessera({"runs", "--project", dir.path(), "list", "--tag", "sweep=grid1"});
    QCOMPARE(list.exitCode, 0);
    QVERIFY2(list.out.contains("6 runs in"), qPrintable(list.out));
    QCOMPARE(list.out.count("#sweep=grid1"), 6);
    QCOMPARE(list.out.count("#train.lr=3e-3"), 2);
    QCOMPARE(list.out.count("#train.batch_size=4"), 3);
    // Each run trained with its own values: the run store records them as the run's settings.
    QSet<QString> seen;
    for (int id = 1; id <= 6; ++id) {
      Run show = tessera({"runs", "--project", dir.path(), "show", QString::number(id)});
      QCOMPARE(show.exitCode, 0);
      auto lr = QRegularExpression("train\\.lr +(\\S+)\\n").match(show.out).captured(1);
      auto batch = QRegularExpression("train\\.batch_size +(\\S+)\\n").match(show.out).captured(1);
      QVERIFY2(show.out.contains(QRegularExpression("train\\.steps +2\\n")), qPrintable(show.out));
      seen.insert(lr + " " + batch);
    }
    QCOMPARE(seen, (QSet<QString>{"0.001 4", "0.001 8", "0.003 4", "0.003 8", "0.01 4", "0.01 8"}));
    // A bad point is refused before any run starts.
    Run bad = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3,-1", "--name", "bad"});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.contains("--set train.lr=-1 (over"), qPrintable(bad.err));
    QCOMPARE(tessera({"runs", "--project", dir.path(), "list", "--tag", "sweep=bad"}).out.count("#sweep=bad"), 0);
    // Random draws from a log range: N runs, each value inside the range.
    Run random = tessera({"sweep", dir.path(), "--random", "2", "--range", "train.lr=1e-4:1e-2:log", "--steps", "1",
                          "--name", "rnd"});
    QVERIFY2(random.exitCode == 0, qPrintable(random.out + random.err));
    QVERIFY2(random.out.contains("2 runs tagged sweep=rnd"), qPrintable(random.out));
  }

  // Runs are renamed, tagged, annotated, archived and deleted with their checkpoints; metrics export as CSV
  // and JSON Lines; --set reaches every command; eval reads a run by number.
  void runsAreEditedExportedAndDeleted() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    Run second = tessera({"train", dir.path(), "--quiet", "--set", "train.lr=5e-3", "--set", "train.steps=3"});
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-2/latest.safetensors")));
    auto runs = [&](const QStringList& args) { return tessera(QStringList{"runs", "--project", dir.path()} + args); };
    QCOMPARE(runs({"rename", "2", "short-lr5e-3"}).exitCode, 0);
    QCOMPARE(runs({"tag", "2", "keep", "lr"}).exitCode, 0);
    QCOMPARE(runs({"untag", "2", "lr"}).exitCode, 0);
    QCOMPARE(runs({"note", "2", "lower lr, fewer steps"}).exitCode, 0);
    Run show = runs({"show", "2"});
    QVERIFY2(show.out.startsWith("run 2: short-lr5e-3 (finished)"), qPrintable(show.out));
    QVERIFY2(show.out.contains("tags     keep\n"), qPrintable(show.out));
    QVERIFY2(show.out.contains("notes    lower lr, fewer steps\n"), qPrintable(show.out));
    QVERIFY2(show.out.contains(QRegularExpression("train\\.lr +0\\.005\\n")), qPrintable(show.out));
    QVERIFY2(show.out.contains(QRegularExpression("run\\.overrides +train\\.lr=5e-3 train\\.steps=3\\n")), qPrintable(show.out));
    QVERIFY2(show.out.contains("config/resolved.toml"), qPrintable(show.out));
    QCOMPARE(runs({"tag", "9", "x"}).exitCode, 1);

    // Export: CSV of two runs, JSON Lines with one object per run and step.
    Run csv = runs({"export", "1", "2"});
    QCOMPARE(csv.exitCode, 0);
    QCOMPARE(csv.out.split('\n', Qt::SkipEmptyParts).filter(QRegularExpression("^[12],\\d+,loss,")).size(), 6 + 3);
    Run jsonl = runs({"export", "--jsonl"});
    QCOMPARE(jsonl.exitCode, 0);
    QStringList objects = jsonl.out.split('\n', Qt::SkipEmptyParts);
    QCOMPARE(objects.size(), 6 + 3);
    QJsonObject first = QJsonDocument::fromJson(objects.front().toUtf8()).object();
    QCOMPARE(first["run"].toInt(), 1);
    QCOMPARE(first["step"].toInt(), 1);
    QVERIFY(first.contains("loss") && first.contains("lr") && first.contains("grad_norm"));

    // eval by run number; a run without a checkpoint names those that have one.
    Run e1 = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(e1.exitCode == 0 && e1.out.contains("checkpoints/run-1/latest.safetensors"), qPrintable(e1.out + e1.err));
    Run e7 = tessera({"eval", dir.path(), "--run", "7"});
    QCOMPARE(e7.exitCode, 1);
    QVERIFY2(e7.err.contains("runs with one: 1, 2"), qPrintable(e7.err));
    Run badSet = tessera({"model-info", dir.path(), "--set", "model.sizes=[16]"});
    QCOMPARE(badSet.exitCode, 1);
    QVERIFY2(badSet.err.contains("--set model.sizes=[16] (over"), qPrintable(badSet.err));

    // Archive hides a run from the list; delete needs --yes when no one can be asked, then takes the checkpoints.
    QCOMPARE(runs({"archive", "1"}).exitCode, 0);
    QVERIFY(runs({"list"}).out.contains("1 runs in"));
    QVERIFY(runs({"list", "--all"}).out.contains("(archived)"));
    Run refused = runs({"delete", "1"});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.contains("confirm with --yes"), qPrintable(refused.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run deleted = runs({"delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
    QVERIFY(!QFileInfo::exists(dir.filePath("checkpoints/run-1")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-2/latest.safetensors")));
    QVERIFY(runs({"list", "--all"}).out.contains("1 runs in"));

    // --resume N continues that run; a stopped run resumes to the end.
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--stop-at", "2"}).exitCode, 0);
    Run resumed = tessera({"train", dir.path(), "--quiet", "--resume", "3"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("resumed run 3 at step 2"), qPrintable(resumed.out + resumed.err));
  }

  // A checkpoint folder is its run's own: a run of another store (--db), or of a runs.db deleted since, with the
  // same number gets a folder of its own, and eval, resume and delete never use or remove another run's files.
  void checkpointFoldersBelongToTheirRun() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString other = dir.filePath("other.db");
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    Run second = tessera({"train", dir.path(), "--quiet", "--steps", "3", "--db", other});
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    QStringList folders = QDir(dir.filePath("checkpoints")).entryList(QDir::Dirs | QDir::NoDotAndDotDot);
    QCOMPARE(folders.size(), 2);
    const QString otherFolder = folders.filter(QRegularExpression("^run-1-")).value(0);
    QVERIFY2(!otherFolder.isEmpty(), qPrintable(folders.join(' ')));
    Run e1 = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(e1.exitCode == 0 && e1.out.contains("checkpoints/run-1/latest.safetensors"), qPrintable(e1.out + e1.err));
    Run eOther = tessera({"eval", dir.path(), "--run", "1", "--db", other});
    QVERIFY2(eOther.exitCode == 0 && eOther.out.contains(otherFolder + "/latest.safetensors"), qPrintable(eOther.out + eOther.err));
    Run resumed = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--steps", "4", "--db", other});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("resumed run 1 at step 3 from") &&
                 resumed.out.contains(otherFolder), qPrintable(resumed.out + resumed.err));
    // Deleting the other store's run 1 leaves runs.db's run 1 its checkpoints.
    Run deleted = tessera({"runs", "--db", other, "delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    QVERIFY(!QFileInfo::exists(dir.filePath("checkpoints/" + otherFolder)));

    // A new runs.db: its run 1 neither reads nor deletes the old run 1's folder.
    for (const char* f : {"runs.db", "runs.db-wal", "runs.db-shm"}) QFile::remove(dir.filePath(f));
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    Run eNew = tessera({"eval", dir.path(), "--run", "1"});
    QVERIFY2(eNew.exitCode == 0 && !eNew.out.contains("checkpoints/run-1/latest"), qPrintable(eNew.out + eNew.err));
    // A folder whose owner file names another run is refused, not read.
    folders = QDir(dir.filePath("checkpoints")).entryList(QDir::Dirs | QDir::NoDotAndDotDot).filter(QRegularExpression("^run-1-"));
    QCOMPARE(folders.size(), 1);
    writeFile(dir.filePath("checkpoints/" + folders[0] + "/owner.txt"), "owner = 0123456789abcdef\n");
    Run foreign = tessera({"eval", dir.path(), "--run", "1"});
    QCOMPARE(foreign.exitCode, 1);
    QVERIFY2(foreign.err.contains("belongs to another run"), qPrintable(foreign.err));
    QCOMPARE(tessera({"runs", "--project", dir.path(), "delete", "1", "--yes"}).exitCode, 0);
    QVERIFY(QFile::exists(dir.filePath("checkpoints/" + folders[0] + "/latest.safetensors")));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
  }

  // --resume continues the run with the configuration it was started with (its --steps and --set), whatever
  // project.toml says now; a --set that would change it is refused.
  void resumeKeepsTheRunsConfiguration() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "5", "--set", "train.lr=3e-3", "--set",
                      "train.schedule=cosine", "--stop-at", "2"}).exitCode, 0);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "5", "--set", "train.lr=3e-3", "--set",
                      "train.schedule=cosine"}).exitCode, 0);
    Run refused = tessera({"train", dir.path(), "--quiet", "--resume", "1", "--set", "train.lr=1e-1"});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.contains("train.lr = 0.1 (the run has 0.003)"), qPrintable(refused.err));
    QByteArray toml(kTinyMlp);
    writeFile(dir.filePath("project.toml"), toml.replace("steps = 6", "steps = 9"));
    Run resumed = tessera({"train", dir.path(), "--resume", "1", "--set", "train.log_every=1"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("step     5/5") && !resumed.out.contains("/9"),
             qPrintable(resumed.out + resumed.err));
    QVERIFY2(resumed.out.contains("project.toml has changed since run 1 started: train.steps = 9 (the run has 5);"), qPrintable(resumed.out));
    // The resumed run's learning rates are the uninterrupted run's.
    Run csv = tessera({"runs", "--project", dir.path(), "export", "1", "2"});
    QStringList lr1 = csv.out.split('\n').filter(QRegularExpression("^1,\\d+,lr,"));
    QStringList lr2 = csv.out.split('\n').filter(QRegularExpression("^2,\\d+,lr,"));
    QCOMPARE(lr1.size(), 5);
    for (int i = 0; i < 5; ++i) QCOMPARE(lr1[i].section(',', 1, 3), lr2[i].section(',', 1, 3));
  }

  // An output file never replaces the run store (or its -wal) or a run's checkpoint.
  void outputsNeverReplaceRunFiles() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet"}).exitCode, 0);
    const QByteArray latest = [&] {
      QFile f(dir.filePath("checkpoints/run-1/latest.safetensors"));
      return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }();
    auto runs = [&](const QStringList& args) { return tessera(QStringList{"runs", "--project", dir.path()} + args); };
    for (const char* out : {"runs.db", "runs.db-wal", "checkpoints/run-1/latest.safetensors"}) {
      Run r = runs({"export", "--out", dir.filePath(out)});
      QCOMPARE(r.exitCode, 1);
      QVERIFY2(r.err.contains("write to another file"), qPrintable(r.err));
    }
    Run trace = tessera({"profile", dir.path(), "--steps", "1", "--warmup", "0", "--quiet", "--trace", dir.filePath("runs.db")});
    QCOMPARE(trace.exitCode, 1);
    QVERIFY2(trace.err.contains("is the run store"), qPrintable(trace.err));
    QFile f(dir.filePath("checkpoints/run-1/latest.safetensors"));
    QVERIFY(f.open(QIODevice::ReadOnly) && f.readAll() == latest);
    QVERIFY(runs({"show", "1"}).out.startsWith("run 1: tiny_mlp (finished)"));
    Run csv = runs({"export", "--out", dir.filePath("m.csv")});
    QCOMPARE(csv.exitCode, 0);
    QVERIFY(QFile::exists(dir.filePath("m.csv")));
  }

  // Another program's SQLite file given as --db is refused by the commands that write runs, and left byte for byte
  // as it was (it used to get Tessera's tables and WAL mode).
  void anotherProgramsDatabaseIsNotARunStore() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    const QString foreign = dir.filePath("other.sqlite");
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(foreign.toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "CREATE TABLE notes(x); INSERT INTO notes VALUES('mine')", nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    auto bytes = [](const QString& path) {
      QFile f(path);
      return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    const QByteArray before = bytes(foreign);
    for (const QStringList& args : QList<QStringList>{{"train", dir.path(), "--quiet"},
                                                      {"sweep", dir.path(), "--grid", "train.lr=1e-2"},
                                                      {"profile", dir.path(), "--steps", "1", "--warmup", "0"}}) {
      Run r = tessera(args + QStringList{"--db", foreign});
      QVERIFY2(r.exitCode == 1, qPrintable(args.join(' ')));
      QVERIFY2(r.err.contains(foreign + ": not a Tessera run store (it holds another program's tables: notes)"),
               qPrintable(r.err));
      QCOMPARE(bytes(foreign), before);
      QVERIFY(!QFile::exists(foreign + "-wal") && !QFile::exists(foreign + "-shm"));
    }
    // An empty file is a new store.
    writeFile(dir.filePath("empty.db"), "");
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "1", "--db", dir.filePath("empty.db")}).exitCode, 0);
  }

  // Reading the store (runs list, show, export) leaves no -wal or -shm beside it: made by a reader they outlive
  // it, and another user's stop the store's owner from writing.
  void readingTheStoreLeavesNoFilesBeside() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    for (const QStringList& args : QList<QStringList>{{"list"}, {"show", "1"}, {"export", "1"}}) {
      Run r = tessera(QStringList{"runs", "--project", dir.path()} + args);
      QVERIFY2(r.exitCode == 0, qPrintable(r.err));
      QVERIFY2(!QFile::exists(dir.filePath("runs.db-wal")) && !QFile::exists(dir.filePath("runs.db-shm")),
               qPrintable(args.join(' ')));
    }
    Run write = tessera({"runs", "--project", dir.path(), "tag", "1", "kept"});
    QVERIFY2(write.exitCode == 0, qPrintable(write.err));
    QVERIFY(tessera({"runs", "--project", dir.path(), "list"}).out.contains("#kept"));
  }

  // project.toml values that cannot train are errors naming the key, its value and the line or --set.
  void trainSettingsThatCannotTrainAreErrors() {
    QTemporaryDir dir;
    const QByteArray toml(kTinyMlp);
    auto check = [&](const QByteArray& text, const QStringList& sets, const QString& message) {
      writeFile(dir.filePath("project.toml"), text);
      QStringList args{"train", dir.path(), "--quiet"};
      for (const QString& s : sets) args << "--set" << s;
      Run r = tessera(args);
      QVERIFY2(r.exitCode == 1 && r.err.contains(message), qPrintable(args.join(' ') + ": " + r.err));
      QVERIFY(!QFile::exists(dir.filePath("runs.db")));
    };
    const QString file = dir.filePath("project.toml");
    check(QByteArray(toml).replace("lr = 1e-2", "lr = 1e-2\nmin_lr = 0.1"), {},
          file + ":13: 'min_lr' (0.1) must not exceed 'lr' (0.01)");
    check(QByteArray(toml).replace("lr = 1e-2", "lr = 1e-2\nmin_lr = 1e-3"), {"train.lr=1e-4"},
          "--set train.lr=1e-4 (over " + file + "): 'min_lr' (0.001) must not exceed 'lr' (0.0001)");
    check(toml, {"train.lr=inf"}, "--set train.lr=inf (over " + file + "): 'lr' must be finite (it is inf)");
    check(toml, {"train.lr=nan"}, "'lr' must be positive");
    check(QByteArray(toml).replace("steps = 6", "steps = 0"), {}, file + ":9: 'steps' must be positive");
    check(QByteArray(toml).replace("warmup_steps = 0", "warmup_steps = 20"), {},
          file + ":13: 'warmup_steps' (20) must not exceed 'steps' (6)");
    check(toml, {"train.warmup_steps=7"}, "'warmup_steps' (7) must not exceed 'steps' (6)");
  }

  // A run whose process was killed (SIGKILL: nothing of it ran after) is listed as crashed, not running forever,
  // and can be deleted; a run still training is listed as running.
  void aKilledRunIsListedAsCrashed() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess p;
    p.start(TESSERA_BIN, {"train", dir.path(), "--quiet", "--steps", "10000000"});
    QVERIFY(p.waitForStarted());
    auto list = [&] { return tessera({"runs", "--project", dir.path(), "list"}).out; };
    QElapsedTimer waited;
    waited.start();
    while (!list().contains("running") && waited.elapsed() < 60000) QThread::msleep(200);
    QVERIFY2(list().contains("running"), qPrintable(list()));
    const qint64 pid = p.processId();
    p.kill();
    QVERIFY(p.waitForFinished());
    QVERIFY2(list().contains("crashed"), qPrintable(list()));
    Run show = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(show.out.startsWith("run 1: tiny_mlp (crashed)") &&
                 show.out.contains(QString("its process (pid %1 on ").arg(pid)),
             qPrintable(show.out));
    Run deleted = tessera({"runs", "--project", dir.path(), "delete", "1", "--yes"});
    QVERIFY2(deleted.exitCode == 0, qPrintable(deleted.err));
  }

  // compile --dump into a folder an earlier dump wrote replaces that dump (nothing of it is left to mislead) and
  // keeps the user's own files; a folder with other files is refused.
  void compileDumpReplacesItsOwnDumpOnly() {
    QTemporaryDir dir;
    const QString dump = dir.filePath("dump");
    QCOMPARE(tessera({"compile", TSR_SAMPLES "/mlp_sharding", "--quiet", "--dump", dump}).exitCode, 0);
    QVERIFY(QFile::exists(dump + "/spmd/plan.txt"));
    writeFile(dump + "/mine.txt", "notes");
    Run again = tessera({"compile", "--example", "mlp", "--quiet", "--dump", dump});
    QVERIFY2(again.exitCode == 0, qPrintable(again.err));
    QVERIFY(!QFileInfo::exists(dump + "/spmd"));
    QVERIFY(QFile::exists(dump + "/00_input.tir") && QFile::exists(dump + "/kernels.txt"));
    QVERIFY(QFile::exists(dump + "/mine.txt"));
    const QString other = dir.filePath("other");
    QDir().mkpath(other);
    writeFile(other + "/report.txt", "keep");
    Run refused = tessera({"compile", "--example", "mlp", "--quiet", "--dump", other});
    QCOMPARE(refused.exitCode, 1);
    QVERIFY2(refused.err.contains("--dump " + other + ": the folder is not empty and no earlier dump wrote it"),
             qPrintable(refused.err));
    QCOMPARE(QDir(other).entryList(QDir::Files), QStringList{"report.txt"});
  }

  // config/resolved.toml, the configuration a run records, has the steps it was asked for (--steps).
  void resolvedConfigHasTheRunsSteps() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "2"}).exitCode, 0);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open_v2(dir.filePath("runs.db").toUtf8().constData(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    QCOMPARE(sqlite3_prepare_v2(db, "SELECT data FROM artifacts WHERE run = 1 AND name = 'config/resolved.toml'", -1,
                                &st, nullptr),
             SQLITE_OK);
    QCOMPARE(sqlite3_step(st), SQLITE_ROW);
    const QString resolved = QString::fromUtf8(static_cast<const char*>(sqlite3_column_blob(st, 0)), sqlite3_column_bytes(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);
    QVERIFY2(resolved.contains("\nsteps = 2  # --steps (project.toml: 6)\n"), qPrintable(resolved));
    // It continues as it was asked for.
    Run resumed = tessera({"train", dir.path(), "--resume", "1", "--steps", "3"});
    QVERIFY2(resumed.exitCode == 0 && resumed.out.contains("step     3/3"), qPrintable(resumed.out + resumed.err));
  }

  // A store another process holds locked is waited for, and the wait is said once (not taken for a hang).
  void waitingForALockedStoreIsSaid() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--steps", "1"}).exitCode, 0);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(dir.filePath("runs.db").toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
    QProcess p;
    p.start(TESSERA_BIN, {"train", dir.path(), "--quiet", "--steps", "1"});
    QVERIFY(p.waitForStarted());
    QElapsedTimer waited;
    waited.start();
    QByteArray err;
    while (!err.contains("waiting for") && waited.elapsed() < 4000) {
      p.waitForReadyRead(100);
      err += p.readAllStandardError();
    }
    QCOMPARE(sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    QVERIFY(p.waitForFinished(120000));
    err += p.readAllStandardError();
    QVERIFY2(p.exitCode() == 0, err.constData());
    QCOMPARE(err.count("waiting for " + dir.filePath("runs.db").toUtf8() + " (locked by another process)..."), 1);
  }

  // `tessera new ""` would write into this folder; a corpus whose name a different file in data/ has would be
  // silently replaced by that file.
  void newRefusesAnEmptyFolderNameAndAnotherCorpus() {
    QTemporaryDir dir;
    Run empty = tessera({"new", "", "--family", "mlp"});
    QCOMPARE(empty.exitCode, 1);
    QVERIFY2(empty.err.contains("the project's folder is empty"), qPrintable(empty.err));
    QVERIFY(!QFile::exists("project.toml") || QFileInfo("project.toml").lastModified().secsTo(QDateTime::currentDateTime()) > 60);
    writeFile(dir.filePath("notes.txt"), "the corpus the user means\n");
    QDir().mkpath(dir.filePath("lm/data"));
    writeFile(dir.filePath("lm/data/notes.txt"), "an older, different file\n");
    Run other = tessera({"new", dir.filePath("lm"), "--family", "gpt2", "--corpus", dir.filePath("notes.txt")});
    QCOMPARE(other.exitCode, 1);
    QVERIFY2(other.err.contains(dir.filePath("lm/data/notes.txt") + " exists and is not " + dir.filePath("notes.txt")),
             qPrintable(other.err));
    QVERIFY(!QFile::exists(dir.filePath("lm/project.toml")));
    writeFile(dir.filePath("lm/data/notes.txt"), "the corpus the user means\n");
    Run same = tessera({"new", dir.filePath("lm"), "--family", "gpt2", "--corpus", dir.filePath("notes.txt")});
    QVERIFY2(same.exitCode == 0 && same.out.contains("is " + dir.filePath("notes.txt") + " already: kept"),
             qPrintable(same.out + same.err));
  }

  // A word where a command must be that is none is named, with the commands there are.
  void unknownCommandsAreNamed() {
    Run top = tessera({"trian", "x"});
    QVERIFY(top.exitCode != 0);
    QVERIFY2(top.err.startsWith("tessera: unknown command 'trian' (one of ops, ir, compile, train,"), qPrintable(top.err));
    Run runs = tessera({"runs", "--db", "x.db", "lst"});
    QVERIFY(runs.exitCode != 0);
    QVERIFY2(runs.err.startsWith("tessera runs: unknown command 'lst' (one of list, show,"), qPrintable(runs.err));
    QVERIFY2(runs.err.contains("tessera runs --help"), qPrintable(runs.err));
    Run none = tessera({});
    QVERIFY(none.exitCode != 0);
    QVERIFY2(none.err.contains("A subcommand is required"), qPrintable(none.err));
  }

  // A closed stdout stops a sweep as it stops train: its run is checkpointed and stopped, no other starts.
  void closedStdoutStopsASweep() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess sh;
    sh.start("/bin/bash", {"-c", QString("'%1' sweep '%2' --grid train.lr=1e-3,2e-3,3e-3 --steps 100000 | head -2; "
                                         "exit ${PIPESTATUS[0]}").arg(TESSERA_BIN, dir.path())});
    QVERIFY(sh.waitForFinished(120000));
    const QString err = QString::fromUtf8(sh.readAllStandardError());
    QVERIFY2(sh.exitCode() == 130, qPrintable(QString::number(sh.exitCode()) + err));
    QVERIFY2(err.contains("tessera sweep: stdout was closed"), qPrintable(err));
    Run list = tessera({"runs", "--project", dir.path(), "list"});
    QVERIFY2(list.out.contains("1 runs in") && list.out.contains("stopped"), qPrintable(list.out));
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run steps = tessera({"sweep", dir.path(), "--grid", "train.lr=1e-3", "--steps", "-2"});
    QVERIFY(steps.exitCode != 0);
    QVERIFY2(steps.err.startsWith("--steps: -2 is not a non-negative number"), qPrintable(steps.err));
  }

  // A model no machine holds (3.3T parameters) is said not to fit in memory, with what it needs and what there is,
  // before anything else fails on its size (its init drew more random words than a key has counters).
  void aModelBeyondMemoryIsSaidToBe() {
    QTemporaryDir dir;
    Run r = tessera({"train", TSR_SAMPLES "/gpt2_mini", "--db", dir.filePath("r.db"), "--set", "model.n_embd=65536",
                     "--set", "model.n_layer=64", "--set", "model.n_head=64"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("the parameters of gpt2 (3298627289088 parameters, 4 bytes each, before any adamw state) "
                            "need 12288.34 GiB, but this machine has ") &&
                 !r.err.contains("random"),
             qPrintable(r.err));
  }

  // A closed stdout (tessera train | head) stops the run as Ctrl-C does: checkpointed, stopped, resumable.
  void closedStdoutStopsTrainingWithACheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    QProcess sh;
    sh.start("/bin/bash", {"-c", QString("'%1' train '%2' --steps 100000 | head -3; exit ${PIPESTATUS[0]}")
                                     .arg(TESSERA_BIN, dir.path())});
    QVERIFY(sh.waitForFinished(120000));
    QCOMPARE(sh.exitCode(), 130);
    QVERIFY(QFile::exists(dir.filePath("checkpoints/run-1/latest.safetensors")));
    Run show = tessera({"runs", "--project", dir.path(), "show", "1"});
    QVERIFY2(show.out.startsWith("run 1: tiny_mlp (stopped)"), qPrintable(show.out));
  }

  // What can be checked before a run is created is, and an error after leaves the run failed, never running.
  void failuresLeaveNoRunRunning() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyMlp);
    Run tag = tessera({"train", dir.path(), "--quiet", "--tag", ""});
    QCOMPARE(tag.exitCode, 1);
    QVERIFY2(tag.err.contains("a tag cannot be empty"), qPrintable(tag.err));
    writeFile(dir.filePath("checkpoints"), "a file");
    Run file = tessera({"train", dir.path(), "--quiet"});
    QCOMPARE(file.exitCode, 1);
    QVERIFY2(file.err.contains("checkpoints is not a folder"), qPrintable(file.err));
    Run trace = tessera({"profile", dir.path(), "--steps", "1", "--warmup", "0", "--quiet", "--trace", "/nonexistdir/x.json"});
    QCOMPARE(trace.exitCode, 1);
    QVERIFY2(trace.err.contains("/nonexistdir is not a folder"), qPrintable(trace.err));
    Run list = tessera({"runs", "--project", dir.path(), "list"});
    QVERIFY2(!list.out.contains("running"), qPrintable(list.out + list.err));
  }

  void evalAndGenerateFromACheckpoint() {
    QTemporaryDir dir;
    writeFile(dir.filePath("project.toml"), kTinyGpt2);
    QByteArray corpus;
    for (int i = 0; i < 60; ++i)
      corpus += "Permission is hereby granted, free of charge, to any person obtaining a copy of this software.\n";
    writeFile(dir.filePath("corpus.txt"), corpus);
    QCOMPARE(tessera({"train", dir.path(), "--quiet", "--sample", "0"}).exitCode, 0);
    QString ckpt = dir.filePath("checkpoints/run-1/latest.safetensors");
    QVERIFY(QFile::exists(ckpt));

    Run e = tessera({"eval", dir.path(), "--checkpoint", ckpt});
    QCOMPARE(e.exitCode, 0);
    QVERIFY2(e.out.contains(QRegularExpression("validation loss [0-9]+\\.[0-9]{4} over 2 batches")), qPrintable(e.out + e.err));

    Run g = tessera({"generate", dir.path(), "--checkpoint", ckpt, "--prompt", "Permission", "--tokens", "8",
                     "--seed", "3"});
    QCOMPARE(g.exitCode, 0);
    QVERIFY2(g.out.startsWith("Permission"), qPrintable(g.out + g.err));
    Run again = tessera({"generate", dir.path(), "--checkpoint", ckpt, "--prompt", "Permission", "--tokens", "8",
                         "--seed", "3"});
    QCOMPARE(again.out, g.out);  // a seed reproduces a sample

    Run missing = tessera({"eval", dir.path(), "--checkpoint", dir.filePath("absent.safetensors")});
    QCOMPARE(missing.exitCode, 1);
    QVERIFY2(missing.err.contains("does not exist"), qPrintable(missing.err));
    Run missingGen = tessera({"generate", dir.path(), "--checkpoint", dir.filePath("absent.safetensors")});
    QCOMPARE(missingGen.exitCode, 1);
    QVERIFY2(missingGen.err.contains("does not exist"), qPrintable(missingGen.err));
  }

  // A setting given a value it does not take is said on stderr, once, and the default applies (a typo would
  // otherwise change nothing without a word); the values a setting takes, and their 0/1 spellings, are quiet.
  // OpenBLAS on a CPU it does not know takes its generic SSE3 kernels ("Prescott"); the executable starts again
  // with OPENBLAS_CORETYPE naming kernels the CPU runs. OPENBLAS_VERBOSE=2 prints the core at each load: the
  // last one is the one that computes.
  void blasRunsKernelsTheCpuHas() {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2")) QSKIP("this CPU has no AVX2: OpenBLAS's generic kernels are its own");
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("OPENBLAS_CORETYPE");
    env.insert("OPENBLAS_VERBOSE", "2");
    Run r = tessera({"--version"}, env);
    QCOMPARE(r.exitCode, 0);
    const QString all = r.out + r.err;
    const qsizetype at = all.lastIndexOf("Core: ");
    QVERIFY2(at >= 0, qPrintable(all));
    const QString core = all.mid(at + 6).section('\n', 0, 0).trimmed();
    QVERIFY2(core != "Prescott", qPrintable(all));
  }

  void unknownSettingValuesAreSaid() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("TESSERA_CONV_ALGORITHM", "winograd");
    env.insert("TESSERA_RECOMPUTE", "0");
    env.insert("TESSERA_FUSED_ATTENTION", "on");
    env.insert("TESSERA_NUM_THREADS", "four");
    env.insert("TESSERA_GEMM_AUTOTUNE", "no");
    Run r = tessera({"compile", QString(TSR_SAMPLES) + "/mlp_sharding"}, env);
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.err.count("TESSERA_CONV_ALGORITHM=winograd is not one of auto, direct; it is ignored"), 1);
    QCOMPARE(r.err.count("TESSERA_NUM_THREADS=four is not a whole number from 1 to 256; it is ignored"), 1);
    for (const char* quiet : {"TESSERA_RECOMPUTE", "TESSERA_FUSED_ATTENTION", "TESSERA_GEMM_AUTOTUNE"})
      QVERIFY2(!r.err.contains(quiet), qPrintable(r.err));
  }

  void compileAProjectsTrainingStep() {
    QTemporaryDir dir;
    Run r = tessera({"compile", QString(TSR_SAMPLES) + "/gpt2_mini", "--dump", dir.path()});
    QCOMPARE(r.exitCode, 0);
    // Forward, backward and update of 2 blocks: 4 matmuls per block forward (the projections; attention is one
    // dot_product_attention op on the CPU, and one gradient op), twice that backward, and the head.
    QCOMPARE(r.out.count(QRegularExpression("= dot_general\\(")), 2 * 4 * 3 + 3);
    QCOMPARE(r.out.count(QRegularExpression("= dot_product_attention\\(")), 2);
    QCOMPARE(r.out.count(QRegularExpression("= dot_product_attention_grad\\(")), 2);
    QVERIFY(r.out.contains("cleanup/cse"));
    QVERIFY(QFile::exists(dir.filePath("00_input.tir")) && QFile::exists(dir.filePath("timings.json")) &&
            QFile::exists(dir.filePath("decisions.txt")) && QFile::exists(dir.filePath("kernels.txt")));
    // The backend's summary, and the launches in kernels.txt: one numbered line per kernel.
    QRegularExpressionMatch m = QRegularExpression("backend: (\\d+) kernels").match(r.out);
    QVERIFY2(m.hasMatch(), qPrintable(r.out.right(600)));
    QFile k(dir.filePath("kernels.txt"));
    QVERIFY(k.open(QIODevice::ReadOnly));
    QString text = QString::fromUtf8(k.readAll());
    QCOMPARE(text.count(QRegularExpression("\n +\\d+ \\S+")), m.captured(1).toInt());
    Run bad = tessera({"compile", dir.filePath("absent")});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY(bad.err.contains("no such file"));
  }

  void memoryOfAProjectsStep() {
    // mlp_sharding on its 4x2 mesh: each device holds its quarter of the batch (8192 x 784 f32 over 'data'),
    // layer 0's weight split over 'model' (784 x 1024 f32 / 2), as worked out by hand.
    Run r = tessera({"memory", TSR_SAMPLES "/mlp_sharding", "--json"});
    QCOMPARE(r.exitCode, 0);
    QJsonObject o = QJsonDocument::fromJson(r.out.toUtf8()).object();
    QCOMPARE(o["device"].toString(), QString("each of 8 devices (Mesh('data': 4, 'model': 2))"));
    QJsonArray kinds = o["kinds"].toArray();
    QCOMPARE(kinds.size(), 6);
    qint64 inputs = -1, weight = -1, listed = 0;
    const QJsonArray buffers = o["buffers"].toArray();
    for (const QJsonValue& b : buffers) {
      if (b["what"].toString() == "inputs") inputs = b["bytes"].toInteger();
      if (b["what"].toString() == "params.layers.0.weight") weight = b["bytes"].toInteger();
    }
    QCOMPARE(inputs, qint64(8192 / 4 * 784 * 4));
    QCOMPARE(weight, qint64(784 * 1024 / 2 * 4));
    // The peak is the most of any kernel's live bytes, and the buffers listed at it add up to it.
    qint64 most = 0;
    for (const QJsonValue& row : o["live"].toArray()) {
      qint64 sum = 0;
      for (const QJsonValue& v : row.toArray()) sum += v.toInteger();
      most = std::max(most, sum);
    }
    QCOMPARE(o["peak"].toObject()["bytes"].toInteger(), most);
    for (const QJsonValue& i : o["at_peak"].toArray()) listed += buffers[i.toInt()]["bytes"].toInteger();
    QCOMPARE(listed, most);
    // The text form, and the same through compile --memory.
    Run text = tessera({"compile", TSR_SAMPLES "/gpt2_mini", "--memory"});
    QCOMPARE(text.exitCode, 0);
    QVERIFY2(text.out.contains("gpt2_mini: the training step's memory on one device") &&
                 text.out.contains("buffers live at the peak, largest first"),
             qPrintable(text.out));
    Run bad = tessera({"memory", TSR_SAMPLES "/absent"});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.startsWith("tessera memory: ") && bad.err.contains("no such file"), qPrintable(bad.err));
  }

  void shardShowDrawsTheDeviceGrid() {
    Run r = tessera({"shard", "show", "--mesh", "4x2", "--axes", "a,b", "--shape", "8192,8192", "--spec", "a,b"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY(r.out.contains("NamedSharding(Mesh('a': 4, 'b': 2), P('a', 'b')) on f32[8192,8192]"));
    for (int d = 0; d < 8; ++d) QVERIFY(r.out.contains(QString("CPU %1 ").arg(d)));
    QVERIFY2(r.out.contains("8 distinct shards of [2048,4096] (32.0 MiB each)"), qPrintable(r.out));
    Run bad = tessera({"shard", "show", "--mesh", "4x2", "--axes", "a,b", "--shape", "102,8", "--spec", "a"});
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.contains("into 4 shards, which does not divide 102"), qPrintable(bad.err));
  }

  void shardPlanListsShardingsAndCollectives() {
    // The tutorial's 4x2 layout: layer 1 column-parallel, layer 2 row-parallel. The math needs one all_reduce
    // over 'model' (after layer 2), one over 'data' per parameter gradient (8) and the loss's, and one over
    // 'model' for the global gradient norm (the model-split gradients' squares, summed before it).
    Run r = tessera({"shard", "plan", TSR_SAMPLES "/mlp_sharding", "--no-values"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("Mesh('data': 4, 'model': 2) over 8 devices"), qPrintable(r.out));
    QVERIFY(r.out.contains(QRegularExpression("params.layers.0.weight +f32\\[784,1024\\] +1.5 MiB +P\\(None, 'model'\\)")));
    QVERIFY(r.out.contains(QRegularExpression("inputs +f32\\[8192,784\\] +6.1 MiB +P\\('data', None\\)")));
    QCOMPARE(r.out.count(QRegularExpression("all_reduce +over 'data'")), 9);
    QCOMPARE(r.out.count(QRegularExpression("all_reduce +over 'model' +8.0 MiB")), 1);
    QVERIFY2(r.out.contains("Collectives per step: 11"), qPrintable(r.out));
    // The times are the plan's, at the bandwidth it was made for.
    Run fast = tessera({"shard", "plan", TSR_SAMPLES "/mlp_sharding", "--no-values", "--bandwidth", "25"});
    QCOMPARE(fast.exitCode, 0);
    QVERIFY2(fast.out.contains("Collectives per step: 11 (time at 25 GB/s per device)"), qPrintable(fast.out));
  }

  void compileDumpsThePerDeviceProgram() {
    // mlp_sharding's 4x2 step: the global graph's passes as usual, and in spmd/ the per-device program after the
    // partitioner (its collectives as ops) and after every pass, the plan and the collectives with their reasons.
    QTemporaryDir dir;
    Run r = tessera({"compile", TSR_SAMPLES "/mlp_sharding", "--quiet", "--dump", dir.path()});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains("per-device program on Mesh('data': 4, 'model': 2): 11 collectives"), qPrintable(r.out));
    QDir spmd(dir.filePath("spmd"));
    QVERIFY(spmd.exists("00_input.tir") && spmd.exists("00_input.dot") && spmd.exists("plan.txt"));
    auto read = [&](const QString& name) {
      QFile f(spmd.filePath(name));
      return f.open(QIODevice::ReadOnly) ? QString::fromUtf8(f.readAll()) : QString();
    };
    // The partitioner's output: per-device shapes (the batch's quarter, layer 1's half columns) and the 11
    // all_reduces the math needs (9 over 'data', one over 'model' after layer 2, one for the gradient norm).
    QString partitioned = read("00_input.tir");
    QCOMPARE(partitioned.count(QRegularExpression("= all_reduce\\(")), 11);
    QVERIFY(partitioned.contains("f32[2048,784]") && partitioned.contains("f32[784,512]"));
    QCOMPARE(partitioned.count(QRegularExpression("= (all_gather|all_to_all|reduce_scatter|collective_permute)\\(")), 0);
    QString collectives = read("collectives.txt");
    QVERIFY2(collectives.startsWith("11 collectives per step"), qPrintable(collectives));
    QCOMPARE(collectives.count("all_reduce over 'data'"), 9);
    QVERIFY(read("plan.txt").contains("P(None, 'model')"));
    // Every pass after the partitioner, each as text and DOT; the last still holds the collectives.
    QStringList steps = spmd.entryList({"[0-9][0-9]_*.tir"}, QDir::Files, QDir::Name);
    QVERIFY2(steps.size() > 2, qPrintable(steps.join(' ')));
    for (const QString& s : steps) QVERIFY2(spmd.exists(QString(s).replace(".tir", ".dot")), qPrintable(s));
    QCOMPARE(read(steps.last()).count(QRegularExpression("all_reduce\\(")), 11);
  }

  void badArgumentsAreMessages() {
    Run r = tessera({"ir", "--example", "nosuch"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("unknown example"));
    Run b = tessera({"ir", "--batch", "0"});
    QCOMPARE(b.exitCode, 1);
    QVERIFY(b.err.contains("positive"));
    // A numeric option out of range is a one-line error naming it, never a silent default.
    const QString project = QString(TSR_SAMPLES) + "/gpt2_mini";
    for (const QStringList& args : QList<QStringList>{{"train", project, "--steps", "-5"},
                                                      {"train", project, "--stop-at", "-1"},
                                                      {"bench", project, "--batch", "0"},
                                                      {"bench", project, "--seq", "0"},
                                                      {"bench", project, "--top", "-3"},
                                                      {"bench", project, "--steps", "0"},
                                                      {"bench", project, "--sgemm", "-5"},
                                                      {"profile", project, "--batch", "-3"},
                                                      {"generate", project, "--tokens", "-5"},
                                                      {"generate", project, "--temperature", "-1"},
                                                      {"generate", project, "--temperature", "nan"}}) {
      Run r = tessera(args);
      QVERIFY2(r.exitCode != 0, qPrintable(args.join(' ')));
      QVERIFY2(r.err.startsWith(args[2] + ": " + args[3] + " is not a "), qPrintable(args.join(' ') + ": " + r.err));
    }
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestCli)
#include "test_cli.moc"
