#include "engine/inspect/plugins.h"

namespace tsr::inspect {

std::vector<plugin::PluginRecord> loadPlugins(const std::string& projectDir) {
  return plugin::loadStartupPlugins(projectDir);
}

std::vector<plugin::PluginRecord> pluginRecords() { return plugin::pluginRecords(); }

std::vector<plugin::PanelRegistration> pluginPanels() { return plugin::pluginPanels(); }

}  // namespace tsr::inspect
