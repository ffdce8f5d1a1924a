#include "engine/inspect/graph_layout.h"

#include <graphviz/gvc.h>

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/inspect/node_info.h"

namespace tsr::inspect {

namespace {

constexpr double kCharWidth = 7.0;   // points per label character (the view's font is close to this)
constexpr double kLineHeight = 14.0;
constexpr double kPad = 10.0;        // inside a box around its label
constexpr double kMargin = 14.0;     // inside an expanded group around its contents
constexpr double kTitle = 22.0;      // an expanded group's title bar

std::mutex& graphvizMutex() {
  static std::mutex m;
  return m;
}

void boxSize(const std::string& label, double& w, double& h) {
  size_t widest = 0, lines = 1, cur = 0;
  for (char c : label) {
    if (c == '\n') {
      ++lines;
      cur = 0;
    } else {
      widest = std::max(widest, ++cur);
    }
  }
  w = std::max(60.0, static_cast<double>(widest) * kCharWidth + 2 * kPad);
  h = static_cast<double>(lines) * kLineHeight + 2 * kPad - 4;
}

std::string attr(double v) { return fmt::format("{:.4f}", v); }

// A kernel drawn around some boxes of a level: Graphviz keeps its members together (a cluster) and leaves
// room for its title.
struct ClusterSpec {
  std::string label;     // "fusion.12 (loop)"
  std::string key;       // "k:fusion.12"
  int cluster = -1;      // ModuleTree::clusterOfNode
  std::vector<int> members;  // box indices
};

// What dot is given for a level, and all that its result depends on: the boxes' sizes as dot reads them, the
// edges, each cluster's members and the length of its title (dot sizes a title of `n` characters alike; the
// view draws the real one). Two levels of one shape get the same geometry.
std::string shapeKey(const std::vector<ItemBox>& boxes, const std::vector<std::pair<int, int>>& edges,
                     const std::vector<ClusterSpec>& clusters) {
  std::string k;
  k.reserve(boxes.size() * 14 + edges.size() * 8);
  for (const ItemBox& b : boxes) k += attr(b.w / 72.0) + "x" + attr(b.h / 72.0) + ";";
  k += "|";
  for (const auto& [from, to] : edges) k += std::to_string(from) + ">" + std::to_string(to) + ";";
  for (const ClusterSpec& c : clusters) {
    k += "|" + std::to_string(c.label.size()) + ":";
    for (int m : c.members) k += std::to_string(m) + ",";
  }
  return k;
}

// One Graphviz context for the process: creating one loads the plugins, which costs more than laying out a small
// level. Used under graphvizMutex().
GVC_t* graphvizContext() {
  static GVC_t* gvc = gvContext();
  return gvc;
}

// Lays out boxes of the given sizes with these edges and clusters: their top-left corners (y down), the
// clusters' rectangles and the edges' splines.
LayoutCache::Geometry runDot(const std::vector<ItemBox>& boxes, const std::vector<std::pair<int, int>>& edgeItems,
                             const std::vector<ClusterSpec>& clusters) {
  std::lock_guard<std::mutex> lock(graphvizMutex());
  GVC_t* gvc = graphvizContext();
  Agraph_t* g = agopen(const_cast<char*>("level"), Agdirected, nullptr);
  agattr(g, AGRAPH, const_cast<char*>("rankdir"), const_cast<char*>("TB"));
  agattr(g, AGRAPH, const_cast<char*>("nodesep"), const_cast<char*>("0.25"));
  agattr(g, AGRAPH, const_cast<char*>("ranksep"), const_cast<char*>("0.35"));
  agattr(g, AGNODE, const_cast<char*>("shape"), const_cast<char*>("box"));
  agattr(g, AGNODE, const_cast<char*>("fixedsize"), const_cast<char*>("true"));
  agattr(g, AGNODE, const_cast<char*>("width"), const_cast<char*>("1"));
  agattr(g, AGNODE, const_cast<char*>("height"), const_cast<char*>("0.5"));
  agattr(g, AGNODE, const_cast<char*>("label"), const_cast<char*>(""));
  std::vector<Agnode_t*> nodes;
  for (size_t i = 0; i < boxes.size(); ++i) {
    std::string name = "n" + std::to_string(i);
    Agnode_t* n = agnode(g, name.data(), 1);
    agset(n, const_cast<char*>("width"), attr(boxes[i].w / 72.0).data());
    agset(n, const_cast<char*>("height"), attr(boxes[i].h / 72.0).data());
    nodes.push_back(n);
  }
  // Cluster titles: dot sizes a label from its own font metrics; a 9-point label is about our title's size.
  std::vector<Agraph_t*> subs;
  if (!clusters.empty()) {
    agattr(g, AGRAPH, const_cast<char*>("label"), const_cast<char*>(""));
    agattr(g, AGRAPH, const_cast<char*>("fontsize"), const_cast<char*>("9"));
    agattr(g, AGRAPH, const_cast<char*>("labeljust"), const_cast<char*>("l"));
    agattr(g, AGRAPH, const_cast<char*>("margin"), const_cast<char*>("8"));
  }
  for (size_t c = 0; c < clusters.size(); ++c) {
    std::string name = "cluster_" + std::to_string(c);
    Agraph_t* sub = agsubg(g, name.data(), 1);
    std::string title(clusters[c].label.size(), 'n');  // the title's length is what its room depends on
    agset(sub, const_cast<char*>("label"), title.data());
    for (int m : clusters[c].members) agsubnode(sub, nodes[static_cast<size_t>(m)], 1);
    subs.push_back(sub);
  }
  std::vector<Agedge_t*> gvEdges;
  for (const auto& [a, b] : edgeItems) gvEdges.push_back(agedge(g, nodes[static_cast<size_t>(a)], nodes[static_cast<size_t>(b)], nullptr, 1));
  gvLayout(gvc, g, "dot");
  LayoutCache::Geometry geo;
  boxf bb = GD_bb(g);
  geo.width = bb.UR.x - bb.LL.x;
  geo.height = bb.UR.y - bb.LL.y;
  auto flip = [&](pointf p) { return Point{p.x - bb.LL.x, bb.UR.y - p.y}; };
  for (size_t i = 0; i < boxes.size(); ++i) {
    Point c = flip(ND_coord(nodes[i]));
    geo.boxes.push_back({c.x - boxes[i].w / 2, c.y - boxes[i].h / 2});
  }
  for (Agraph_t* sub : subs) {
    boxf cb = GD_bb(sub);
    Point tl = flip({cb.LL.x, cb.UR.y});
    geo.clusters.push_back({tl.x, tl.y, cb.UR.x - cb.LL.x, cb.UR.y - cb.LL.y});
  }
  geo.edges.resize(gvEdges.size());
  for (size_t i = 0; i < gvEdges.size(); ++i) {
    splines* spl = ED_spl(gvEdges[i]);
    if (!spl || spl->size == 0) continue;
    const bezier& bz = spl->list[0];
    for (decltype(bz.size) k = 0; k < bz.size; ++k) geo.edges[i].push_back(flip(bz.list[k]));
    if (bz.eflag) geo.edges[i].push_back(flip(bz.ep));
  }
  gvFreeLayout(gvc, g);
  agclose(g);
  return geo;
}

// Puts a level's boxes and edges where the geometry says, and appends one box per cluster (after the others, so
// they stay out of the edges' indices).
void applyGeometry(LayoutCache::LevelLayout& level, const LayoutCache::Geometry& geo, const std::vector<ClusterSpec>& clusters) {
  level.width = geo.width;
  level.height = geo.height;
  for (size_t i = 0; i < geo.boxes.size(); ++i) {
    level.boxes[i].x = geo.boxes[i].x;
    level.boxes[i].y = geo.boxes[i].y;
  }
  for (size_t c = 0; c < clusters.size(); ++c) {
    ItemBox b;
    b.item.kind = LevelItem::Kind::Cluster;
    b.item.cluster = clusters[c].cluster;
    b.item.key = clusters[c].key;
    b.label = clusters[c].label;
    b.x = geo.clusters[c][0];
    b.y = geo.clusters[c][1];
    b.w = geo.clusters[c][2];
    b.h = geo.clusters[c][3];
    level.boxes.push_back(std::move(b));
  }
  for (size_t i = 0; i < geo.edges.size(); ++i) level.edges[i].points = geo.edges[i];
}

class ViewBuilder {
 public:
  ViewBuilder(const ModuleTree& tree, const ir::Graph& g, const std::set<std::string>& expanded, LayoutCache& cache,
              const LayoutOptions& options)
      : m_tree(tree), m_graph(g), m_expanded(expanded), m_cache(cache), m_options(options) {}

  // The cache key of a group: its path and the expanded groups below it.
  std::string key(int group) const {
    const std::string& path = m_tree.group(group).path;
    std::string k = path + "|";
    for (const std::string& e : m_expanded)
      if (e != path && (path.empty() || e.rfind(path + ".", 0) == 0)) k += e + ";";
    return k;
  }

  Result<std::shared_ptr<const LayoutCache::LevelLayout>> level(int group, ViewLayout& out) {
    std::string k = key(group);
    if (auto hit = m_cache.find(k)) return hit;
    if (m_options.cancel && m_options.cancel->load()) return makeError("cancelled");
    Level lv = buildLevel(m_tree, m_graph, group, m_expanded);
    auto result = std::make_shared<LayoutCache::LevelLayout>();
    for (const LevelItem& item : lv.items) {
      ItemBox b;
      b.item = item;
      b.label = itemLabel(m_tree, m_graph, item);
      if (item.kind == LevelItem::Kind::Group && item.expanded) {
        TSR_ASSIGN(auto inner, level(item.group, out));
        b.w = std::max(inner->width + 2 * kMargin, static_cast<double>(b.label.size()) * kCharWidth + 2 * kPad);
        b.h = inner->height + 2 * kMargin + kTitle;
      } else {
        boxSize(b.label, b.w, b.h);
      }
      result->boxes.push_back(std::move(b));
    }
    std::vector<std::pair<int, int>> pairs;
    for (const LevelEdge& e : lv.edges) {
      pairs.push_back({e.from, e.to});
      result->edges.push_back({lv.items[static_cast<size_t>(e.from)].key, lv.items[static_cast<size_t>(e.to)].key, e.count, {}});
    }
    // Each multi-node kernel among this level's nodes becomes a cluster (the tree keeps its members in one level).
    std::vector<ClusterSpec> clusters;
    std::unordered_map<int, size_t> specOf;
    for (size_t i = 0; i < lv.items.size(); ++i) {
      int c = lv.items[i].kind == LevelItem::Kind::Node ? lv.items[i].cluster : -1;
      if (c < 0) continue;
      auto [it, fresh] = specOf.emplace(c, clusters.size());
      if (fresh) {
        ClusterSpec spec;
        spec.cluster = c;
        spec.label = m_tree.clusterLabel(c);
        spec.key = "k:" + m_tree.plan()->groups[static_cast<size_t>(c)].name;
        clusters.push_back(std::move(spec));
      }
      clusters[it->second].members.push_back(static_cast<int>(i));
    }
    if (m_options.cancel && m_options.cancel->load()) return makeError("cancelled");
    std::string shape = shapeKey(result->boxes, pairs, clusters);
    auto geometry = m_cache.findShape(shape);
    if (!geometry) {
      geometry = std::make_shared<const LayoutCache::Geometry>(runDot(result->boxes, pairs, clusters));
      m_cache.putShape(shape, geometry);
      out.ranGraphviz.push_back(m_tree.group(group).path);
    }
    applyGeometry(*result, *geometry, clusters);
    out.laidOut.push_back(m_tree.group(group).path);
    if (m_options.progress) m_options.progress(static_cast<int>(out.laidOut.size()), m_total);
    m_cache.put(k, result);
    return std::shared_ptr<const LayoutCache::LevelLayout>(result);
  }

  // Places a level's boxes at (ox, oy) and recurses into its expanded groups.
  Status place(int group, double ox, double oy, int depth, ViewLayout& out) {
    TSR_ASSIGN(auto lv, level(group, out));
    for (const ItemBox& b : lv->boxes) {
      ItemBox abs = b;
      abs.x += ox;
      abs.y += oy;
      abs.depth = depth;
      out.boxes.push_back(abs);
      if (b.item.kind == LevelItem::Kind::Group && b.item.expanded)
        TSR_TRY(place(b.item.group, abs.x + kMargin, abs.y + kTitle + kMargin, depth + 1, out));
    }
    for (EdgeCurve e : lv->edges) {
      for (Point& p : e.points) {
        p.x += ox;
        p.y += oy;
      }
      out.edges.push_back(std::move(e));
    }
    return {};
  }

  void countLevels(int group) {
    ++m_total;
    for (int c : m_tree.group(group).children)
      if (m_expanded.count(m_tree.group(c).path)) countLevels(c);
  }

 private:
  const ModuleTree& m_tree;
  const ir::Graph& m_graph;
  const std::set<std::string>& m_expanded;
  LayoutCache& m_cache;
  const LayoutOptions& m_options;
  int m_total = 0;
};

}  // namespace

std::shared_ptr<const LayoutCache::LevelLayout> LayoutCache::find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_levels.find(key);
  return it == m_levels.end() ? nullptr : it->second;
}

void LayoutCache::put(const std::string& key, std::shared_ptr<const LevelLayout> layout) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_levels[key] = std::move(layout);
}

std::shared_ptr<const LayoutCache::Geometry> LayoutCache::findShape(const std::string& shape) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_shapes.find(shape);
  return it == m_shapes.end() ? nullptr : it->second;
}

void LayoutCache::putShape(const std::string& shape, std::shared_ptr<const Geometry> geometry) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_shapes[shape] = std::move(geometry);
}

std::string itemLabel(const ModuleTree& tree, const ir::Graph& g, const LevelItem& item) {
  switch (item.kind) {
    case LevelItem::Kind::Group: {
      const ModuleGroup& grp = tree.group(item.group);
      return fmt::format("{} ({} {})", grp.path, grp.totalNodes, item.group == tree.inputsGroup() ? "inputs" : "ops");
    }
    case LevelItem::Kind::Node: {
      const ir::Node& n = g.nodes()[static_cast<size_t>(item.node)];
      std::string s = opName(g, item.node);
      if (!n.results.empty()) s += "\n" + g.aval(n.results[0]).toString();
      return s;
    }
    case LevelItem::Kind::Input:
      return "input\n" + g.aval(item.input).toString();
    case LevelItem::Kind::Cluster:
      return tree.clusterLabel(item.cluster);
  }
  return "";
}

Result<ViewLayout> layoutView(const ModuleTree& tree, const ir::Graph& g, const std::set<std::string>& expanded,
                              LayoutCache& cache, const LayoutOptions& options) {
  std::set<std::string> ex = expanded;
  ex.insert("");
  ViewBuilder builder(tree, g, ex, cache, options);
  builder.countLevels(0);
  ViewLayout out;
  TSR_ASSIGN(auto root, builder.level(0, out));
  out.width = root->width;
  out.height = root->height;
  TSR_TRY(builder.place(0, 0, 0, 0, out));
  return out;
}

std::string graphvizVersion() {
  std::lock_guard<std::mutex> lock(graphvizMutex());
  char** info = gvcInfo(graphvizContext());
  return info && info[1] ? info[1] : "unknown";
}

}  // namespace tsr::inspect
