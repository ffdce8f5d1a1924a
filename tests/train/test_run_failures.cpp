// Training runs that go wrong must not lose the work done: a run that diverges keeps its last finite
// checkpoint; temporary files of an interrupted save are removed at the next start; a resume that fails names
// the checkpoint.
#include <QtTest>

#include "tests/test_main.h"

#include <QTemporaryDir>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"

using namespace tsr;
namespace fs = std::filesystem;

namespace {

// SGD at a learning rate no model survives: step 1's loss is finite (the initial weights), then the weights
// blow up and the loss becomes NaN or Inf within a few steps. A checkpoint after every step; no step is logged,
// so the store never sees the NaN.
const char* kDiverging = R"(
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 50
batch_size = 8
optimizer = "sgd"
momentum = 0.0
lr = 1e30
warmup_steps = 0
grad_clip = 0.0
eval_every = 0
log_every = 1000
checkpoint_every = 1
)";

const char* kTiny = R"(
[model]
family = "mlp"
sizes = [16, 32, 4]
[data]
kind = "synthetic-digits"
[train]
steps = 4
batch_size = 8
optimizer = "adam"
lr = 1e-2
warmup_steps = 0
eval_every = 0
log_every = 1
checkpoint_every = 2
)";

Result<project::Project> writeProject(const QString& dir, const std::string& toml) {
  std::ofstream(dir.toStdString() + "/project.toml") << toml;
  return project::loadProject(dir.toStdString());
}

// Every element of every floating tensor, by a plain loop.
bool allFinite(const train::SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors)
    for (double v : t.toDoubles())
      if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

class TestRunFailures : public QObject {
  Q_OBJECT
 private slots:
  // The run stops at the first non-finite loss, names the step and the value, is stored as diverged, and the
  // checkpoint on disk is the last finite one (the closing save used to write the NaN state over it).
  void divergingRunKeepsItsLastFiniteCheckpoint() {
    QTemporaryDir dir;
    auto p = writeProject(dir.path(), kDiverging);
    QVERIFY2(p.ok(), p.ok() ? "" : p.error().message.c_str());
    int64_t lastCheckpoint = -1;
    auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) {
      if (e.kind == train::RunEvent::Kind::Checkpoint) lastCheckpoint = e.step;
    });
    QVERIFY(!s.ok());
    const std::string& m = s.error().message;
    const auto at = m.find("diverged at step ");
    QVERIFY2(at == 0, m.c_str());
    const int64_t divergedAt = std::stoll(m.substr(at + 17));
    QVERIFY2(divergedAt >= 2 && divergedAt < 50, m.c_str());
    QVERIFY2(m.find("nan") != std::string::npos || m.find("inf") != std::string::npos, m.c_str());
    QCOMPARE(lastCheckpoint, divergedAt - 1);

    auto ck = train::readSafetensors(dir.filePath("checkpoints/latest.safetensors").toStdString());
    QVERIFY2(ck.ok(), ck.ok() ? "" : ck.error().message.c_str());
    QVERIFY(allFinite(*ck));
    QCOMPARE(std::stoll(ck->metadata["step"]), lastCheckpoint);
    QVERIFY2(lastCheckpoint < divergedAt, m.c_str());

    auto db = store::RunStore::open(dir.filePath("runs.db").toStdString());
    QVERIFY(db.ok());
    auto run = db->run(1);
    QVERIFY(run.ok());
    QCOMPARE(run->status, store::RunStatus::Diverged);
    QCOMPARE(run->message, m);
  }

  // A save killed before its rename leaves ".latest.safetensors.tmp-PID-XXXXXX"; the next run removes those
  // whose process is gone, and leaves a live writer's file alone.
  void orphanTemporaryFilesAreRemovedAtTheNextStart() {
    QTemporaryDir dir;
    auto p = writeProject(dir.path(), kTiny);
    QVERIFY(p.ok());
    fs::path ckpt = dir.filePath("checkpoints").toStdString();
    fs::create_directories(ckpt);
    // Pids above the kernel's pid_max (at most 4194304) belong to no process.
    const fs::path orphan = ckpt / ".latest.safetensors.tmp-999999999-a1B2c3";
    const fs::path live = ckpt / fmt::format(".latest.safetensors.tmp-{}-x9Y8z7", ::getpid());
    std::ofstream(orphan) << "half a checkpoint";
    std::ofstream(live) << "a checkpoint being written";
    std::vector<std::string> info;
    auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) { info.push_back(e.text); });
    QVERIFY2(s.ok(), s.ok() ? "" : s.error().message.c_str());
    QVERIFY(!fs::exists(orphan));
    QVERIFY(fs::exists(live));
    QVERIFY(std::any_of(info.begin(), info.end(), [&](const std::string& l) {
      return l.find("removed " + orphan.string()) == 0;
    }));
  }

  // Every way a checkpoint can fail to resume names the file.
  void resumeErrorsNameTheCheckpoint() {
    QTemporaryDir dir;
    auto p = writeProject(dir.path(), kTiny);
    QVERIFY(p.ok());
    QVERIFY(train::runTraining(*p, {}, [](const train::RunEvent&) {}).ok());
    const std::string ckpt = dir.filePath("checkpoints/latest.safetensors").toStdString();
    auto good = train::readSafetensors(ckpt);
    QVERIFY(good.ok());
    train::RunOptions resume;
    resume.resume = true;
    resume.steps = 6;
    auto resumeWith = [&](const train::SafetensorsFile& f) -> std::string {
      if (!train::writeSafetensors(ckpt, f).ok()) return "(could not write the test's checkpoint)";
      auto r = train::runTraining(*p, resume, [](const train::RunEvent&) {});
      return r.ok() ? "(resumed)" : r.error().message;
    };
    train::SafetensorsFile missing = *good;
    missing.tensors.erase("params.layers.0.weight");
    train::SafetensorsFile badData = *good;
    badData.metadata["data"] = "{not a position";
    train::SafetensorsFile badStep = *good;
    badStep.metadata["step"] = "-3";
    train::SafetensorsFile otherRun = *good;
    otherRun.metadata["run"] = "77";
    for (const auto& [f, what] : std::vector<std::pair<train::SafetensorsFile, std::string>>{
             {missing, "missing tensor 'layers.0.weight'"}, {badData, "digit stream position"}, {badStep, "'step'"},
             {otherRun, "no run 77"}}) {
      std::string m = resumeWith(f);
      QVERIFY2(m.find(ckpt) != std::string::npos && m.find(what) != std::string::npos, m.c_str());
    }
    std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << "not a checkpoint at all";
    auto r = train::runTraining(*p, resume, [](const train::RunEvent&) {});
    QVERIFY(!r.ok());
    QVERIFY2(r.error().message.find(ckpt) != std::string::npos, r.error().message.c_str());
  }
};

TSR_TEST_MAIN(QTEST_GUILESS_MAIN, TestRunFailures)
#include "test_run_failures.moc"
