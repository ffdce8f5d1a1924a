#pragma once
// A convolution's epilogue as oneDNN post-ops (the fusion pass's conv anchors, fusion.h). oneDNN applies a chain
// of post-ops to the convolution's result as it writes it: each takes the value the chain has so far and gives
// the next, so a consumer joins the chain only where it reads that value, nothing else reads it, and oneDNN has
// an operation for it:
//   eltwise  relu, tanh, logistic, and gelu (the tanh approximation or the erf form, recognised from the ops it
//            was traced as, whatever order the simplifier left them in);
//   binary   add, sub, mul, div, max, min of the chain's value and a scalar, a per-output-channel vector (a bias or
//            a batch norm's scale, broadcast along the feature dim) or a tensor of the result's shape (a residual);
//            sub and div with the chain's value on the left.
#include <string>
#include <vector>

#include "engine/ir/graph.h"
#include "engine/passes/pass.h"

namespace tsr::passes {

enum class PostOpKind : uint8_t { Relu, Tanh, Logistic, GeluTanh, GeluErf, Add, Sub, Mul, Div, Max, Min };
const char* postOpKindName(PostOpKind k);  // "relu", "gelu_tanh", "add", ...

// How a binary post-op's other operand is laid over the result.
enum class PostOpOperand : uint8_t { None, Scalar, PerChannel, Full };

struct PostOp {
  PostOpKind kind = PostOpKind::Relu;
  PostOpOperand operand = PostOpOperand::None;
  ir::ValueId value = ir::kNone;  // the operand as the kernel reads it (a view's source): 1, O or all elements
  std::vector<ir::NodeId> nodes;  // the ops it stands for, in graph order (a gelu: the ones it was traced as)
  ir::ValueId result = ir::kNone; // the chain's value after it
};

// The nodes that read each value (as an operand, views included) and whether it leaves the graph.
struct ValueReaders {
  explicit ValueReaders(const ir::Graph& g);
  std::vector<std::vector<ir::NodeId>> readers;
  std::vector<bool> isOutput;
};

struct PostOpMatch {
  bool ok = false;
  PostOp op;                     // when ok
  FusionReason reason = FusionReason::None;  // when not
  std::string why;               // when not: "relu's operand is read elsewhere too", ...
};

// Whether node n extends a chain whose value so far is `tail` (the convolution's result first), with the result
// dims [N, O, spatial...] of the convolution at the positions `outSpec` gives. n must read tail directly.
PostOpMatch matchConvPostOp(const ir::Graph& g, const ir::OpRegistry& reg, const ValueReaders& readers,
                            ir::ValueId tail, ir::NodeId n, const std::vector<int64_t>& outSpec);

}  // namespace tsr::passes
