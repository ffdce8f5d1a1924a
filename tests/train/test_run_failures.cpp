// Training runs that go wrong must not lose the work done: a run that diverges keeps its last finite
// checkpoint; temporary files of an interrupted save are removed at the next start; a resume that fails names
// the checkpoint.
#include "tests/check.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "engine/project/project.h"
#include "engine/store/run_store.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;
using test::writeProject;
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

// Every element of every floating tensor, by a plain loop.
bool allFinite(const train::SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors)
    for (double v : t.toDoubles())
      if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace

// The run stops at the first non-finite loss, names the step and the value, is stored as diverged, and the
// checkpoint on disk is the last finite one (the closing save used to write the NaN state over it).
TEST_CASE("divergingRunKeepsItsLastFiniteCheckpoint") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kDiverging);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  int64_t lastCheckpoint = -1;
  auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) {
    if (e.kind == train::RunEvent::Kind::Checkpoint) lastCheckpoint = e.step;
  });
  REQUIRE(!s.ok());
  const std::string& m = s.error().message;
  const auto at = m.find("diverged at step ");
  REQUIRE_MESSAGE(at == 0, m.c_str());
  const int64_t divergedAt = std::stoll(m.substr(at + 17));
  REQUIRE_MESSAGE((divergedAt >= 2 && divergedAt < 50), m.c_str());
  REQUIRE_MESSAGE((m.find("nan") != std::string::npos || m.find("inf") != std::string::npos), m.c_str());
  TSR_COMPARE(lastCheckpoint, divergedAt - 1);

  auto ck = train::readSafetensors(dir.filePath("checkpoints/run-1/latest.safetensors"));
  REQUIRE_MESSAGE(ck.ok(), ck.error().message);
  REQUIRE(allFinite(*ck));
  TSR_COMPARE(std::stoll(ck->metadata["step"]), lastCheckpoint);
  REQUIRE_MESSAGE(lastCheckpoint < divergedAt, m.c_str());

  auto db = store::RunStore::open(dir.filePath("runs.db"));
  REQUIRE(db.ok());
  auto run = db->run(1);
  REQUIRE(run.ok());
  TSR_COMPARE(run->status, store::RunStatus::Diverged);
  TSR_COMPARE(run->message, m);
}

// A save killed before its rename leaves ".latest.safetensors.tmp-PID-XXXXXX"; the next run removes those
// whose process is gone, and leaves a live writer's file alone.
TEST_CASE("orphanTemporaryFilesAreRemovedAtTheNextStart") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kTiny);
  REQUIRE(p.ok());
  fs::path ckpt = dir.filePath("checkpoints");
  fs::create_directories(ckpt);
  // Pids above the kernel's pid_max (at most 4194304) belong to no process.
  const fs::path orphan = ckpt / ".latest.safetensors.tmp-999999999-a1B2c3";
  const fs::path live = ckpt / fmt::format(".latest.safetensors.tmp-{}-x9Y8z7", ::getpid());
  std::ofstream(orphan) << "half a checkpoint";
  std::ofstream(live) << "a checkpoint being written";
  std::vector<std::string> info;
  auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) { info.push_back(e.text); });
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  REQUIRE(!fs::exists(orphan));
  REQUIRE(fs::exists(live));
  REQUIRE(std::any_of(info.begin(), info.end(), [&](const std::string& l) {
    return l.find("removed " + orphan.string()) == 0;
  }));
}

// Every way a checkpoint can fail to resume names the file.
TEST_CASE("resumeErrorsNameTheCheckpoint") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kTiny);
  REQUIRE(p.ok());
  REQUIRE(train::runTraining(*p, {}, [](const train::RunEvent&) {}).ok());
  const std::string ckpt = dir.filePath("checkpoints/run-1/latest.safetensors");
  auto good = train::readSafetensors(ckpt);
  REQUIRE(good.ok());
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
           {otherRun, "holds run 77, not run 1"}}) {
    std::string m = resumeWith(f);
    REQUIRE_MESSAGE((m.find(ckpt) != std::string::npos && m.find(what) != std::string::npos), m.c_str());
  }
  std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << "not a checkpoint at all";
  auto r = train::runTraining(*p, resume, [](const train::RunEvent&) {});
  REQUIRE(!r.ok());
  REQUIRE_MESSAGE(r.error().message.find(ckpt) != std::string::npos, r.error().message.c_str());
}
