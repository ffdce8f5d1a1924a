// Training: safetensors round trips and atomic writes; a run whose loss falls; a resumed run that ends with the
// same parameters, bit for bit, as an uninterrupted one; metrics in the run store.
#include <QtTest>

#include <QProcess>
#include <QTemporaryDir>
#include <QThread>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <sqlite3.h>

#include "engine/nn/gpt2.h"
#include "engine/project/project.h"
#include "engine/random/random.h"
#include "engine/transform/api.h"
#include "engine/store/run_store.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"

using namespace tsr;

namespace {

const char* kMlpProject = R"(
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 12
batch_size = 8
optimizer = "adamw"
lr = 1e-2
warmup_steps = 2
eval_every = 6
log_every = 1
seed = 3
)";

Result<project::Project> writeProject(const QString& dir, const std::string& toml) {
  std::ofstream(dir.toStdString() + "/project.toml") << toml;
  return project::loadProject(dir.toStdString());
}

std::vector<uint8_t> bytesOf(const Array& a) {
  const auto* p = static_cast<const uint8_t*>(a.buffer()->data());
  return std::vector<uint8_t>(p, p + a.aval().bytes());
}

}  // namespace

class TestTrain : public QObject {
  Q_OBJECT
 private slots:
  void safetensorsRoundTrip() {
    QTemporaryDir dir;
    std::string path = dir.filePath("t.safetensors").toStdString();
    train::SafetensorsFile f;
    f.tensors["a.weight"] = Array::fromVector({1.5, -2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
    f.tensors["b"] = Array::fromVector({1, 2, 3}, Shape{3}, DType::BF16);
    f.tensors["c"] = Array::fromVector(std::vector<int32_t>{7}, Shape{});
    f.metadata["step"] = "42";
    QVERIFY(train::writeSafetensors(path, f).ok());
    // The layout by hand: 8-byte little-endian header length, then JSON starting with '{'.
    std::ifstream in(path, std::ios::binary);
    unsigned char len[8];
    in.read(reinterpret_cast<char*>(len), 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
    QCOMPARE(n % 8, uint64_t(0));
    QCOMPARE(static_cast<char>(in.get()), '{');
    QCOMPARE(std::filesystem::file_size(path), 8 + n + 24 + 6 + 4);

    auto back = train::readSafetensors(path);
    QVERIFY2(back.ok(), back.ok() ? "" : back.error().message.c_str());
    QCOMPARE(back->metadata["step"], std::string("42"));
    QCOMPARE(back->tensors["a.weight"].toDoubles(), (std::vector<double>{1.5, -2, 3, 4, 5, 6}));
    QCOMPARE(back->tensors["b"].dtype(), DType::BF16);
    QCOMPARE(back->tensors["c"].shape(), Shape{});
    // No temporary files are left behind.
    int files = 0;
    for (auto& e : std::filesystem::directory_iterator(dir.path().toStdString())) files += e.is_regular_file();
    QCOMPARE(files, 1);
  }

  void safetensorsBadFilesAreErrors() {
    QTemporaryDir dir;
    auto write = [&](const std::string& name, const std::string& bytes) {
      std::string p = dir.filePath(QString::fromStdString(name)).toStdString();
      std::ofstream(p, std::ios::binary) << bytes;
      return p;
    };
    QVERIFY(!train::readSafetensors(write("short", "abc")).ok());
    std::string hdr = R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
    std::string lenBytes(8, '\0');
    lenBytes[0] = static_cast<char>(hdr.size());
    auto truncated = train::readSafetensors(write("trunc", lenBytes + hdr + std::string(8, '\0')));
    QVERIFY(!truncated.ok());
    QVERIFY2(truncated.error().message.find("'x'") != std::string::npos, truncated.error().message.c_str());
    std::string bad = R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})";
    lenBytes[0] = static_cast<char>(bad.size());
    QVERIFY(!train::readSafetensors(write("dtype", lenBytes + bad + "z")).ok());
    QVERIFY(!train::readSafetensors(dir.filePath("absent").toStdString()).ok());
    QVERIFY(!train::writeSafetensors("/nonexistent/dir/x.safetensors", {}).ok());
  }

  void huggingFaceWeightsLoad() {
    QTemporaryDir dir;
    nn::Gpt2Config cfg{40, 16, 2, 2, 8};
    nn::Gpt2 model(cfg);
    Tree original = model.init(random::key(5));
    Tree like = model.init(random::key(6));
    for (const char* prefix : {"transformer.", ""}) {
      // As GPT2LMHeadModel.save_pretrained writes it: a prefix, mask buffers, a tied head, and here wte in f16.
      train::SafetensorsFile hf;
      original.visit([&](const std::string& path, const Array& a) {
        hf.tensors[prefix + path] = path == "wte.weight" ? astype(a, DType::F16) : a;
      });
      hf.tensors[std::string(prefix) + "h.0.attn.bias"] = Array::ones({1, 1, 16, 16});
      hf.tensors["lm_head.weight"] = original.findPath("wte.weight")->leaf();
      std::string path = dir.filePath("model.safetensors").toStdString();
      QVERIFY(train::writeSafetensors(path, hf).ok());
      auto file = train::readSafetensors(path);
      QVERIFY(file.ok());
      auto loaded = train::treeFromHuggingFace(*file, like);
      QVERIFY2(loaded.ok(), loaded.ok() ? "" : loaded.error().message.c_str());
      QCOMPARE(loaded->paths(), original.paths());
      QCOMPARE(loaded->findPath("wte.weight")->leaf().dtype(), DType::F32);
      QCOMPARE(loaded->findPath("wte.weight")->leaf().toDoubles(),
               astype(astype(original.findPath("wte.weight")->leaf(), DType::F16), DType::F32).toDoubles());
      QCOMPARE(loaded->findPath("h.1.mlp.c_proj.weight")->leaf().toDoubles(),
               original.findPath("h.1.mlp.c_proj.weight")->leaf().toDoubles());
    }
    train::SafetensorsFile partial;
    partial.tensors["wte.weight"] = original.findPath("wte.weight")->leaf();
    auto bad = train::treeFromHuggingFace(partial, like);
    QVERIFY(!bad.ok());
    QVERIFY2(bad.error().message.find("wpe.weight") != std::string::npos, bad.error().message.c_str());
  }

  void lossFallsAndMetricsAreStored() {
    QTemporaryDir dir;
    auto p = writeProject(dir.path(), kMlpProject);
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    std::vector<std::string> lines;
    auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) { lines.push_back(e.text); });
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QCOMPARE(s->steps, int64_t(12));
    QVERIFY2(s->lastLoss < s->firstLoss * 0.7, qPrintable(QString("%1 -> %2").arg(s->firstLoss).arg(s->lastLoss)));
    auto db = store::RunStore::open(s->storePath);
    QVERIFY(db.ok());
    auto loss = db->metrics(s->runId, "loss");
    QCOMPARE(loss->size(), size_t(12));
    QCOMPARE(db->metrics(s->runId, "val_loss")->size(), size_t(2));
    QCOMPARE(db->run(s->runId)->status, store::RunStatus::Finished);
    QVERIFY(db->params(s->runId)->count("train.lr"));
  }

  void resumeMatchesAnUninterruptedRun() {
    QTemporaryDir a, b;
    auto pa = writeProject(a.path(), kMlpProject);
    auto pb = writeProject(b.path(), kMlpProject);
    QVERIFY(pa.ok() && pb.ok());
    auto quiet = [](const train::RunEvent&) {};
    QVERIFY(train::runTraining(*pa, {}, quiet).ok());

    train::RunOptions half;
    half.stopAtStep = 5;
    auto first = train::runTraining(*pb, half, quiet);
    QVERIFY(first.ok());
    train::RunOptions rest;
    rest.resume = true;
    auto second = train::runTraining(*pb, rest, quiet);
    QVERIFY2(second.ok(), second.ok() ? "" : second.error().message.c_str());
    QCOMPARE(second->runId, first->runId);  // the same run continues

    auto ca = train::readSafetensors(a.filePath("checkpoints/latest.safetensors").toStdString());
    auto cb = train::readSafetensors(b.filePath("checkpoints/latest.safetensors").toStdString());
    QVERIFY(ca.ok() && cb.ok());
    QCOMPARE(ca->metadata["step"], std::string("12"));
    QCOMPARE(cb->metadata["step"], std::string("12"));
    QCOMPARE(ca->tensors.size(), cb->tensors.size());
    for (const auto& [name, t] : ca->tensors) QVERIFY2(bytesOf(t) == bytesOf(cb->tensors[name]), name.c_str());
    auto db = store::RunStore::open(second->storePath);
    QCOMPARE(db->metrics(second->runId, "loss")->size(), size_t(12));
  }

  void gpt2OnTextTrainsItsTokenizerAndSamples() {
    QTemporaryDir dir;
    std::filesystem::create_directories(dir.filePath("data").toStdString());
    std::ofstream corpus(dir.filePath("data/corpus.txt").toStdString());
    for (int i = 0; i < 200; ++i) corpus << "the quick brown fox jumps over the lazy dog " << i % 7 << ".\n";
    corpus.close();
    auto p = writeProject(dir.path(), R"(
[model]
family = "gpt2"
block_size = 16
n_layer = 1
n_head = 2
n_embd = 16
[data]
kind = "text"
path = "data/corpus.txt"
vocab_size = 300
[train]
steps = 30
batch_size = 4
seq_len = 16
lr = 1e-2
warmup_steps = 3
eval_every = 15
log_every = 5
)");
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    std::string sample;
    auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) {
      if (e.kind == train::RunEvent::Kind::Sample) sample = e.text;
    });
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QVERIFY2(s->lastLoss < s->firstLoss * 0.6, qPrintable(QString("%1 -> %2").arg(s->firstLoss).arg(s->lastLoss)));
    QVERIFY(!sample.empty());
    QVERIFY(std::filesystem::exists(dir.filePath(".tessera/data/tokenizer/vocab.bpe").toStdString()));
  }

  void sigkillMidRunLeavesALoadableCheckpointAndAnIntactDatabase() {
    // checkpoint_every = 1: checkpoints and metrics are written all the time, so a kill lands mid-write.
    const char* project = R"(
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 1000000
batch_size = 8
optimizer = "adamw"
lr = 1e-3
eval_every = 0
log_every = 1
checkpoint_every = 1
)";
    for (int delayMs : {0, 150, 400, 1000}) {
      QTemporaryDir dir;
      QVERIFY(writeProject(dir.path(), project).ok());
      QProcess child;
      child.start(TSR_TRAIN_UNTIL_KILLED, {dir.path()});
      QVERIFY2(child.waitForStarted(10000), qPrintable(child.errorString()));
      // Wait for the first checkpoint, then let it run a while longer before SIGKILL.
      QByteArray out;
      while (!out.contains("started") && child.state() == QProcess::Running)
        if (child.waitForReadyRead(30000)) out += child.readAllStandardOutput(); else break;
      QVERIFY2(out.contains("started"), child.readAllStandardError().constData());
      QThread::msleep(static_cast<unsigned long>(delayMs));
      QVERIFY2(child.state() == QProcess::Running, child.readAllStandardError().constData());
      child.kill();  // SIGKILL on Unix
      QVERIFY(child.waitForFinished(10000));
      QCOMPARE(child.exitStatus(), QProcess::CrashExit);

      auto ck = train::readSafetensors(dir.filePath("checkpoints/latest.safetensors").toStdString());
      QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().message.c_str());
      int64_t step = std::stoll(ck->metadata["step"]);
      QVERIFY2(step >= 1 && step < 1000000, ck->metadata["step"].c_str());
      QVERIFY(!ck->tensors.empty());

      std::string dbPath = dir.filePath("runs.db").toStdString();
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(dbPath.c_str(), &db), SQLITE_OK);
      std::string check;
      char* err = nullptr;
      int rc = sqlite3_exec(
          db, "PRAGMA integrity_check;",
          [](void* s, int, char** v, char**) {
            *static_cast<std::string*>(s) += v[0] ? v[0] : "";
            return 0;
          },
          &check, &err);
      QVERIFY2(rc == SQLITE_OK, err ? err : "");
      sqlite3_close(db);
      QCOMPARE(check, std::string("ok"));
      auto store = store::RunStore::open(dbPath);
      QVERIFY2(store.ok(), store.ok() ? "" : store.error().message.c_str());
      auto runs = store->runs();
      QVERIFY(runs.ok());
      QCOMPARE(runs->size(), size_t(1));
      auto loss = store->metrics(runs->front().id, "loss");
      QVERIFY(loss.ok());
      QVERIFY(!loss->empty());

      // The killed run resumes from its checkpoint.
      auto p = project::loadProject(dir.path().toStdString());
      train::RunOptions resume;
      resume.resume = true;
      resume.stopAtStep = step + 2;
      resume.sampleTokens = 0;
      auto s = train::runTraining(*p, resume, [](const train::RunEvent&) {});
      QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
      QCOMPARE(s->runId, runs->front().id);
    }
  }
};

#include "tests/test_main.h"
TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestTrain)
#include "test_train.moc"
