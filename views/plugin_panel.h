#pragma once
// The Qt interface of a panel that a plugin adds. The plugin registers a factory (plugin::PanelRegistration in
// engine/plugin/plugin.h) that receives the parent QWidget* and returns a PluginPanel*, both as void* (the
// engine links no Qt). The IDE puts widget() in a dock titled with the registration's title and tells the
// panel what changes. Every function here is inline, so a plugin needs nothing of the IDE's libraries but
// this header: its panel loads in the IDE, and `tessera plugins` can list it without Qt windows.
#include <vector>

#include <QWidget>

#include "engine/inspect/graph_stages.h"

namespace tsr::studio {

class PluginPanel {
 public:
  virtual ~PluginPanel() = default;
  // The panel's widget, owned by the parent given to the factory (the IDE deletes it with its dock).
  virtual QWidget* widget() = 0;
  // The project's graph at every compile stage, after each compile (UI thread). The last stage is the fusion
  // stage and carries the pipeline's reports (inspect::Stage::reports).
  virtual void setStages(const std::vector<inspect::Stage>& stages) { (void)stages; }
  // The stage on screen changed (index into the stages last given).
  virtual void setCurrentStage(int index) { (void)index; }
};

}  // namespace tsr::studio
