#pragma once
// Plugins as the IDE sees them (engine/plugin/loader.h): loading the startup and project plugins, the record of
// each, and the panels they add.
#include <string>
#include <vector>

#include "engine/plugin/loader.h"

namespace tsr::inspect {

// Loads the plugins of the search order (PROJECT/plugins first when projectDir is given, then
// TESSERA_PLUGIN_PATH, the user's folder, the bundled ones); plugins already loaded are not loaded again.
// The project's own plugins load when it is trusted, or when `ask` says yes (plugin::TrustPrompt).
// Returns the records of this call. Call it on the UI thread while no compile runs.
std::vector<plugin::PluginRecord> loadPlugins(const std::string& projectDir = "", const plugin::TrustPrompt& ask = {});
// Every plugin tried so far, loaded or skipped.
std::vector<plugin::PluginRecord> pluginRecords();
std::vector<plugin::PanelRegistration> pluginPanels();

}  // namespace tsr::inspect
