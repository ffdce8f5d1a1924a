#pragma once
// Tree: a pytree of leaves (list / ordered dict / leaf / none). Params, grads and optimizer state are Trees;
// their paths ("blocks.3.attn.qkv.kernel") are the names users see everywhere.
#include <cstddef>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/check.h"
#include "engine/core/result.h"

namespace tsr {

enum class TreeKind : uint8_t { None, Leaf, List, Dict };

// The structure of a tree without its leaves: comparable, printable, used as part of jit cache keys.
struct TreeDef {
  TreeKind kind = TreeKind::None;
  std::vector<std::string> keys;  // Dict only, in order
  std::vector<TreeDef> children;  // List and Dict

  int numLeaves() const;
  bool operator==(const TreeDef&) const = default;
  std::string toString() const;  // "{a: *, b: [*, *]}"
};

std::string joinPath(const std::string& prefix, const std::string& key);

template <class T>
class TreeOf {
 public:
  TreeOf() = default;
  TreeOf(T leafValue) : m_kind(TreeKind::Leaf), m_leaf(std::make_shared<T>(std::move(leafValue))) {}

  static TreeOf list(std::vector<TreeOf> items = {}) {
    TreeOf t;
    t.m_kind = TreeKind::List;
    t.m_children = std::move(items);
    return t;
  }
  static TreeOf dict(std::vector<std::pair<std::string, TreeOf>> items = {}) {
    TreeOf t;
    t.m_kind = TreeKind::Dict;
    for (auto& [k, v] : items) {
      t.m_keys.push_back(k);
      t.m_children.push_back(std::move(v));
    }
    return t;
  }

  TreeKind kind() const { return m_kind; }
  bool isLeaf() const { return m_kind == TreeKind::Leaf; }
  const T& leaf() const { TSR_CHECK(isLeaf()); return *m_leaf; }
  T& leaf() { TSR_CHECK(isLeaf()); return *m_leaf; }

  size_t size() const { return m_children.size(); }
  const std::vector<std::string>& keys() const { return m_keys; }
  const TreeOf& child(size_t i) const { return m_children[i]; }
  TreeOf& child(size_t i) { return m_children[i]; }
  void push(TreeOf item) { TSR_CHECK(m_kind == TreeKind::List); m_children.push_back(std::move(item)); }

  // Dict access; set() inserts or replaces, keeping insertion order.
  void set(const std::string& key, TreeOf item) {
    TSR_CHECK(m_kind == TreeKind::Dict);
    for (size_t i = 0; i < m_keys.size(); ++i)
      if (m_keys[i] == key) { m_children[i] = std::move(item); return; }
    m_keys.push_back(key);
    m_children.push_back(std::move(item));
  }
  const TreeOf* find(const std::string& key) const {
    for (size_t i = 0; i < m_keys.size(); ++i)
      if (m_keys[i] == key) return &m_children[i];
    return nullptr;
  }
  TreeOf* find(const std::string& key) {
    return const_cast<TreeOf*>(static_cast<const TreeOf*>(this)->find(key));
  }
  // Looks up a dotted path ("h.0.attn.c_attn.weight"); list items by index.
  const TreeOf* findPath(const std::string& path) const {
    const TreeOf* node = this;
    size_t start = 0;
    while (node && start <= path.size()) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (node->m_kind == TreeKind::Dict) {
        node = node->find(part);
      } else if (node->m_kind == TreeKind::List) {
        char* end = nullptr;
        unsigned long idx = std::strtoul(part.c_str(), &end, 10);
        node = (end && *end == 0 && !part.empty() && idx < node->size()) ? &node->m_children[idx] : nullptr;
      } else {
        return nullptr;
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return node;
  }

  // Leaves in order (depth first, dict insertion order), with their dotted paths.
  void visit(const std::function<void(const std::string& path, const T& leaf)>& f,
             const std::string& prefix = "") const {
    if (m_kind == TreeKind::Leaf) { f(prefix, *m_leaf); return; }
    for (size_t i = 0; i < m_children.size(); ++i)
      m_children[i].visit(f, joinPath(prefix, m_kind == TreeKind::Dict ? m_keys[i] : std::to_string(i)));
  }
  std::vector<T> leaves() const {
    std::vector<T> out;
    visit([&](const std::string&, const T& l) { out.push_back(l); });
    return out;
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    visit([&](const std::string& p, const T&) { out.push_back(p); });
    return out;
  }

  TreeDef def() const {
    TreeDef d;
    d.kind = m_kind;
    d.keys = m_keys;
    for (const auto& c : m_children) d.children.push_back(c.def());
    return d;
  }

  // Rebuilds a tree of `def`'s structure from leaves in flatten order.
  static Result<TreeOf> unflatten(const TreeDef& def, std::vector<T> leaves) {
    if (static_cast<int>(leaves.size()) != def.numLeaves())
      return makeError("unflatten: tree has {} leaves but {} values were given", def.numLeaves(), leaves.size());
    size_t pos = 0;
    return build(def, leaves, pos);
  }

  // Same structure, each leaf replaced by f(path, leaf).
  template <class F>
  auto mapWithPath(F&& f, const std::string& prefix = "") const
      -> TreeOf<std::invoke_result_t<F, const std::string&, const T&>> {
    using U = std::invoke_result_t<F, const std::string&, const T&>;
    if (m_kind == TreeKind::Leaf) return TreeOf<U>(f(prefix, *m_leaf));
    if (m_kind == TreeKind::None) return TreeOf<U>();
    std::vector<TreeOf<U>> kids;
    for (size_t i = 0; i < m_children.size(); ++i)
      kids.push_back(m_children[i].mapWithPath(f, joinPath(prefix, m_kind == TreeKind::Dict ? m_keys[i] : std::to_string(i))));
    if (m_kind == TreeKind::List) return TreeOf<U>::list(std::move(kids));
    std::vector<std::pair<std::string, TreeOf<U>>> items;
    for (size_t i = 0; i < kids.size(); ++i) items.emplace_back(m_keys[i], std::move(kids[i]));
    return TreeOf<U>::dict(std::move(items));
  }
  template <class F>
  auto map(F&& f) const -> TreeOf<std::invoke_result_t<F, const T&>> {
    return mapWithPath([&](const std::string&, const T& l) { return f(l); });
  }

 private:
  static TreeOf build(const TreeDef& def, std::vector<T>& leaves, size_t& pos) {
    switch (def.kind) {
      case TreeKind::None: return TreeOf();
      case TreeKind::Leaf: return TreeOf(std::move(leaves[pos++]));
      case TreeKind::List: {
        std::vector<TreeOf> kids;
        for (const auto& c : def.children) kids.push_back(build(c, leaves, pos));
        return list(std::move(kids));
      }
      case TreeKind::Dict: {
        std::vector<std::pair<std::string, TreeOf>> items;
        for (size_t i = 0; i < def.children.size(); ++i) items.emplace_back(def.keys[i], build(def.children[i], leaves, pos));
        return dict(std::move(items));
      }
    }
    return TreeOf();
  }

  TreeKind m_kind = TreeKind::None;
  std::shared_ptr<T> m_leaf;
  std::vector<std::string> m_keys;
  std::vector<TreeOf> m_children;
};

}  // namespace tsr
