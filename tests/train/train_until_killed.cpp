// A helper for test_train: trains the project in argv[1] until it is killed (the test sends SIGKILL while it
// writes checkpoints and metrics). Prints "started" once the first checkpoint is written.
#include <cstdio>

#include "engine/backends/backends.h"
#include "engine/project/project.h"
#include "engine/train/run.h"

int main(int argc, char** argv) {
  tsr::registerBackends();
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PROJECT_DIR\n", argv[0]);
    return 2;
  }
  auto p = tsr::project::loadProject(argv[1]);
  if (!p.ok()) {
    std::fprintf(stderr, "%s\n", p.error().message.c_str());
    return 1;
  }
  tsr::train::RunOptions options;
  options.sampleTokens = 0;
  bool announced = false;
  auto s = tsr::train::runTraining(*p, options, [&](const tsr::train::RunEvent& e) {
    if (e.kind == tsr::train::RunEvent::Kind::Checkpoint && !announced) {
      std::printf("started\n");
      std::fflush(stdout);
      announced = true;
    }
  });
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.error().message.c_str());
    return 1;
  }
  return 0;
}
