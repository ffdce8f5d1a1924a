#include "engine/backends/cuda/loop_groups.h"

#include <algorithm>
#include <map>

namespace tsr::cuda {

using cpu::LoweredKernel;
using ir::ValueId;

namespace {

ValueId rootOf(const cpu::Executable& exe, ValueId v) {
  const auto& slots = exe.valueSlots();
  while (slots[static_cast<size_t>(v)].loc == cpu::Loc::Alias) v = slots[static_cast<size_t>(v)].aliasOf;
  return v;
}

// Whether loop kernel k may run at position `at` (at most its own): what it reads was there before `at`, what it
// writes is a fresh output.
bool mayRunAt(const cpu::Executable& exe, const LoweredKernel& k, size_t at) {
  const auto& slots = exe.valueSlots();
  for (const cpu::TileInput& in : k.prog.inputs) {
    const cpu::ValueSlot& s = slots[static_cast<size_t>(rootOf(exe, k.args[static_cast<size_t>(in.arg)]))];
    if (s.loc == cpu::Loc::Input || s.loc == cpu::Loc::Const) continue;
    if ((s.loc != cpu::Loc::Arena && s.loc != cpu::Loc::Fresh) || s.def < 0 || static_cast<size_t>(s.def) >= at)
      return false;
  }
  for (const cpu::TileStore& st : k.prog.stores)
    if (slots[static_cast<size_t>(rootOf(exe, k.args[static_cast<size_t>(st.arg)]))].loc != cpu::Loc::Fresh)
      return false;
  return true;
}

}  // namespace

Status planLoopGroups(const cpu::Executable& exe, GeneratedProgram& program) {
  const auto& kernels = exe.loweredKernels();
  program.groupOf.assign(kernels.size(), -1);
  // Candidates by their group kernel's name (equal names: equal text), each open group as (first member, members).
  std::map<std::string, std::vector<LoopGroup>> open;
  std::map<std::string, GeneratedKernel> groupKernels;
  for (size_t ki = 0; ki < kernels.size(); ++ki) {
    const LoweredKernel& k = kernels[ki];
    const int gi = program.generatedIndex[ki];
    if (k.info.kind != passes::GroupKind::Loop || program.paths[ki] != KernelPath::Generated || gi < 0) continue;
    const GeneratedKernel& own = program.kernels[static_cast<size_t>(gi)];
    if (own.elements <= 0 || own.prefillFrom >= 0 || !own.zeroArgs.empty()) continue;
    TSR_ASSIGN(std::optional<GeneratedKernel> group,
               generateLoopGroup(k.prog, static_cast<int>(k.args.size()), k.info.name));
    if (!group || !mayRunAt(exe, k, ki)) continue;
    std::vector<LoopGroup>& same = open[group->name];
    // The latest group it may join (a later first member leaves more values computed before it).
    auto joined = std::find_if(same.rbegin(), same.rend(),
                               [&](const LoopGroup& g) { return mayRunAt(exe, k, g.members.front()); });
    if (joined != same.rend()) {
      joined->members.push_back(ki);
      joined->elements.push_back(own.elements);
      continue;
    }
    same.push_back(LoopGroup{-1, {ki}, {own.elements}});
    groupKernels.emplace(group->name, std::move(*group));
  }
  std::vector<LoopGroup> groups;
  for (auto& [name, list] : open)
    for (LoopGroup& g : list) {
      if (g.members.size() < 2) continue;
      auto it = std::find_if(program.kernels.begin(), program.kernels.end(),
                             [&](const GeneratedKernel& x) { return x.name == name; });
      if (it == program.kernels.end()) {
        program.kernels.push_back(groupKernels.at(name));
        it = program.kernels.end() - 1;
      }
      g.kernel = static_cast<int>(it - program.kernels.begin());
      groups.push_back(std::move(g));
    }
  // In launch order (by first member), so that describe() and the table read in program order.
  std::sort(groups.begin(), groups.end(),
            [](const LoopGroup& a, const LoopGroup& b) { return a.members.front() < b.members.front(); });
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t m : groups[g].members) program.groupOf[m] = static_cast<int>(g);
  program.groups = std::move(groups);
  return {};
}

LoopGroupTables layoutLoopGroups(const GeneratedProgram& program, int numSMs) {
  LoopGroupTables t;
  const int64_t cap = std::max<int64_t>(int64_t{numSMs} * 32, 1);
  for (const LoopGroup& g : program.groups) {
    LoopGroupLayout l;
    l.offset = t.words;
    for (int64_t n : g.elements) {
      const int64_t blocks = std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, cap);
      l.firstBlock.push_back(l.blocks);
      l.memberBlocks.push_back(blocks);
      l.blocks += blocks;
    }
    const int width = program.kernels[static_cast<size_t>(g.kernel)].numArgs + kGroupEntryExtra;
    t.words += static_cast<int64_t>(g.members.size()) * width;
    t.groups.push_back(std::move(l));
  }
  return t;
}

void writeLoopGroupTables(const cpu::Executable& exe, const GeneratedProgram& program, const LoopGroupTables& tables,
                          const std::vector<void*>& ptr, int64_t* table) {
  const auto& kernels = exe.loweredKernels();
  for (size_t gi = 0; gi < program.groups.size(); ++gi) {
    const LoopGroup& g = program.groups[gi];
    const LoopGroupLayout& l = tables.groups[gi];
    const int numArgs = program.kernels[static_cast<size_t>(g.kernel)].numArgs;
    int64_t* e = table + l.offset;
    for (size_t m = 0; m < g.members.size(); ++m, e += numArgs + kGroupEntryExtra) {
      const LoweredKernel& k = kernels[g.members[m]];
      for (int a = 0; a < numArgs; ++a)
        e[a] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(ptr[static_cast<size_t>(k.args[static_cast<size_t>(a)])]));
      e[numArgs] = g.elements[m];
      e[numArgs + 1] = l.firstBlock[m];
      e[numArgs + 2] = l.memberBlocks[m];
    }
  }
}

}  // namespace tsr::cuda
