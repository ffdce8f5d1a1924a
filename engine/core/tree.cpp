#include "engine/core/tree.h"

namespace tsr {

int TreeDef::numLeaves() const {
  if (kind == TreeKind::Leaf) return 1;
  int n = 0;
  for (const auto& c : children) n += c.numLeaves();
  return n;
}

std::string TreeDef::toString() const {
  switch (kind) {
    case TreeKind::None: return "None";
    case TreeKind::Leaf: return "*";
    case TreeKind::List: {
      std::string s = "[";
      for (size_t i = 0; i < children.size(); ++i) s += (i ? ", " : "") + children[i].toString();
      return s + "]";
    }
    case TreeKind::Dict: {
      std::string s = "{";
      for (size_t i = 0; i < children.size(); ++i) s += (i ? ", " : "") + keys[i] + ": " + children[i].toString();
      return s + "}";
    }
  }
  return "?";
}

std::string joinPath(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

}  // namespace tsr
