// Deliberately broken plugins, one library per BROKEN_KIND, each failing in one way the loader must contain:
//   1 wrong_version    an info struct of plugin API version 99
//   2 no_entry         no tessera_plugin_v1 symbol at all
//   3 missing_symbol   a reference to a function no library defines (dlopen with RTLD_NOW fails)
//   4 failing_init     registers a good op and a pass, then fails: neither may be registered
//   5 bad_rules        registers a good op, then one without vjp and batching rules: neither may be registered
//   6 throwing_init    init throws an exception
//   7 other_engine     built against another engine version
//   8 duplicate_op     registers an op whose name a core op has
//   9 trust_probe      nothing wrong: registers the op trust_probe_op (for the tests of project plugin trust)
#include <stdexcept>

#include "engine/ops/op_helpers.h"
#include "engine/ops/shard_rules.h"
#include "engine/plugin/plugin.h"
#include "engine/version.h"

#ifndef BROKEN_KIND
#error "BROKEN_KIND must be defined"
#endif

namespace {

using namespace tsr;

// A complete, correct op (identity on f32), so that the failure lies elsewhere.
[[maybe_unused]] ir::OpDef goodOp(const char* name) {
  ir::OpDef def;
  def.name = name;
  def.family = "elementwise";
  def.numOperands = 1;
  def.attrsIndex = 0;
  def.infer = [](std::span<const Aval> in, const ir::Attrs&) -> Result<std::vector<Aval>> {
    return std::vector<Aval>{in[0]};
  };
  def.cost = [](std::span<const Aval> in, std::span<const Aval> out, const ir::Attrs&) {
    return ops::movementCost(in, out);
  };
  def.cpu = [](const ir::CpuKernelArgs&) {};
  def.vjp = [](const ir::VjpArgs& a) { return std::vector<Array>{a.cotangents[0]}; };
  def.batch = [](const ir::BatchArgs& a) { return ir::BatchResult{a.operands, a.batchDims}; };
  def.shard = ops::elementwiseShardRule();
  return def;
}

class NothingPass : public passes::Pass {
 public:
  std::string_view name() const override { return "broken_nothing"; }
  Result<bool> run(ir::Graph&, passes::PassContext&) override { return false; }
};

}  // namespace

#if BROKEN_KIND == 3
extern "C" int tessera_test_function_that_does_not_exist(int);
#endif

namespace {

int init(TesseraPluginHost* h) {
  [[maybe_unused]] plugin::Host& host = plugin::Host::from(h);
#if BROKEN_KIND == 3
  return tessera_test_function_that_does_not_exist(1);
#elif BROKEN_KIND == 4
  host.addOp(goodOp("broken_good_op"));
  host.addPass({"broken_nothing", passes::PipelinePoint::AfterCleanup, [] { return std::make_unique<NothingPass>(); }, ""});
  host.fail("no device found");
  return 1;
#elif BROKEN_KIND == 5
  host.addOp(goodOp("broken_good_op"));
  ir::OpDef bad = goodOp("broken_bad_op");
  bad.vjp = nullptr;
  bad.batch = nullptr;
  host.addOp(std::move(bad));
  return 0;
#elif BROKEN_KIND == 6
  host.addOp(goodOp("broken_good_op"));
  throw std::runtime_error("cannot read the config");
#elif BROKEN_KIND == 8
  host.addOp(goodOp("broken_good_op"));
  host.addOp(goodOp("add"));
  return 0;
#elif BROKEN_KIND == 9
  host.addOp(goodOp("trust_probe_op"));
  return 0;
#else
  (void)host;
  return 0;
#endif
}

#if BROKEN_KIND == 1
constexpr uint32_t kApi = 99;
#else
constexpr uint32_t kApi = TESSERA_PLUGIN_API_VERSION;
#endif
#if BROKEN_KIND == 7
constexpr const char* kEngine = "0.0.0-other";
#else
constexpr const char* kEngine = tsr::kVersion;
#endif

#if BROKEN_KIND == 9
const TesseraPluginInfo kInfo = {kApi, "trust_probe", "0.1", "a plugin that works", kEngine, init};
#else
const TesseraPluginInfo kInfo = {kApi, "broken", "0.1", "a deliberately broken plugin", kEngine, init};
#endif

}  // namespace

#if BROKEN_KIND != 2
extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v1(void) { return &kInfo; }
#else
extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v0(void) { return &kInfo; }
#endif
