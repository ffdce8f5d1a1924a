#pragma once
// Layout of a graph view with Graphviz's dot (libgvc): each expanded group is laid out on its own, its
// expanded children first (as boxes of their laid-out size), so expanding one block lays out that block and
// re-places its ancestors' few boxes, nothing else. Levels are cached by group and expansion state.
// With a fusion plan in the tree, each multi-node kernel of a level is a Graphviz cluster: a box of kind
// Cluster around its members, in the same level.
// Graphviz keeps global state, so layouts run one at a time (a mutex), on whichever worker thread calls.
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/inspect/module_tree.h"

namespace tsr::inspect {

struct Point {
  double x = 0, y = 0;
};

// A box in view coordinates (points, y down), top-left corner.
struct ItemBox {
  LevelItem item;
  std::string label;  // what the box shows, one line per '\n'
  int depth = 0;      // nesting depth of the level it belongs to
  double x = 0, y = 0, w = 0, h = 0;
};

struct EdgeCurve {
  std::string fromKey, toKey;
  int count = 1;
  std::vector<Point> points;  // a cubic B-spline: p0, then (c1, c2, p) triples; the last point is the head
};

struct ViewLayout {
  std::vector<ItemBox> boxes;  // expanded groups come before their contents; a level's clusters after its items
  std::vector<EdgeCurve> edges;
  double width = 0, height = 0;
  std::vector<std::string> laidOut;  // group paths laid out by this call (the rest came from the cache)
};

struct LayoutOptions {
  const std::atomic<bool>* cancel = nullptr;
  std::function<void(int done, int total)> progress;
};

// The label of an item: an op with its first result's aval, a group with its node count, an input's aval.
std::string itemLabel(const ModuleTree& tree, const ir::Graph& g, const LevelItem& item);

// Caches level layouts of one graph (a stage); shared by the layouts of that graph.
class LayoutCache {
 public:
  struct LevelLayout {
    std::vector<ItemBox> boxes;  // relative to the level's top-left, items of this level only
    std::vector<EdgeCurve> edges;
    double width = 0, height = 0;
  };
  std::shared_ptr<const LevelLayout> find(const std::string& key) const;
  void put(const std::string& key, std::shared_ptr<const LevelLayout> layout);

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, std::shared_ptr<const LevelLayout>> m_levels;
};

// Lays out the view of g with the given groups expanded (the root "" is always expanded).
Result<ViewLayout> layoutView(const ModuleTree& tree, const ir::Graph& g, const std::set<std::string>& expanded,
                              LayoutCache& cache, const LayoutOptions& options = {});

// Graphviz's version, for the About box.
std::string graphvizVersion();

}  // namespace tsr::inspect
