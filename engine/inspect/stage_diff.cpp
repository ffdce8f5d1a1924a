#include "engine/inspect/stage_diff.h"

#include <deque>
#include <string>
#include <unordered_map>

#include "engine/inspect/node_info.h"

namespace tsr::inspect {

namespace {

std::string looseKey(const Stage& s, ir::NodeId n) {
  return opName(*s.graph, n) + "|" + s.graph->nodes()[static_cast<size_t>(n)].prov.modulePath;
}

// Op, module, result avals and attributes of every node; the attributes come from each node's printed line.
std::vector<std::string> exactKeys(const Stage& s) {
  std::vector<size_t> lineStart = {0};
  for (size_t i = 0; i < s.text.size(); ++i)
    if (s.text[i] == '\n') lineStart.push_back(i + 1);
  std::vector<std::string> keys(s.graph->nodes().size());
  for (size_t n = 0; n < keys.size(); ++n) {
    std::string k = looseKey(s, static_cast<ir::NodeId>(n)) + "|";
    for (ir::ValueId v : s.graph->nodes()[n].results) k += s.graph->aval(v).toString() + ",";
    size_t line = static_cast<size_t>(s.nodeLines[n]);
    if (line < lineStart.size()) {
      size_t begin = lineStart[line];
      size_t end = line + 1 < lineStart.size() ? lineStart[line + 1] : s.text.size();
      k += "|" + attrsOfLine(std::string_view(s.text).substr(begin, end - begin));
    }
    keys[n] = std::move(k);
  }
  return keys;
}

}  // namespace

StageDiff diffStages(const Stage& a, const Stage& b) {
  size_t na = a.graph->nodes().size(), nb = b.graph->nodes().size();
  StageDiff d;
  d.a.assign(na, DiffStatus::Only);
  d.b.assign(nb, DiffStatus::Only);
  d.matchOfA.assign(na, ir::kNone);
  std::vector<std::string> keysA = exactKeys(a), keysB = exactKeys(b);
  auto match = [&](auto keyOfA, auto keyOfB, DiffStatus status) {
    std::unordered_map<std::string, std::deque<ir::NodeId>> free;
    for (size_t j = 0; j < nb; ++j)
      if (d.b[j] == DiffStatus::Only) free[keyOfB(static_cast<ir::NodeId>(j))].push_back(static_cast<ir::NodeId>(j));
    for (size_t i = 0; i < na; ++i) {
      if (d.a[i] != DiffStatus::Only) continue;
      auto it = free.find(keyOfA(static_cast<ir::NodeId>(i)));
      if (it == free.end() || it->second.empty()) continue;
      ir::NodeId j = it->second.front();
      it->second.pop_front();
      d.a[i] = d.b[static_cast<size_t>(j)] = status;
      d.matchOfA[i] = j;
    }
  };
  match([&](ir::NodeId n) { return keysA[static_cast<size_t>(n)]; }, [&](ir::NodeId n) { return keysB[static_cast<size_t>(n)]; },
        DiffStatus::Same);
  match([&](ir::NodeId n) { return looseKey(a, n); }, [&](ir::NodeId n) { return looseKey(b, n); }, DiffStatus::Changed);
  for (DiffStatus s : d.a) {
    d.same += s == DiffStatus::Same;
    d.changed += s == DiffStatus::Changed;
    d.removed += s == DiffStatus::Only;
  }
  for (DiffStatus s : d.b) d.added += s == DiffStatus::Only;
  return d;
}

}  // namespace tsr::inspect
