// Two profiles compared (engine/train/profile_diff.h), on a store written by hand: the second compile fused
// differently (other node ids, fusion ids and kernel names), so kernels are matched through their nodes, and
// the times per step are worked out by hand.
#include "tests/check.h"

#include "engine/store/run_store.h"
#include "engine/train/profile_diff.h"
#include "tests/temp_dir.h"

using namespace tsr;

namespace {

store::KernelInfo kernel(int64_t fusion, std::string name, std::string kind, std::vector<int> nodes,
                         std::vector<std::string> ops) {
  return {fusion, "train_step", std::move(name), std::move(kind), std::move(nodes), std::move(ops), "l0"};
}

store::KernelEvent event(int64_t fusion, int64_t startNs, int64_t durationNs) {
  return {"cpu:0", 0, "k", fusion, startNs, durationNs, 0, 0};
}

}  // namespace

TEST_CASE("kernelsMatchThroughTheirNodes") {
  test::TempDir dir;
  auto db = store::RunStore::open(dir.path() + "/runs.db");
  REQUIRE_MESSAGE(db.ok(), db.error().message);
  // A: 2 profiled steps. dot_general alone (3 ms a step), add and tanh fused (1 ms a step).
  const int64_t runA = *db->createRun("a", "p", "");
  const int64_t pa = *db->createProfile(runA, "a", 0, 1);
  REQUIRE(db->addProfileKernels(pa, {kernel(0, "dot_general", "gemm", {3}, {"dot_general"}),
                                     kernel(1, "fusion.1 loop[add,tanh]", "loop", {4, 5}, {"add", "tanh"})}).ok());
  REQUIRE(db->addKernelEvents(pa, {event(0, 0, 3'000'000), event(1, 3'000'000, 1'000'000), event(0, 5'000'000, 3'000'000),
                                   event(1, 8'000'000, 1'000'000), event(99, 0, 50'000'000)}).ok());  // 99: another executable's
  // B: 1 profiled step. add fused into the gemm's epilogue (2.5 ms), tanh alone (0.5 ms); other ids throughout.
  const int64_t runB = *db->createRun("b", "p", "");
  const int64_t pb = *db->createProfile(runB, "b", 4, 4);
  REQUIRE(db->addProfileKernels(pb, {kernel(7, "fusion.7 gemm[dot_general,add]", "gemm", {10, 11}, {"dot_general", "add"}),
                                     kernel(8, "tanh", "opaque", {12}, {"tanh"})}).ok());
  REQUIRE(db->addKernelEvents(pb, {event(7, 0, 2'500'000), event(8, 2'500'000, 500'000)}).ok());

  auto d = train::diffProfiles(*db, runA, *db, runB);
  REQUIRE_MESSAGE(d.ok(), d.error().message);
  TSR_COMPARE(d->a.steps, int64_t(2));
  TSR_COMPARE(d->b.steps, int64_t(1));
  TSR_COMPARE(d->a.stepNs, 4'000'000.0);
  TSR_COMPARE(d->b.stepNs, 3'000'000.0);
  REQUIRE(!d->sameGraph);
  // The gemm of A is B's fusion.7 (they share dot_general), A's fusion.1 is B's tanh (the greedy pairing leaves
  // fusion.7 taken): 3 -> 2.5 ms and 1 -> 0.5 ms.
  REQUIRE(d->kernels.size() == 2);
  TSR_COMPARE(d->kernels[0].nameA, std::string("dot_general"));
  TSR_COMPARE(d->kernels[0].nameB, std::string("fusion.7 gemm[dot_general,add]"));
  TSR_COMPARE(d->kernels[0].nsA, 3'000'000.0);
  TSR_COMPARE(d->kernels[0].nsB, 2'500'000.0);
  TSR_COMPARE(d->kernels[1].nameA, std::string("fusion.1 loop[add,tanh]"));
  TSR_COMPARE(d->kernels[1].nameB, std::string("tanh"));
  TSR_COMPARE(d->kernels[1].nsB, 500'000.0);
  // Nodes, each kernel's time split among its nodes: dot_general 3 -> 1.25, add 0.5 -> 1.25, tanh 0.5 -> 0.5.
  REQUIRE(d->nodes.size() == 3);
  TSR_COMPARE(d->nodes[0].op, std::string("dot_general"));
  TSR_COMPARE(d->nodes[0].nsA, 3'000'000.0);
  TSR_COMPARE(d->nodes[0].nsB, 1'250'000.0);
  TSR_COMPARE(d->nodes[0].nodeA, 3);
  TSR_COMPARE(d->nodes[0].nodeB, 10);
  TSR_COMPARE(d->nodes[1].op, std::string("add"));
  TSR_COMPARE(d->nodes[1].nsB, 1'250'000.0);
  TSR_COMPARE(d->nodes[2].op, std::string("tanh"));
  TSR_COMPARE(d->nodes[2].nsA, 500'000.0);
  REQUIRE(train::profileDiffJson(*d).find("\"same_graph\":false") != std::string::npos);

  // A run without a profile is named.
  const int64_t runC = *db->createRun("c", "p", "");
  auto none = train::diffProfiles(*db, runA, *db, runC);
  REQUIRE(!none.ok());
  REQUIRE_MESSAGE(none.error().message.find("run 3 has no profile") == 0, none.error().message);
}
