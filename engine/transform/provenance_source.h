#pragma once
// A provenance worked out only when an op asks for it: an op recorded into a trace, or an error. An eager op that
// succeeds never asks, so naming the Python line of every op costs nothing until a name is needed.
#include "engine/ir/graph.h"

namespace tsr {

class ProvenanceSource {
 public:
  virtual ~ProvenanceSource() = default;
  virtual ir::Provenance provenance() const = 0;
};

// As ProvenanceScope (trace.h), with the provenance asked of `source` when an op needs it; the source outlives
// the scope.
class LazyProvenanceScope {
 public:
  explicit LazyProvenanceScope(const ProvenanceSource& source);
  ~LazyProvenanceScope();
  LazyProvenanceScope(const LazyProvenanceScope&) = delete;
  LazyProvenanceScope& operator=(const LazyProvenanceScope&) = delete;
};

}  // namespace tsr
