#pragma once
// Layout of a graph view with Graphviz's dot (libgvc): each expanded group is laid out on its own, its
// expanded children first (as boxes of their laid-out size), so expanding one block lays out that block and
// re-places its ancestors' few boxes, nothing else. Levels are cached by group and expansion state, and what dot
// computes for a level (positions and edge routes) is cached by the level's shape: its boxes' sizes, its edges and
// its kernels. A model's repeated blocks have levels of one shape, so Expand All on a 12-block GPT-2 runs dot
// once per distinct level, not once per level.
// With a fusion plan in the tree, each multi-node kernel of a level is a Graphviz cluster: a box of kind
// Cluster around its members, in the same level.
// Graphviz keeps global state, so layouts run one at a time (a mutex), on whichever worker thread calls.
#include <array>
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
  std::vector<std::string> ranGraphviz;  // those of laidOut that dot laid out (the others had a known shape)
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
  // Where dot put the boxes, kernels and edges of a level of some shape (boxes' top-left corners in the level's
  // coordinates, in item order; each cluster's rectangle; each edge's spline).
  struct Geometry {
    std::vector<Point> boxes;
    std::vector<std::array<double, 4>> clusters;  // x, y, w, h
    std::vector<std::vector<Point>> edges;
    double width = 0, height = 0;
  };
  std::shared_ptr<const LevelLayout> find(const std::string& key) const;
  void put(const std::string& key, std::shared_ptr<const LevelLayout> layout);
  std::shared_ptr<const Geometry> findShape(const std::string& shape) const;
  void putShape(const std::string& shape, std::shared_ptr<const Geometry> geometry);

 private:
  mutable std::mutex m_mutex;
  std::map<std::string, std::shared_ptr<const LevelLayout>> m_levels;
  std::map<std::string, std::shared_ptr<const Geometry>> m_shapes;
};

// Lays out the view of g with the given groups expanded (the root "" is always expanded).
Result<ViewLayout> layoutView(const ModuleTree& tree, const ir::Graph& g, const std::set<std::string>& expanded,
                              LayoutCache& cache, const LayoutOptions& options = {});

// Graphviz's version, for the About box.
std::string graphvizVersion();

}  // namespace tsr::inspect
