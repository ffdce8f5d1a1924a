// The normal build's driver for a fuzz harness.
//
//   fuzz_NAME FILE_OR_FOLDER...                    run every file once (the corpus as a regression test)
//   fuzz_NAME --mutate N [--seed S] CORPUS...      then N inputs made by mutating the corpus's files
//
// Replaying, it runs LLVMFuzzerTestOneInput over every file it is given and every file of every folder, so
// the corpus (and each crasher added to it) is a regression test without clang; a crash fails the test as it
// would fail the fuzzer. --mutate is a blind search for machines without clang: random byte edits, splices and
// cuts of corpus files, with no coverage feedback (scripts/fuzz.sh's libFuzzer finds far more); an input that
// crashes is written to ./crash-<exec number> before the signal ends the process.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// The input being run, for the crash handler.
const std::vector<uint8_t>* gCurrent = nullptr;
char gCrashName[64] = "crash";

void onCrash(int sig) {
  if (gCurrent) {
    int fd = open(gCrashName, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ssize_t n = write(fd, gCurrent->data(), gCurrent->size());
      (void)n;
      close(fd);
    }
    const char msg[] = "fuzz replay: the input that crashed is in ";
    ssize_t n = write(2, msg, sizeof msg - 1);
    n = write(2, gCrashName, strlen(gCrashName));
    n = write(2, "\n", 1);
    (void)n;
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::vector<uint8_t> readAll(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One to four edits of a corpus input: flip a bit, set a byte to an interesting value, insert or erase a run
// of bytes, copy a run within the input, splice in a run of another input, or cut the input short.
std::vector<uint8_t> mutate(const std::vector<std::vector<uint8_t>>& corpus, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? static_cast<size_t>(rng() % n) : 0; };
  std::vector<uint8_t> x = corpus[pick(corpus.size())];
  static const uint8_t kInteresting[] = {0, 1, 0x7f, 0x80, 0xff, '0', '9', '-', '"', '[', ']', '{', '}', ',', '\n', ' ', '%', '.', 'e'};
  int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits; ++e) {
    switch (pick(7)) {
      case 0:
        if (!x.empty()) x[pick(x.size())] ^= static_cast<uint8_t>(1u << pick(8));
        break;
      case 1:
        if (!x.empty()) x[pick(x.size())] = kInteresting[pick(sizeof kInteresting)];
        break;
      case 2: {
        size_t at = pick(x.size() + 1), n = 1 + pick(8);
        for (size_t i = 0; i < n; ++i) x.insert(x.begin() + static_cast<long>(at), kInteresting[pick(sizeof kInteresting)]);
        break;
      }
      case 3:
        if (!x.empty()) {
          size_t at = pick(x.size()), n = std::min(x.size() - at, 1 + pick(16));
          x.erase(x.begin() + static_cast<long>(at), x.begin() + static_cast<long>(at + n));
        }
        break;
      case 4:
        if (!x.empty()) {
          size_t from = pick(x.size()), n = std::min(x.size() - from, 1 + pick(32)), to = pick(x.size() + 1);
          std::vector<uint8_t> run(x.begin() + static_cast<long>(from), x.begin() + static_cast<long>(from + n));
          x.insert(x.begin() + static_cast<long>(to), run.begin(), run.end());
        }
        break;
      case 5: {
        const auto& other = corpus[pick(corpus.size())];
        if (!other.empty()) {
          size_t from = pick(other.size()), n = std::min(other.size() - from, 1 + pick(64)), to = pick(x.size() + 1);
          x.insert(x.begin() + static_cast<long>(to), other.begin() + static_cast<long>(from),
                   other.begin() + static_cast<long>(from + n));
        }
        break;
      }
      default:
        x.resize(pick(x.size() + 1));
        break;
    }
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long long mutations = 0;
  uint64_t seed = 1;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mutate" && i + 1 < argc) {
      mutations = std::atoll(argv[++i]);
    } else if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (fs::is_directory(a)) {
      for (const auto& e : fs::recursive_directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
    } else {
      files.push_back(a);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "%s: no inputs (give corpus files or folders)\n", argv[0]);
    return 2;
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, onCrash);
  std::vector<std::vector<uint8_t>> corpus;
  for (const fs::path& f : files) {
    corpus.push_back(readAll(f));
    std::snprintf(gCrashName, sizeof gCrashName, "crash-replay");
    gCurrent = &corpus.back();
    std::fprintf(stderr, "%s\n", f.c_str());
    LLVMFuzzerTestOneInput(corpus.back().data(), corpus.back().size());
  }
  std::printf("%zu inputs ran\n", files.size());
  if (mutations <= 0) return 0;
  std::mt19937_64 rng(seed);
  auto start = std::chrono::steady_clock::now();
  for (long long n = 1; n <= mutations; ++n) {
    std::vector<uint8_t> x = mutate(corpus, rng);
    std::snprintf(gCrashName, sizeof gCrashName, "crash-%llu-%lld", static_cast<unsigned long long>(seed), n);
    gCurrent = &x;
    LLVMFuzzerTestOneInput(x.data(), x.size());
    if (n % 10000 == 0 || n == mutations) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%lld mutated inputs ran in %.0f s (%.0f/s)\n", n, s, n / s);
      std::fflush(stdout);
    }
  }
  return 0;
}
