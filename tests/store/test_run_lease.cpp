// Run leases: one holder per run, asked without taking, dropped when the holder goes, a SIGKILL included.
#include "tests/check.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include "engine/store/run_lease.h"
#include "tests/temp_dir.h"

using namespace tsr;
using namespace tsr::store;

TEST_CASE("oneHolderPerRun") {
  test::TempDir dir;
  const std::string store = dir.filePath("runs.db");
  auto free = RunLease::held(store, 3);
  REQUIRE(free.ok());
  REQUIRE(!*free);  // no lock file yet: nobody holds anything
  REQUIRE(!std::filesystem::exists(leaseFilePath(store)));  // asking makes no file

  auto first = RunLease::tryTake(store, 3);
  REQUIRE_MESSAGE(first.ok(), first.error().message);
  REQUIRE(first->has_value());
  TSR_COMPARE((*first)->run(), int64_t(3));
  TSR_COMPARE(leaseFilePath(store), dir.filePath("runs.db-leases"));
  REQUIRE(std::filesystem::exists(leaseFilePath(store)));

  // A second lease of the same run, even in this process, is refused; another run's is not.
  auto second = RunLease::tryTake(store, 3);
  REQUIRE(second.ok());
  REQUIRE(!second->has_value());
  REQUIRE(*RunLease::held(store, 3));
  REQUIRE(!*RunLease::held(store, 2));
  REQUIRE(!*RunLease::held(store, 4));
  auto other = RunLease::tryTake(store, 4);
  REQUIRE(other.ok());
  REQUIRE(other->has_value());

  // Moved, it still holds; released, the run is free to take.
  std::optional<RunLease> moved = std::move(*first);
  REQUIRE(*RunLease::held(store, 3));
  moved.reset();
  REQUIRE(!*RunLease::held(store, 3));
  auto again = RunLease::tryTake(store, 3);
  REQUIRE(again.ok());
  REQUIRE(again->has_value());
  REQUIRE(*RunLease::held(store, 4));

  REQUIRE(!RunLease::tryTake(store, 0).ok());
  REQUIRE(!RunLease::held(store, -1).ok());
}

// A holder killed by SIGKILL closes nothing itself: the kernel drops its lock, and the run is free at once.
TEST_CASE("aKilledHolderLeavesNoLease") {
  test::TempDir dir;
  const std::string store = dir.filePath("runs.db");
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto lease = RunLease::tryTake(store, 7);
    const char ok = lease.ok() && lease->has_value() ? 'y' : 'n';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char ok = 0;
  REQUIRE(::read(ready[0], &ok, 1) == 1);
  ::close(ready[0]);
  TSR_COMPARE(ok, 'y');
  REQUIRE(*RunLease::held(store, 7));
  auto refused = RunLease::tryTake(store, 7);
  REQUIRE(refused.ok());
  REQUIRE(!refused->has_value());

  REQUIRE(::kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  REQUIRE(!*RunLease::held(store, 7));
  auto taken = RunLease::tryTake(store, 7);
  REQUIRE(taken.ok());
  REQUIRE(taken->has_value());
}
