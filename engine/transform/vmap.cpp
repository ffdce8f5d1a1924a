#include "engine/transform/vmap.h"

#include <numeric>

#include "engine/ops/registry.h"
#include "engine/ops/rule_helpers.h"
#include "engine/transform/api.h"
#include "engine/transform/trace.h"

namespace tsr {

ArrayFn vmap(ArrayFn f, std::vector<int> inAxes, std::vector<int> outAxes) {
  return [f = std::move(f), inAxes = std::move(inAxes), outAxes = std::move(outAxes)](const std::vector<Array>& xs) {
    std::vector<int> in = inAxes.empty() ? std::vector<int>(xs.size(), 0) : inAxes;
    if (in.size() != xs.size()) raise(makeError("vmap: {} in_axes for {} arguments", in.size(), xs.size()));
    // Per-example avals, and the batch size all batched arguments agree on.
    int64_t size = -1;
    std::vector<Aval> exampleAvals;
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].valid()) raise(makeError("vmap: argument {} is an empty Array", i));
      Aval a = xs[i].aval();
      if (in[i] >= 0) {
        int ax = normalizeAxis(in[i], a.rank());
        if (ax < 0) raise(makeError("vmap: in_axes[{}] = {} is out of range for {}", i, in[i], a.toString()));
        in[i] = ax;
        int64_t n = a.shape[ax];
        if (size >= 0 && n != size)
          raise(makeError("vmap: argument {} has {} examples on axis {}, but earlier arguments have {}", i, n, ax, size));
        size = n;
        a.shape.dims().erase(a.shape.dims().begin() + ax);
      }
      exampleAvals.push_back(a);
    }
    if (size < 0) raise(makeError("vmap: no argument is batched (all in_axes are -1)"));

    auto traced = makeGraph(f, exampleAvals, "vmap");
    if (!traced.ok()) raise(traced.takeError());
    const ClosedGraph& cg = *traced;
    const ir::Graph& g = cg.graph;
    const auto& reg = ops::registry();

    std::vector<Array> env(static_cast<size_t>(g.numValues()));
    std::vector<int> bdim(static_cast<size_t>(g.numValues()), -1);
    for (size_t i = 0; i < xs.size(); ++i) {
      env[static_cast<size_t>(g.inputs()[i])] = xs[i];
      bdim[static_cast<size_t>(g.inputs()[i])] = in[i];
    }
    for (size_t i = 0; i < cg.consts.size(); ++i) env[static_cast<size_t>(g.inputs()[xs.size() + i])] = cg.consts[i];

    for (const ir::Node& n : g.nodes()) {
      std::vector<Array> operands;
      std::vector<int> dims;
      bool batched = false;
      for (ir::ValueId v : n.operands) {
        operands.push_back(env[static_cast<size_t>(v)]);
        dims.push_back(bdim[static_cast<size_t>(v)]);
        batched |= dims.back() >= 0;
      }
      if (!batched) {
        std::vector<Array> results = bind(n.op, operands, n.attrs, n.prov);
        for (size_t r = 0; r < n.results.size(); ++r) env[static_cast<size_t>(n.results[r])] = results[r];
        continue;
      }
      const ir::OpDef& def = reg.get(n.op);
      if (!def.batch) raise(makeError("{}: no batching rule (at {})", def.name, n.prov.toString()));
      ir::BatchResult br;
      {
        ProvenanceScope scope(n.prov);
        br = def.batch(ir::BatchArgs{operands, dims, size, n.attrs});
      }
      if (br.results.size() != n.results.size() || br.batchDims.size() != n.results.size())
        raise(makeError("{}: batching rule returned {} results for {}", def.name, br.results.size(), n.results.size()));
      for (size_t r = 0; r < n.results.size(); ++r) {
        env[static_cast<size_t>(n.results[r])] = br.results[r];
        bdim[static_cast<size_t>(n.results[r])] = br.batchDims[r];
      }
    }

    std::vector<Array> outs;
    for (size_t j = 0; j < g.outputs().size(); ++j) {
      ir::ValueId v = g.outputs()[j];
      int to = outAxes.empty() ? 0 : outAxes[j < outAxes.size() ? j : 0];
      const Array& y = env[static_cast<size_t>(v)];
      int rank = g.aval(v).rank() + 1;
      int ax = normalizeAxis(to, rank);
      if (ax < 0) raise(makeError("vmap: out_axes[{}] = {} is out of range for rank {}", j, to, rank));
      outs.push_back(ops::moveBatchDim(y, bdim[static_cast<size_t>(v)], ax, size));
    }
    return outs;
  };
}

}  // namespace tsr
