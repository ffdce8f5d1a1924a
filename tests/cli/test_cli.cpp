// The tessera command line, run as a user runs it: ops and IR, projects and families, training the samples, compile,
// memory and sharding, and arguments. Runs, the run store and checkpoints: test_cli_runs.cpp.
#include <QtTest>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QTemporaryDir>

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
    // A [sharding] pattern that is not a regex is said with its line on any mesh (on one device it was never read).
    check(QByteArray(toml) + "[sharding]\n'layers\\.(0' = \"None, model\"\n", {},
          file + ":18: sharding rule 'layers\\.(0' is not a regular expression (");
    // A rule given by --set is named by it (it was "project.toml:0").
    check(toml, {"sharding.x=1"}, "--set sharding.x=1 (over " + file + "): sharding rule 'x' must be a string "
                                  "PartitionSpec");
    check(toml, {"sharding.(=data"}, "--set sharding.(=data (over " + file + "): sharding rule '(' is not a regular "
                                     "expression (");
  }

  // Mistakes in a project say where they are, as `tessera train` and `model-info` meet them: a [mesh] whose
  // sizes and names disagree at the axes' line; an empty project.toml names the defaults that ask for a corpus;
  // a missing model.py at the line of the key that names it.
  void projectMistakesSayWhereTheyAre() {
    QTemporaryDir dir;
    const QString file = dir.filePath("project.toml");
    auto fails = [&](const QStringList& args, const QString& message) {
      Run r = tessera(args);
      QVERIFY2(!r.crashed && r.exitCode == 1 && r.err.contains(message),
               qPrintable(args.join(' ') + ": exit " + QString::number(r.exitCode) + ": " + r.err + "\nlacks: " + message));
    };
    writeFile(file, QByteArray(kTinyMlp) + "[mesh]\nshape = [2, 2, 1]\naxes = [\"data\", \"model\"]\n");
    fails({"model-info", dir.path()}, file + ":19: [mesh] has 3 sizes (shape = [2, 2, 1]) but 2 axis names (axes = "
                                      "[\"data\", \"model\"]): give one name per size");
    writeFile(file, "");
    fails({"train", dir.path(), "--quiet"},
          file + ": [data] path is required: the default model (gpt2: project.toml names no [model] family) trains on "
                 "text ([data] kind = \"text\", its default) read from a corpus file; add path = \"corpus.txt\" (a "
                 "UTF-8 text file in the project folder) under [data], or name a [model] family (tessera families "
                 "lists them)");
    writeFile(file, "[model]\nfamily = \"gpt2\"\n[data]\nkind = \"text\"\n");
    fails({"train", dir.path(), "--quiet"},
          file + ":4: [data] path is required: the gpt2 model trains on text ([data] kind = \"text\") read from a "
                 "corpus file; add path = \"corpus.txt\" (a UTF-8 text file in the project folder) under [data]\n");
    QVERIFY(!QFile::exists(dir.filePath("runs.db")));
    writeFile(file, "[project]\nname = \"py\"\n\n[model]\npython = \"model.py\"\ninput_shape = [4]\nclasses = 2\n");
    fails({"model-info", dir.path()}, file + ":5: [model] python = \"model.py\": " +
                                          QDir(dir.path()).absoluteFilePath("model.py") + " does not exist");
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

  // `tessera new ""` would write into this folder; a corpus whose name a different file in data/ has would be
  // silently replaced by that file.
  // The command new tells the user to type is one a shell reads back: a folder with a space or a quote quoted.
  void newProjectsCommandLineIsQuoted() {
    QTemporaryDir dir;
    const QString folder = dir.filePath("it's my proj");
    Run r = tessera({"new", folder, "--family", "mlp"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("train it with `tessera train '" + dir.filePath("it'\\''s my proj") + "'`"),
             qPrintable(r.out));
    QVERIFY(QFile::exists(folder + "/project.toml"));
  }

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

  // A batch the mesh's first axis does not divide is said in the project's terms, by shard plan and memory as
  // by train: the key, its value and where it was set, the axis and its size (it named the traced array,
  // "inputs [8190,784]", which the user never wrote).
  void aBatchTheMeshDoesNotDivideNamesBatchSize() {
    const QString project = TSR_SAMPLES "/mlp_sharding";
    for (const QString& command : {QString("shard plan"), QString("memory")}) {
      Run r = tessera(command.split(' ') + QStringList{project, "--set", "train.batch_size=8190"});
      QCOMPARE(r.exitCode, 1);
      QVERIFY2(r.err.startsWith("tessera " + command + ": " + project + "/project.toml: [train] batch_size 8190 "
                                "(--set train.batch_size=8190) is split over the mesh's first axis 'data' of size 4, "
                                "which does not divide it; make batch_size a multiple of 4 (the nearest: 8188 or "
                                "8192)\n"),
               qPrintable(r.err));
      QVERIFY2(!r.err.contains("inputs ["), qPrintable(r.err));
    }
    Run small = tessera({"shard", "plan", project, "--set", "train.batch_size=2", "--no-values"});
    QCOMPARE(small.exitCode, 1);
    QVERIFY2(small.err.contains("[train] batch_size 2 (--set train.batch_size=2) is split over the mesh's first axis "
                                "'data' of size 4, which does not divide it; make batch_size a multiple of 4 (the "
                                "nearest: 4)"),
             qPrintable(small.err));
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

  // Every command's --help: its usage line, and no option shown with CLI11's internals ("--no-values{false}").
  void everyCommandHasHelp() {
    Run top = tessera({"--help"});
    QCOMPARE(top.exitCode, 0);
    const QStringList commands{"ops", "ir", "compile", "train", "runs", "model-info", "eval", "generate", "logits",
                               "bench", "profile", "shard", "plugins", "families", "new", "sweep", "memory",
                               "profile-diff"};
    for (const QString& command : commands)
      QVERIFY2(top.out.contains(QRegularExpression("\\n  " + command + " {2,}\\S")), qPrintable(command));
    QList<QStringList> all;
    for (const QString& command : commands) all.append(QStringList{command});
    for (const char* sub : {"show", "plan"}) all.append(QStringList{"shard", sub});
    for (const char* sub : {"list", "show", "export", "export-trace", "tag", "untag", "note", "rename", "archive",
                            "unarchive", "delete"})
      all.append(QStringList{"runs", sub});
    for (const QStringList& command : all) {
      Run r = tessera(command + QStringList{"--help"});
      QVERIFY2(r.exitCode == 0 && r.out.contains("Usage: ") && r.out.contains(command.join(' ')),
               qPrintable(command.join(' ') + ": " + r.out + r.err));
      QVERIFY2(!r.out.contains(QRegularExpression("\\{(true|false)\\}")), qPrintable(r.out));
    }
  }

  void badArgumentsAreMessages() {
    // A value not of its option's type names the command, the option and what it takes (CLI11 said "Could not
    // convert: id = abc").
    Run id = tessera({"runs", "--db", "absent.db", "show", "abc"});
    QVERIFY2(id.exitCode != 0 && id.err.startsWith("tessera runs show: id: 'abc' is not a whole number"),
             qPrintable(id.err));
    Run run = tessera({"eval", TSR_SAMPLES "/gpt2_mini", "--run", "last"});
    QVERIFY2(run.exitCode != 0 && run.err.startsWith("tessera eval: --run: 'last' is not a whole number"),
             qPrintable(run.err));
    Run r = tessera({"ir", "--example", "nosuch"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY(r.err.contains("unknown example"));
    Run b = tessera({"ir", "--batch", "0"});
    QCOMPARE(b.exitCode, 1);
    QVERIFY(b.err.contains("positive"));
    // A numeric option out of range is a one-line error naming it, never a silent default.
    const QString project = QString(TSR_SAMPLES) + "/gpt2_mini";
    for (const QStringList& args : QList<QStringList>{{"train", project, "--steps", "-5"},
                                                      {"train", project, "--steps", "0"},
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
