// Convolutions as fusion anchors: the consumers that oneDNN post-ops express (a per-channel bias or scale, a
// residual, relu, logistic, gelu as the Array API traces it) join the convolution's group as a chain, anything
// else stays out with its reason recorded, and the compiled kernel gives the values of a naive loop convolution
// followed by the epilogue in double precision.
#include "tests/check.h"

#include <cmath>
#include <functional>
#include <numbers>

#include "engine/backends/cpu/executable.h"
#include "engine/passes/fusion.h"
#include "engine/passes/pipeline.h"
#include "engine/transform/api.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;
using passes::GroupKind;
using passes::PostOpKind;
using passes::PostOpOperand;

namespace {

// Traced as a user writes it and cleaned up as the compiler does before fusion (the simplifier may reorder a
// gelu's ops).
ir::Graph traced(const std::function<std::vector<Array>(const std::vector<Array>&)>& f, std::vector<Aval> avals) {
  auto cg = makeGraph(f, avals);
  if (!cg.ok()) TSR_FATAL(cg.error().message);
  passes::PassManager pm = passes::standardPipeline();
  passes::PassContext ctx(reg());
  auto r = pm.run(cg->graph, ctx);
  if (!r.ok()) TSR_FATAL(r.error().message);
  return cg->graph;
}

struct Planned {
  passes::FusionPlan plan;
  std::vector<passes::Decision> decisions;
};

Planned plan(const ir::Graph& g, const passes::FusionOptions& o = {}) {
  passes::PassContext ctx(reg());
  auto p = passes::planFusion(g, reg(), &ctx, o);
  if (!p.ok()) TSR_FATAL("planFusion: " << p.error().message);
  Planned out{std::move(*p), {}};
  for (const auto& d : ctx.log().all()) out.decisions.push_back(d);
  return out;
}

ir::NodeId nodeOf(const ir::Graph& g, OpCode op, int nth = 0) {
  for (ir::NodeId n = 0; n < static_cast<ir::NodeId>(g.nodes().size()); ++n)
    if (g.nodes()[static_cast<size_t>(n)].op == op && nth-- == 0) return n;
  TSR_FATAL("no such node");
}

// The group of the graph's convolution.
const passes::FusionGroup& convGroup(const ir::Graph& g, const passes::FusionPlan& p) {
  return p.groups[static_cast<size_t>(p.groupOfNode[static_cast<size_t>(nodeOf(g, OpCode::ConvGeneralDilated))])];
}

std::vector<PostOpKind> kinds(const passes::FusionGroup& gr) {
  std::vector<PostOpKind> out;
  for (const auto& op : gr.postOps) out.push_back(op.kind);
  return out;
}

// Every value of an NCHW array: [N, C, H, W] row-major.
struct Nchw {
  int64_t n, c, h, w;
  std::vector<double> v;
  double at(int64_t a, int64_t b, int64_t y, int64_t x) const { return v[static_cast<size_t>(((a * c + b) * h + y) * w + x)]; }
};

// y[n, o, i, j] = sum_{c, a, b} xd[n, c, i*s + a - pad, j*s + b - pad] w[o, c, a, b], with xd x dilated by ld
// (ld - 1 zeros between its elements) and zero outside: the definition, in double precision.
Nchw naiveConv(const Nchw& x, const Nchw& w, int64_t stride, int64_t pad, int64_t ld = 1) {
  const int64_t hd = (x.h - 1) * ld + 1, wd = (x.w - 1) * ld + 1;
  Nchw y{x.n, w.n, (hd + 2 * pad - w.h) / stride + 1, (wd + 2 * pad - w.w) / stride + 1, {}};
  y.v.assign(static_cast<size_t>(y.n * y.c * y.h * y.w), 0.0);
  auto xd = [&](int64_t n, int64_t c, int64_t p, int64_t q) {
    if (p < 0 || q < 0 || p >= hd || q >= wd || p % ld || q % ld) return 0.0;
    return x.at(n, c, p / ld, q / ld);
  };
  for (int64_t n = 0; n < y.n; ++n)
    for (int64_t o = 0; o < y.c; ++o)
      for (int64_t i = 0; i < y.h; ++i)
        for (int64_t j = 0; j < y.w; ++j) {
          double s = 0;
          for (int64_t c = 0; c < x.c; ++c)
            for (int64_t a = 0; a < w.h; ++a)
              for (int64_t b = 0; b < w.w; ++b) s += xd(n, c, i * stride + a - pad, j * stride + b - pad) * w.at(o, c, a, b);
          y.v[static_cast<size_t>(((n * y.c + o) * y.h + i) * y.w + j)] = s;
        }
  return y;
}

Nchw asNchw(const std::vector<double>& v, const Shape& s) { return Nchw{s[0], s[1], s[2], s[3], v}; }

// The [2, 7, 7, 3] NHWC input and the [3, 3, 3, 8] HWIO filter of the channels-last cases, as NCHW and OIHW.
Nchw nhwcInput(const std::vector<double>& in) {
  Nchw x{2, 3, 7, 7, std::vector<double>(2 * 3 * 49)};
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 49; ++i) x.v[static_cast<size_t>((n * 3 + c) * 49 + i)] = in[static_cast<size_t>((n * 49 + i) * 3 + c)];
  return x;
}
Nchw hwioFilter(const std::vector<double>& in) {
  Nchw w{8, 3, 3, 3, std::vector<double>(8 * 27)};
  for (int64_t o = 0; o < 8; ++o)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t k = 0; k < 9; ++k) w.v[static_cast<size_t>((o * 3 + c) * 9 + k)] = in[static_cast<size_t>((k * 3 + c) * 8 + o)];
  return w;
}

double geluTanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double geluErf(double x) { return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2)); }

// Compiles g with its fusion plan (freed memory poisoned), runs it on random inputs and compares output 0 with
// `reference` (the inputs as doubles -> the expected values). Returns "" or what differs.
std::string matchesReference(const ir::Graph& g, const passes::FusionPlan& p,
                             const std::function<std::vector<double>(const std::vector<std::vector<double>>&)>& reference,
                             int* postOpKernels = nullptr) {
  cpu::CompileOptions co;
  co.poisonFreed = true;
  auto exe = cpu::Executable::compile(g, reg(), p, co);
  if (!exe.ok()) return exe.error().message;
  if (postOpKernels) {
    *postOpKernels = 0;
    for (const auto& k : (*exe)->loweredKernels()) *postOpKernels += k.oneDnnPostOps;
  }
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    auto inputs = randomInputs(g, seed);
    std::vector<std::vector<double>> in;
    for (size_t i = 0; i < inputs.size(); ++i) in.push_back(toDoubles(inputs[i], g.aval(g.inputs()[i])));
    auto got = (*exe)->run(inputs);
    if (!got.ok()) return got.error().message;
    auto y = toDoubles((*got)[0], g.aval(g.outputs()[0]));
    auto want = reference(in);
    if (want.size() != y.size()) return fmt::format("{} values, expected {}", y.size(), want.size());
    for (size_t j = 0; j < y.size(); ++j)
      if (!(std::fabs(y[j] - want[j]) <= 2e-5 * (1 + std::fabs(want[j]))))
        return fmt::format("element {}: compiled {} reference {}", j, y[j], want[j]);
  }
  return "";
}

const Aval kX = f32({2, 3, 9, 9}), kW = f32({8, 3, 3, 3}), kB = f32({8});

Array convSame(const Array& x, const Array& w) { return conv(x, w, {1, 1}, "SAME"); }
Array channel(const Array& v) { return reshape(v, {1, 8, 1, 1}); }

}  // namespace

TEST_CASE("convBiasReluIsOneKernelOfPostOps") {
  ir::Graph g = traced([](const std::vector<Array>& in) { return std::vector<Array>{relu(convSame(in[0], in[1]) + channel(in[2]))}; },
                       {kX, kW, kB});
  Planned p = plan(g);
  const auto& gr = convGroup(g, p.plan);
  TSR_COMPARE(gr.kind, GroupKind::Conv);
  TSR_COMPARE(gr.nodes.size(), size_t{3});  // conv, add, relu
  TSR_COMPARE(p.plan.numKernels(), 1);
  REQUIRE(kinds(gr) == (std::vector<PostOpKind>{PostOpKind::Add, PostOpKind::Relu}));
  TSR_COMPARE(gr.postOps[0].operand, PostOpOperand::PerChannel);
  TSR_COMPARE(gr.postOps[0].value, g.inputs()[2]);  // the bias itself, not its broadcast
  int fused = 0;
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1);
                                 for (size_t i = 0; i < y.v.size(); ++i)
                                   y.v[i] = std::max(0.0, y.v[i] + in[2][(i / 81) % 8]);
                                 return y.v;
                               },
                               &fused),
              std::string());
  TSR_COMPARE(fused, 1);  // oneDNN took the chain
}

TEST_CASE("convBiasResidualReluFusesInOrder") {
  const Aval r = f32({2, 8, 5, 5});
  ir::Graph g = traced(
      [](const std::vector<Array>& in) {
        Array y = conv(in[0], in[1], {2, 2}, "SAME") + channel(in[2]);
        return std::vector<Array>{relu(y + in[3])};
      },
      {kX, kW, kB, r});
  Planned p = plan(g);
  const auto& gr = convGroup(g, p.plan);
  TSR_COMPARE(p.plan.numKernels(), 1);
  REQUIRE(kinds(gr) == (std::vector<PostOpKind>{PostOpKind::Add, PostOpKind::Add, PostOpKind::Relu}));
  TSR_COMPARE(gr.postOps[1].operand, PostOpOperand::Full);
  int fused = 0;
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 // SAME with stride 2 over 9: 5 outputs, padding 1 each side.
                                 Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 2, 1);
                                 for (size_t i = 0; i < y.v.size(); ++i)
                                   y.v[i] = std::max(0.0, y.v[i] + in[2][(i / 25) % 8] + in[3][i]);
                                 return y.v;
                               },
                               &fused),
              std::string());
  TSR_COMPARE(fused, 1);
}

TEST_CASE("geluAsTracedIsOnePostOp") {
  for (bool approximate : {true, false}) {
    ir::Graph g = traced([approximate](const std::vector<Array>& in) { return std::vector<Array>{gelu(convSame(in[0], in[1]), approximate)}; },
                         {kX, kW});
    Planned p = plan(g);
    const auto& gr = convGroup(g, p.plan);
    TSR_COMPARE(p.plan.numKernels(), 1);
    REQUIRE(kinds(gr) == std::vector<PostOpKind>{approximate ? PostOpKind::GeluTanh : PostOpKind::GeluErf});
    int fused = 0;
    TSR_COMPARE(matchesReference(g, p.plan,
                                 [&](const auto& in) {
                                   Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1);
                                   for (double& v : y.v) v = approximate ? geluTanh(v) : geluErf(v);
                                   return y.v;
                                 },
                                 &fused),
                std::string());
    TSR_COMPARE(fused, 1);
  }
}

TEST_CASE("channelsLastScaleBiasLogistic") {
  // NHWC: the feature dim is last, and a per-channel vector broadcasts along it.
  ir::Graph g = traced(
      [](const std::vector<Array>& in) {
        Array y = convGeneralDilated(in[0], in[1], {1, 1}, "VALID", {}, {}, {"NHWC", "HWIO", "NHWC"});
        return std::vector<Array>{sigmoid(y * in[2] - in[3])};
      },
      {f32({2, 7, 7, 3}), f32({3, 3, 3, 8}), kB, kB});
  Planned p = plan(g);
  const auto& gr = convGroup(g, p.plan);
  TSR_COMPARE(p.plan.numKernels(), 1);
  REQUIRE(kinds(gr) == (std::vector<PostOpKind>{PostOpKind::Mul, PostOpKind::Sub, PostOpKind::Logistic}));
  TSR_COMPARE(gr.postOps[0].operand, PostOpOperand::PerChannel);
  int fused = 0;
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 // NHWC x and HWIO w as NCHW and OIHW for the naive loop.
                                 Nchw y = naiveConv(nhwcInput(in[0]), hwioFilter(in[1]), 1, 0);  // [2, 8, 5, 5]
                                 std::vector<double> out(y.v.size());
                                 for (int64_t n = 0; n < 2; ++n)
                                   for (int64_t o = 0; o < 8; ++o)
                                     for (int64_t i = 0; i < 25; ++i) {
                                       const double v = y.v[static_cast<size_t>((n * 8 + o) * 25 + i)] * in[2][static_cast<size_t>(o)] - in[3][static_cast<size_t>(o)];
                                       out[static_cast<size_t>((n * 25 + i) * 8 + o)] = 1 / (1 + std::exp(-v));
                                     }
                                 return out;
                               },
                               &fused),
              std::string());
  TSR_COMPARE(fused, 1);
}

TEST_CASE("whatPostOpsCannotExpressStaysOutWithItsReason") {
  // y feeds both a relu and a sum: the chain would write only relu(y), so relu stays out.
  ir::Graph g = traced(
      [](const std::vector<Array>& in) {
        Array y = convSame(in[0], in[1]);
        return std::vector<Array>{relu(y), sum(y)};
      },
      {kX, kW});
  Planned p = plan(g);
  const ir::NodeId conv = nodeOf(g, OpCode::ConvGeneralDilated), relu = nodeOf(g, OpCode::Relu);
  TSR_COMPARE(convGroup(g, p.plan).nodes.size(), size_t{1});
  auto v = passes::whyNotFused(g, p.plan, p.decisions, relu, conv);
  CHECK(!v.fused);
  TSR_COMPARE(v.reason, passes::FusionReason::NoPostOp);
  REQUIRE_MESSAGE(v.detail.find("read by other ops too") != std::string::npos, v.detail);
  CHECK(!v.hint.empty());

  // exp has no post-op; y * y reads the chain's value twice.
  for (int which = 0; which < 2; ++which) {
    ir::Graph h = traced(
        [which](const std::vector<Array>& in) {
          Array y = convSame(in[0], in[1]) + channel(in[2]);
          return std::vector<Array>{which == 0 ? exp(y) : y * y};
        },
        {kX, kW, kB});
    Planned q = plan(h);
    const auto& gr = convGroup(h, q.plan);
    REQUIRE(kinds(gr) == std::vector<PostOpKind>{PostOpKind::Add});  // the bias still fused
    const ir::NodeId last = nodeOf(h, which == 0 ? OpCode::Exp : OpCode::Mul);
    auto w = passes::whyNotFused(h, q.plan, q.decisions, last, nodeOf(h, OpCode::Add));
    TSR_COMPARE(w.reason, passes::FusionReason::NoPostOp);
    REQUIRE_MESSAGE(w.detail.find(which == 0 ? "has no oneDNN post-op" : "twice") != std::string::npos, w.detail);
    TSR_COMPARE(matchesReference(h, q.plan,
                                 [&](const auto& in) {
                                   Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1);
                                   for (size_t i = 0; i < y.v.size(); ++i) {
                                     const double v = y.v[i] + in[2][(i / 81) % 8];
                                     y.v[i] = which == 0 ? std::exp(v) : v * v;
                                   }
                                   return y.v;
                                 }),
                std::string());
  }
}

TEST_CASE("aGroupWithoutItsChainRunsConvolutionThenLoop") {
  // Where oneDNN takes no post-op chain the kernel runs the convolution and then its epilogue as a loop: the
  // same group with its chain taken away.
  ir::Graph g = traced([](const std::vector<Array>& in) { return std::vector<Array>{relu(convSame(in[0], in[1]) + channel(in[2]))}; },
                       {kX, kW, kB});
  Planned p = plan(g);
  const int gi = p.plan.groupOfNode[static_cast<size_t>(nodeOf(g, OpCode::ConvGeneralDilated))];
  p.plan.groups[static_cast<size_t>(gi)].postOps.clear();
  int fused = -1;
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1);
                                 for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = std::max(0.0, y.v[i] + in[2][(i / 81) % 8]);
                                 return y.v;
                               },
                               &fused),
              std::string());
  TSR_COMPARE(fused, 0);
  TSR_COMPARE(p.plan.numKernels(), 1);
}

TEST_CASE("onlyForwardConvolutionsAnchor") {
  // lhs dilation 2 (a transposed convolution) is oneDNN's backward-data primitive, which takes no post-ops: the
  // convolution runs alone and its consumers fuse as a loop, as before conv groups.
  ir::Graph g = traced(
      [](const std::vector<Array>& in) {
        Array y = convGeneralDilated(in[0], in[1], {1, 1}, std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 1}}, {2, 2});
        return std::vector<Array>{relu(y + channel(in[2]))};
      },
      {kX, kW, kB});
  Planned p = plan(g);
  TSR_COMPARE(convGroup(g, p.plan).kind, GroupKind::Opaque);
  TSR_COMPARE(p.plan.numKernels(), 2);
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1, 2);
                                 const auto hw = static_cast<size_t>(y.h * y.w);
                                 for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = std::max(0.0, y.v[i] + in[2][(i / hw) % 8]);
                                 return y.v;
                               }),
              std::string());
}

TEST_CASE("withoutConvEpiloguesTheConvolutionRunsAlone") {
  // What the CUDA backend plans: the convolution is a kernel of its own, its epilogue a loop.
  ir::Graph g = traced([](const std::vector<Array>& in) { return std::vector<Array>{relu(convSame(in[0], in[1]) + channel(in[2]))}; },
                       {kX, kW, kB});
  passes::FusionOptions o;
  o.convEpilogues = false;
  Planned p = plan(g, o);
  TSR_COMPARE(convGroup(g, p.plan).kind, GroupKind::Opaque);
  TSR_COMPARE(p.plan.numKernels(), 2);
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 Nchw y = naiveConv(asNchw(in[0], kX.shape), asNchw(in[1], kW.shape), 1, 1);
                                 for (size_t i = 0; i < y.v.size(); ++i) y.v[i] = std::max(0.0, y.v[i] + in[2][(i / 81) % 8]);
                                 return y.v;
                               }),
              std::string());
}

TEST_CASE("resnetBlockGradientsMatchFiniteDifferences") {
  // z = relu(conv(relu(conv(x, w1) + b1), w2) + b2 + x), L = sum(z * c): the step's gradient graph, planned with
  // conv groups (the forward's biases and residual as post-ops; relu stays out, its gradient reads its operand),
  // against central differences of L computed by naive loops in double precision.
  const Aval x = f32({2, 4, 6, 6}), w = f32({4, 4, 3, 3}), b = f32({4});
  auto block = [](const std::vector<Array>& p) {
    auto ch = [](const Array& v) { return reshape(v, {1, 4, 1, 1}); };
    Array h = relu(convSame(p[0], p[1]) + ch(p[2]));
    Array z = relu(convSame(h, p[3]) + ch(p[4]) + p[0]);
    return std::vector<Array>{sum(z * p[5])};
  };
  ir::Graph g = traced(
      [&](const std::vector<Array>& in) {
        VjpOutput v = vjp(block, in);
        return v.pullback({onesLike(v.outputs[0])});
      },
      {x, w, b, w, b, x});
  Planned p = plan(g);
  int convGroups = 0, withPostOps = 0;
  for (const auto& gr : p.plan.groups) {
    convGroups += gr.kind == GroupKind::Conv;
    withPostOps += !gr.postOps.empty();
  }
  // The two forward convolutions and the two input gradients (stride 1: forward convolutions with the kernel
  // flipped); the kernel gradients are oneDNN's backward-weights and run alone.
  TSR_COMPARE(convGroups, 4);
  CHECK(withPostOps >= 2);
  auto exe = cpu::Executable::compile(g, reg(), p.plan, cpu::CompileOptions{});
  REQUIRE_MESSAGE(exe.ok(), exe.error().message);
  auto inputs = randomInputs(g, 7);
  auto got = (*exe)->run(inputs);
  REQUIRE_MESSAGE(got.ok(), got.error().message);
  std::vector<std::vector<double>> in;
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(toDoubles(inputs[i], g.aval(g.inputs()[i])));
  auto loss = [&](const std::vector<std::vector<double>>& q) {
    auto addChannel = [](Nchw& y, const std::vector<double>& bias) {
      for (size_t i = 0; i < y.v.size(); ++i) y.v[i] += bias[(i / static_cast<size_t>(y.h * y.w)) % static_cast<size_t>(y.c)];
    };
    Nchw h = naiveConv(asNchw(q[0], x.shape), asNchw(q[1], w.shape), 1, 1);
    addChannel(h, q[2]);
    for (double& v : h.v) v = std::max(0.0, v);
    Nchw z = naiveConv(h, asNchw(q[3], w.shape), 1, 1);
    addChannel(z, q[4]);
    double l = 0;
    for (size_t i = 0; i < z.v.size(); ++i) l += std::max(0.0, z.v[i] + q[0][i]) * q[5][i];
    return l;
  };
  std::mt19937 rng(3);
  for (size_t arg = 0; arg < 5; ++arg) {
    const auto grad = toDoubles((*got)[arg], g.aval(g.outputs()[arg]));
    for (int t = 0; t < 6; ++t) {
      const size_t i = std::uniform_int_distribution<size_t>(0, in[arg].size() - 1)(rng);
      const double eps = 1e-4;
      auto q = in;
      q[arg][i] += eps;
      const double up = loss(q);
      q[arg][i] -= 2 * eps;
      const double numeric = (up - loss(q)) / (2 * eps);
      REQUIRE_MESSAGE(std::fabs(grad[i] - numeric) <= 1e-3 * (1 + std::fabs(numeric)),
                      "input " << arg << " element " << i << ": compiled " << grad[i] << ", finite differences " << numeric);
    }
  }
}

TEST_CASE("batchNormInferenceAndReluFoldIntoTheConvolution") {
  // Channels last, then batch norm with running statistics as nn::BatchNorm writes it, (y - m) * rsqrt(v + eps) *
  // w + b (v = s * s + 0.5 here, as the inputs are random), then relu: every op is a per-channel binary or an eltwise
  // post-op.
  ir::Graph g = traced(
      [](const std::vector<Array>& in) {
        Array y = convGeneralDilated(in[0], in[1], {1, 1}, "SAME", {}, {}, {"NHWC", "HWIO", "NHWC"});
        return std::vector<Array>{relu((y - in[2]) * rsqrt(in[3] * in[3] + 0.5) * in[4] + in[5])};
      },
      {f32({2, 7, 7, 3}), f32({3, 3, 3, 8}), kB, kB, kB, kB});
  Planned p = plan(g);
  TSR_COMPARE(convGroup(g, p.plan).postOps.size(), size_t{5});  // sub, mul, mul, add, relu
  // Two kernels: rsqrt(s * s + 0.5) over the 8 channels, then the convolution with its chain.
  TSR_COMPARE(p.plan.numKernels(), 2);
  int fused = 0;
  TSR_COMPARE(matchesReference(g, p.plan,
                               [&](const auto& in) {
                                 Nchw y = naiveConv(nhwcInput(in[0]), hwioFilter(in[1]), 1, 1);  // [2, 8, 7, 7]
                                 std::vector<double> out(y.v.size());
                                 for (int64_t n = 0; n < 2; ++n)
                                   for (int64_t o = 0; o < 8; ++o)
                                     for (int64_t i = 0; i < 49; ++i) {
                                       const auto c = static_cast<size_t>(o);
                                       const double v = (y.v[static_cast<size_t>((n * 8 + o) * 49 + i)] - in[2][c]) /
                                                            std::sqrt(in[3][c] * in[3][c] + 0.5) * in[4][c] + in[5][c];
                                       out[static_cast<size_t>((n * 49 + i) * 8 + o)] = std::max(0.0, v);
                                     }
                                 return out;
                               },
                               &fused),
              std::string());
  TSR_COMPARE(fused, 1);
}
