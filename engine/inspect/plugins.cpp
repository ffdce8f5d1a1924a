#include "engine/inspect/plugins.h"

namespace tsr::inspect {

std::vector<plugin::PluginRecord> loadPlugins(const std::string& projectDir, const plugin::TrustPrompt& ask) {
  return plugin::loadStartupPlugins(projectDir, ask);
}

std::vector<plugin::PluginRecord> pluginRecords() { return plugin::pluginRecords(); }

std::vector<plugin::PanelRegistration> pluginPanels() { return plugin::pluginPanels(); }

}  // namespace tsr::inspect
