// Training: safetensors round trips and atomic writes; a run whose loss falls; a resumed run that ends with the
// same parameters, bit for bit, as an uninterrupted one; metrics in the run store.
#include "tests/check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sqlite3.h>

#include "engine/nn/gpt2.h"
#include "engine/project/project.h"
#include "engine/random/random.h"
#include "engine/transform/api.h"
#include "engine/store/run_store.h"
#include "engine/train/run.h"
#include "engine/train/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/train/project_files.h"

using namespace tsr;
using test::writeProject;

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

// A child process whose stdout and stderr the test reads through pipes.
class Child {
 public:
  ~Child() {
    if (m_pid > 0 && running()) {
      ::kill(m_pid, SIGKILL);
      waitForFinished(10000);
    }
    for (int fd : m_fds)
      if (fd >= 0) ::close(fd);
  }

  // Starts program with one argument; false when it cannot be started.
  bool start(const std::string& program, const std::string& arg) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return false;
    if (pipe2(err, O_CLOEXEC) != 0) return false;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(arg.c_str()), nullptr};
    int rc = posix_spawn(&m_pid, program.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    m_fds[0] = out[0];
    m_fds[1] = err[0];
    if (rc != 0) m_pid = -1;
    return rc == 0;
  }

  // Reads both pipes until stdout holds `text`, or nothing arrives for timeoutMs, or both pipes close.
  bool waitForOutput(const std::string& text, int timeoutMs) {
    while (m_out.find(text) == std::string::npos && (m_fds[0] >= 0 || m_fds[1] >= 0))
      if (!readSome(timeoutMs)) break;
    return m_out.find(text) != std::string::npos;
  }

  // What the child has written to stderr so far.
  const std::string& errorOutput() {
    readSome(0);
    return m_err;
  }

  bool running() {
    if (m_pid <= 0 || m_finished) return false;
    int status = 0;
    if (waitpid(m_pid, &status, WNOHANG) == m_pid) finish(status);
    return !m_finished;
  }

  void kill() { ::kill(m_pid, SIGKILL); }

  bool waitForFinished(int timeoutMs) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (running() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return m_finished;
  }

  // Ended by a signal (a crash or a kill) rather than by exit.
  bool crashed() const { return m_finished && WIFSIGNALED(m_status); }

 private:
  void finish(int status) {
    m_finished = true;
    m_status = status;
  }

  // One poll of both pipes; false when nothing arrived within timeoutMs.
  bool readSome(int timeoutMs) {
    pollfd p[2] = {{m_fds[0], POLLIN, 0}, {m_fds[1], POLLIN, 0}};
    if (::poll(p, 2, timeoutMs) <= 0) return false;
    std::string* into[2] = {&m_out, &m_err};
    for (int i = 0; i < 2; ++i) {
      if (m_fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = ::read(m_fds[i], buf, sizeof buf);
      if (n > 0) {
        into[i]->append(buf, static_cast<size_t>(n));
      } else {
        ::close(m_fds[i]);
        m_fds[i] = -1;
      }
    }
    return true;
  }

  pid_t m_pid = -1;
  int m_fds[2] = {-1, -1};
  std::string m_out, m_err;
  bool m_finished = false;
  int m_status = 0;
};

std::vector<uint8_t> bytesOf(const Array& a) {
  const auto* p = static_cast<const uint8_t*>(a.buffer()->data());
  return std::vector<uint8_t>(p, p + a.aval().bytes());
}

}  // namespace

TEST_CASE("safetensorsRoundTrip") {
  test::TempDir dir;
  std::string path = dir.filePath("t.safetensors");
  train::SafetensorsFile f;
  f.tensors["a.weight"] = Array::fromVector({1.5, -2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
  f.tensors["b"] = Array::fromVector({1, 2, 3}, Shape{3}, DType::BF16);
  f.tensors["c"] = Array::fromVector(std::vector<int32_t>{7}, Shape{});
  f.metadata["step"] = "42";
  REQUIRE(train::writeSafetensors(path, f).ok());
  // The layout by hand: 8-byte little-endian header length, then JSON starting with '{'.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  TSR_COMPARE(n % 8, uint64_t(0));
  TSR_COMPARE(static_cast<char>(in.get()), '{');
  TSR_COMPARE(std::filesystem::file_size(path), 8 + n + 24 + 6 + 4);

  auto back = train::readSafetensors(path);
  REQUIRE_MESSAGE(back.ok(), back.error().message);
  TSR_COMPARE(back->metadata["step"], std::string("42"));
  TSR_COMPARE(back->tensors["a.weight"].toDoubles(), (std::vector<double>{1.5, -2, 3, 4, 5, 6}));
  TSR_COMPARE(back->tensors["b"].dtype(), DType::BF16);
  TSR_COMPARE(back->tensors["c"].shape(), Shape{});
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  TSR_COMPARE(files, 1);
}

TEST_CASE("safetensorsBadFilesAreErrors") {
  test::TempDir dir;
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::string p = dir.filePath(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  REQUIRE(!train::readSafetensors(write("short", "abc")).ok());
  std::string hdr = R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  std::string lenBytes(8, '\0');
  lenBytes[0] = static_cast<char>(hdr.size());
  auto truncated = train::readSafetensors(write("trunc", lenBytes + hdr + std::string(8, '\0')));
  REQUIRE(!truncated.ok());
  REQUIRE_MESSAGE(truncated.error().message.find("'x'") != std::string::npos, truncated.error().message.c_str());
  std::string bad = R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})";
  lenBytes[0] = static_cast<char>(bad.size());
  REQUIRE(!train::readSafetensors(write("dtype", lenBytes + bad + "z")).ok());
  REQUIRE(!train::readSafetensors(dir.filePath("absent")).ok());
  REQUIRE(!train::writeSafetensors("/nonexistent/dir/x.safetensors", {}).ok());
}

TEST_CASE("huggingFaceWeightsLoad") {
  test::TempDir dir;
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
    std::string path = dir.filePath("model.safetensors");
    REQUIRE(train::writeSafetensors(path, hf).ok());
    auto file = train::readSafetensors(path);
    REQUIRE(file.ok());
    auto loaded = train::treeFromHuggingFace(*file, like);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
    TSR_COMPARE(loaded->paths(), original.paths());
    TSR_COMPARE(loaded->findPath("wte.weight")->leaf().dtype(), DType::F32);
    TSR_COMPARE(loaded->findPath("wte.weight")->leaf().toDoubles(),
                astype(astype(original.findPath("wte.weight")->leaf(), DType::F16), DType::F32).toDoubles());
    TSR_COMPARE(loaded->findPath("h.1.mlp.c_proj.weight")->leaf().toDoubles(),
                original.findPath("h.1.mlp.c_proj.weight")->leaf().toDoubles());
  }
  train::SafetensorsFile partial;
  partial.tensors["wte.weight"] = original.findPath("wte.weight")->leaf();
  auto bad = train::treeFromHuggingFace(partial, like);
  REQUIRE(!bad.ok());
  REQUIRE_MESSAGE(bad.error().message.find("wpe.weight") != std::string::npos, bad.error().message.c_str());
}

TEST_CASE("lossFallsAndMetricsAreStored") {
  test::TempDir dir;
  auto p = writeProject(dir.path(), kMlpProject);
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  std::vector<std::string> lines;
  auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) { lines.push_back(e.text); });
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  TSR_COMPARE(s->steps, int64_t(12));
  REQUIRE_MESSAGE(s->lastLoss < s->firstLoss * 0.7, s->firstLoss << " -> " << s->lastLoss);
  auto db = store::RunStore::open(s->storePath);
  REQUIRE(db.ok());
  auto loss = db->metrics(s->runId, "loss");
  TSR_COMPARE(loss->size(), size_t(12));
  TSR_COMPARE(db->metrics(s->runId, "val_loss")->size(), size_t(2));
  TSR_COMPARE(db->run(s->runId)->status, store::RunStatus::Finished);
  REQUIRE(db->params(s->runId)->count("train.lr"));
}

TEST_CASE("resumeMatchesAnUninterruptedRun") {
  test::TempDir a, b;
  auto pa = writeProject(a.path(), kMlpProject);
  auto pb = writeProject(b.path(), kMlpProject);
  REQUIRE((pa.ok() && pb.ok()));
  auto quiet = [](const train::RunEvent&) {};
  REQUIRE(train::runTraining(*pa, {}, quiet).ok());

  train::RunOptions half;
  half.stopAtStep = 5;
  auto first = train::runTraining(*pb, half, quiet);
  REQUIRE(first.ok());
  train::RunOptions rest;
  rest.resume = true;
  auto second = train::runTraining(*pb, rest, quiet);
  REQUIRE_MESSAGE(second.ok(), second.error().message);
  TSR_COMPARE(second->runId, first->runId);  // the same run continues

  auto ca = train::readSafetensors(a.filePath("checkpoints/run-1/latest.safetensors"));
  auto cb = train::readSafetensors(b.filePath("checkpoints/run-1/latest.safetensors"));
  REQUIRE((ca.ok() && cb.ok()));
  TSR_COMPARE(ca->metadata["step"], std::string("12"));
  TSR_COMPARE(cb->metadata["step"], std::string("12"));
  TSR_COMPARE(ca->tensors.size(), cb->tensors.size());
  for (const auto& [name, t] : ca->tensors) {
    const std::string& tensor = name;
    REQUIRE_MESSAGE(bytesOf(t) == bytesOf(cb->tensors[name]), tensor);
  }
  auto db = store::RunStore::open(second->storePath);
  TSR_COMPARE(db->metrics(second->runId, "loss")->size(), size_t(12));
}

TEST_CASE("gpt2OnTextTrainsItsTokenizerAndSamples") {
  test::TempDir dir;
  std::filesystem::create_directories(dir.filePath("data"));
  std::ofstream corpus(dir.filePath("data/corpus.txt"));
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
  REQUIRE_MESSAGE(p.ok(), p.error().message);
  std::string sample;
  auto s = train::runTraining(*p, {}, [&](const train::RunEvent& e) {
    if (e.kind == train::RunEvent::Kind::Sample) sample = e.text;
  });
  REQUIRE_MESSAGE(s.ok(), s.error().message);
  REQUIRE_MESSAGE(s->lastLoss < s->firstLoss * 0.6, s->firstLoss << " -> " << s->lastLoss);
  REQUIRE(!sample.empty());
  REQUIRE(std::filesystem::exists(dir.filePath(".tessera/data/tokenizer/vocab.bpe")));
}

// [precision] compute = "bf16" (autocast): the same GPT-2 run as in f32 follows the f32 losses to bf16's
// precision, samples, and keeps f32 parameters and optimizer state (the checkpoint's tensors).
TEST_CASE("bf16ComputeFollowsTheF32Run") {
  auto write = [](const test::TempDir& dir, const std::string& compute) {
    std::filesystem::create_directories(dir.filePath("data"));
    std::ofstream corpus(dir.filePath("data/corpus.txt"));
    for (int i = 0; i < 200; ++i) corpus << "the quick brown fox jumps over the lazy dog " << i % 7 << ".\n";
    corpus.close();
    return writeProject(dir.path(), R"(
[model]
family = "gpt2"
block_size = 16
n_layer = 2
n_head = 2
n_embd = 32
[data]
kind = "text"
path = "data/corpus.txt"
vocab_size = 300
[train]
steps = 20
batch_size = 4
seq_len = 16
lr = 3e-3
warmup_steps = 3
log_every = 1
)", {"precision.compute=" + compute});
  };
  test::TempDir d32, d16;
  auto p32 = write(d32, "f32");
  auto p16 = write(d16, "bf16");
  REQUIRE_MESSAGE((p32.ok() && p16.ok()), (p32.ok() ? p16.error().message : p32.error().message));
  std::string sample;
  auto quiet = [](const train::RunEvent&) {};
  auto r32 = train::runTraining(*p32, {}, quiet);
  auto r16 = train::runTraining(*p16, {}, [&](const train::RunEvent& e) {
    if (e.kind == train::RunEvent::Kind::Sample) sample = e.text;
  });
  REQUIRE_MESSAGE(r32.ok(), r32.error().message);
  REQUIRE_MESSAGE(r16.ok(), r16.error().message);
  auto l32 = store::RunStore::open(r32->storePath)->metrics(r32->runId, "loss");
  auto l16 = store::RunStore::open(r16->storePath)->metrics(r16->runId, "loss");
  REQUIRE((l32.ok() && l16.ok()));
  REQUIRE(l32->size() == 20);
  REQUIRE(l16->size() == 20);
  double worst = 0;
  for (size_t i = 0; i < l32->size(); ++i)
    worst = std::max(worst, std::fabs((*l16)[i].value - (*l32)[i].value) / (*l32)[i].value);
  // bf16 products (8 bits of mantissa) over 20 AdamW steps: within 2% of the f32 losses, and not equal to them.
  REQUIRE_MESSAGE(worst < 0.02, "largest relative loss difference " << worst);
  REQUIRE_MESSAGE(worst > 0, "the bf16 run gave the f32 losses exactly: autocast did not apply");
  REQUIRE_MESSAGE(r16->lastLoss < r16->firstLoss * 0.8, r16->firstLoss << " -> " << r16->lastLoss);
  REQUIRE(!sample.empty());
  auto ck = train::readSafetensors(d16.filePath("checkpoints/run-1/latest.safetensors"));
  REQUIRE(ck.ok());
  for (const auto& entry : ck->tensors) {  // (clang 14, the sanitizer build, cannot capture a structured binding)
    const DType t = entry.second.dtype();
    if (t != DType::U32 && t != DType::I32 && t != DType::I64)
      REQUIRE_MESSAGE(t == DType::F32, entry.first << " is " << dtypeName(t));
  }
}

TEST_CASE("sigkillMidRunLeavesALoadableCheckpointAndAnIntactDatabase") {
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
    test::TempDir dir;
    REQUIRE(writeProject(dir.path(), project).ok());
    Child child;
    REQUIRE_MESSAGE(child.start(TSR_TRAIN_UNTIL_KILLED, dir.path()), "cannot start " << TSR_TRAIN_UNTIL_KILLED);
    // Wait for the first checkpoint, then let it run a while longer before SIGKILL.
    REQUIRE_MESSAGE(child.waitForOutput("started", 30000), child.errorOutput());
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    REQUIRE_MESSAGE(child.running(), child.errorOutput());
    child.kill();
    REQUIRE(child.waitForFinished(10000));
    REQUIRE(child.crashed());

    auto ck = train::readSafetensors(dir.filePath("checkpoints/run-1/latest.safetensors"));
    REQUIRE_MESSAGE(ck.ok(), ck.error().message);
    int64_t step = std::stoll(ck->metadata["step"]);
    REQUIRE_MESSAGE((step >= 1 && step < 1000000), ck->metadata["step"].c_str());
    REQUIRE(!ck->tensors.empty());

    std::string dbPath = dir.filePath("runs.db");
    sqlite3* db = nullptr;
    TSR_COMPARE(sqlite3_open(dbPath.c_str(), &db), SQLITE_OK);
    std::string check;
    char* err = nullptr;
    int rc = sqlite3_exec(
        db, "PRAGMA integrity_check;",
        [](void* s, int, char** v, char**) {
          *static_cast<std::string*>(s) += v[0] ? v[0] : "";
          return 0;
        },
        &check, &err);
    REQUIRE_MESSAGE(rc == SQLITE_OK, (err ? err : ""));
    sqlite3_close(db);
    TSR_COMPARE(check, std::string("ok"));
    auto store = store::RunStore::open(dbPath);
    REQUIRE_MESSAGE(store.ok(), store.error().message);
    auto runs = store->runs();
    REQUIRE(runs.ok());
    TSR_COMPARE(runs->size(), size_t(1));
    auto loss = store->metrics(runs->front().id, "loss");
    REQUIRE(loss.ok());
    REQUIRE(!loss->empty());

    // The killed run resumes from its checkpoint.
    auto p = project::loadProject(dir.path());
    train::RunOptions resume;
    resume.resume = true;
    resume.stopAtStep = step + 2;
    resume.sampleTokens = 0;
    auto s = train::runTraining(*p, resume, [](const train::RunEvent&) {});
    REQUIRE_MESSAGE(s.ok(), s.error().message);
    TSR_COMPARE(s->runId, runs->front().id);
  }
}
