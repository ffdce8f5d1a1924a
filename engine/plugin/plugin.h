#pragma once
// The plugin interface: what a plugin library includes.
//
// A plugin is a shared library that exports one C function, resolved by name with dlsym:
//
//   extern "C" TSR_PLUGIN_EXPORT const TesseraPluginInfo* tessera_plugin_v1(void);
//
// The loader calls it first and reads the TesseraPluginInfo it returns: apiVersion must equal
// TESSERA_PLUGIN_API_VERSION, and engineVersion the engine's tsr::kVersion (registrations are C++ objects built
// with the engine's headers, so a plugin must be built against the engine that loads it). Only then does it call
// info->init(host). init registers what the plugin adds through the host: ops (OpDefs with their rules and
// kernels), passes at a named point of the pipeline, model families for project.toml, and panels for the IDE.
// Registrations are staged: they reach the engine only after init has returned 0 and every op has passed the
// rule-table check (engine/ops/rule_table.h), so a plugin that fails leaves nothing half-registered and is
// unloaded again. init reports a failure by returning non-zero after host->fail("why").
//
// A plugin links no engine library: its references to the engine resolve at load time against the host
// program, which exports the engine's symbols (see tsr_plugin_host in engine/CMakeLists.txt). There is one
// engine per process, so the ops a plugin registers are in the same registry that jit, grad and vmap read.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/core/shape.h"
#include "engine/ir/op_def.h"
#include "engine/passes/pass_registry.h"
#include "engine/project/model_family.h"

#define TESSERA_PLUGIN_API_VERSION 1u
#define TESSERA_PLUGIN_ENTRY_SYMBOL "tessera_plugin_v1"
#define TSR_PLUGIN_EXPORT __attribute__((visibility("default")))

extern "C" {

typedef struct TesseraPluginHost TesseraPluginHost;  // a tsr::plugin::Host

typedef struct TesseraPluginInfo {
  uint32_t apiVersion;        // TESSERA_PLUGIN_API_VERSION
  const char* name;           // unique among loaded plugins: "swiglu"
  const char* version;        // the plugin's own version: "1.0.0"
  const char* description;    // one line
  const char* engineVersion;  // tsr::kVersion of the engine it was built against
  int (*init)(TesseraPluginHost* host);  // 0: success
} TesseraPluginInfo;

typedef const TesseraPluginInfo* (*TesseraPluginEntry)(void);

}  // extern "C"

namespace tsr::plugin {

// A panel for the IDE. `create` receives the parent QWidget* and returns a tsr::studio::PluginPanel* (the Qt
// interface in views/plugin_panel.h): the engine links no Qt, so both travel as void* here.
struct PanelRegistration {
  std::string name;   // an identifier: "op_mix"
  std::string title;  // the dock's title: "Op Mix"
  std::function<void*(void* parentWidget)> create;
};

// What a plugin's init registers, staged until the loader commits it.
struct Registrations {
  struct Op {
    ir::OpDef def;
    std::vector<Aval> example;  // operands the check runs the infer, cost and shard rules on (optional)
    ir::Attrs exampleAttrs;
  };
  std::vector<Op> ops;
  std::vector<passes::PassRegistration> passes;
  std::vector<project::ModelFamily> families;
  std::vector<PanelRegistration> panels;
  std::string failure;  // set by Host::fail
};

class Host {
 public:
  explicit Host(std::string pluginPath) : m_path(std::move(pluginPath)) {}
  static Host& from(TesseraPluginHost* h) { return *reinterpret_cast<Host*>(h); }
  TesseraPluginHost* handle() { return reinterpret_cast<TesseraPluginHost*>(this); }

  // An op; it gets its code (after the core ops) when the plugin is committed: look it up by name then
  // (ops::registry().find(name)). `example` operands let the rule-table check run its rules once.
  void addOp(ir::OpDef def, std::vector<Aval> example = {}, ir::Attrs exampleAttrs = ir::NoAttrs{}) {
    m_regs.ops.push_back({std::move(def), std::move(example), std::move(exampleAttrs)});
  }
  void addPass(passes::PassRegistration pass) { m_regs.passes.push_back(std::move(pass)); }
  void addModelFamily(project::ModelFamily family) { m_regs.families.push_back(std::move(family)); }
  void addPanel(PanelRegistration panel) { m_regs.panels.push_back(std::move(panel)); }
  // Why init is about to return non-zero; shown with the plugin's path.
  void fail(std::string reason) { m_regs.failure = std::move(reason); }

  const std::string& pluginPath() const { return m_path; }
  Registrations& registrations() { return m_regs; }

 private:
  std::string m_path;
  Registrations m_regs;
};

}  // namespace tsr::plugin
