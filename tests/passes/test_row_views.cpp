// Row views in the CPU executable (engine/backends/cpu/row_views.h): GPT-2's attention block as the traced step
// has it (either qkv layout), q, k and v sliced from one projection and their gradients concatenated back,
// compiles to no slice and no concatenate kernel; attention reads and writes the projection's columns in place.
// Checked against attention computed in double from the projection by hand (forward and gradient), against the
// reference interpreter (which copies every slice), with the memory planner's freed bytes poisoned; and the cases
// where a view must not be planned (another reader, a graph output, a slice across rows) keep their copies.
#include "tests/check.h"

#include <cmath>
#include <limits>

#include "engine/backends/cpu/executable.h"
#include "engine/passes/fusion.h"
#include "engine/runtime/interpreter.h"
#include "tests/passes/pass_test_util.h"

using namespace tsr;
using namespace tsr::test;
using ir::OpCode;

namespace {

constexpr int64_t kB = 2, kT = 40, kH = 3, kD = 16, kC = kH * kD;

struct Block {
  ir::Graph g;
  ir::ValueId x, dout, dlse;  // inputs: the qkv projection [B, T, 3C], out's cotangent, lse's
};

ir::SliceAttrs columns(int64_t first, int64_t last) {
  return ir::SliceAttrs{{0, 0, first}, {kB, kT, last}, {1, 1, 1}};
}

// out = attention(q, k, v) with q, k, v the column blocks of x, and dx = concatenate(dq, dk, dv): outputs out
// and dx (the gradient of <out, dout> + <lse, dlse> with respect to x). x is [B, T, 3C] cut along its last dim,
// or, in the heads layout (GPT-2's qkv_layout = "heads"), [B, T, 3, H, D] cut along dim 2: the same bytes.
Block attentionBlock(DType t, bool causal, bool heads = false) {
  Builder b;
  Block r;
  const Shape xs = heads ? Shape{kB, kT, 3, kH, kD} : Shape{kB, kT, 3 * kC};
  r.x = b.input(Aval{xs, t});
  r.dout = b.input(Aval{Shape{kB, kT, kH, kD}, t});
  r.dlse = b.input(Aval{Shape{kB, kH, kT}, t == DType::BF16 ? DType::F32 : t});
  std::vector<ir::ValueId> qkv;
  for (int64_t i = 0; i < 3; ++i) {
    const ir::SliceAttrs part = heads ? ir::SliceAttrs{{0, 0, i, 0, 0}, {kB, kT, i + 1, kH, kD}, {1, 1, 1, 1, 1}}
                                      : columns(i * kC, (i + 1) * kC);
    qkv.push_back(b.add(OpCode::Reshape, {b.add(OpCode::Slice, {r.x}, part)}, ir::ReshapeAttrs{{kB, kT, kH, kD}}));
  }
  const auto fwd = b.addMulti(OpCode::DotProductAttention, qkv, ir::AttentionAttrs{causal});
  const auto grad = b.addMulti(OpCode::DotProductAttentionGrad,
                               {qkv[0], qkv[1], qkv[2], fwd[0], fwd[1], r.dout, r.dlse}, ir::AttentionAttrs{causal});
  std::vector<ir::ValueId> parts;
  const ir::ReshapeAttrs partShape{heads ? ir::Ints{kB, kT, 1, kH, kD} : ir::Ints{kB, kT, kC}};
  for (ir::ValueId d : grad) parts.push_back(b.add(OpCode::Reshape, {d}, partShape));
  const ir::ValueId dx = b.add(OpCode::Concatenate, parts, ir::ConcatenateAttrs{2});
  r.g = b.done({fwd[0], dx});
  return r;
}

std::unique_ptr<cpu::Executable> compile(const ir::Graph& g, bool rowViews) {
  auto plan = passes::planFusion(g, reg());
  if (!plan.ok()) TSR_FATAL("planFusion: " << plan.error().message);
  cpu::CompileOptions o;
  o.poisonFreed = true;
  o.rowViews = rowViews;
  auto exe = cpu::Executable::compile(g, reg(), *plan, o);
  if (!exe.ok()) TSR_FATAL("compile: " << exe.error().message);
  return std::move(*exe);
}

// Kernels whose name starts with the op's.
int kernelsOf(const cpu::Executable& e, const std::string& op) {
  int n = 0;
  for (const auto& k : e.kernels()) n += k.name.rfind(op + " ", 0) == 0;
  return n;
}

// Attention and its gradient in double from the projection x, per batch and head: the whole score matrix, its
// softmax and products of it (nothing shared with the kernels). Returns out [B, T, H, D] and dx [B, T, 3C].
struct Reference {
  std::vector<double> out, dx;
};
Reference reference(const std::vector<double>& x, const std::vector<double>& dout, const std::vector<double>& dlse,
                    bool causal) {
  Reference r{std::vector<double>(static_cast<size_t>(kB * kT * kC)), std::vector<double>(x.size(), 0.0)};
  const double scale = 1.0 / std::sqrt(static_cast<double>(kD));
  auto col = [](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return static_cast<size_t>((b * kT + t) * 3 * kC + part * kC + h * kD + d);
  };
  auto row = [](int64_t b, int64_t t, int64_t h, int64_t d) {
    return static_cast<size_t>(((b * kT + t) * kH + h) * kD + d);
  };
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h) {
      std::vector<std::vector<double>> p(kT, std::vector<double>(kT, 0.0));
      for (int64_t i = 0; i < kT; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < kT; ++j) {
          double s = 0;
          for (int64_t d = 0; d < kD; ++d) s += x[col(b, i, 0, h, d)] * x[col(b, j, 1, h, d)];
          p[i][j] = causal && j > i ? -std::numeric_limits<double>::infinity() : s * scale;
          mx = std::max(mx, p[i][j]);
        }
        double sum = 0;
        for (double s : p[i]) sum += std::exp(s - mx);
        for (double& s : p[i]) s = std::exp(s - mx) / sum;
      }
      for (int64_t i = 0; i < kT; ++i)
        for (int64_t d = 0; d < kD; ++d) {
          double o = 0;
          for (int64_t j = 0; j < kT; ++j) o += p[i][j] * x[col(b, j, 2, h, d)];
          r.out[row(b, i, h, d)] = o;
        }
      // ds = P (dP - delta), delta = rowsum(dout * out) - dlse; dq = ds k, dk = ds^T q (scaled), dv = P^T dout.
      for (int64_t i = 0; i < kT; ++i) {
        double delta = -dlse[static_cast<size_t>((b * kH + h) * kT + i)];
        for (int64_t d = 0; d < kD; ++d) delta += dout[row(b, i, h, d)] * r.out[row(b, i, h, d)];
        for (int64_t j = 0; j < kT; ++j) {
          double dp = 0;
          for (int64_t d = 0; d < kD; ++d) dp += dout[row(b, i, h, d)] * x[col(b, j, 2, h, d)];
          const double ds = p[i][j] * (dp - delta);
          for (int64_t d = 0; d < kD; ++d) {
            r.dx[col(b, i, 0, h, d)] += ds * x[col(b, j, 1, h, d)] * scale;
            r.dx[col(b, j, 1, h, d)] += ds * x[col(b, i, 0, h, d)] * scale;
            r.dx[col(b, j, 2, h, d)] += p[i][j] * dout[row(b, i, h, d)];
          }
        }
      }
    }
  return r;
}

// The largest |got - want| relative to the largest |want|.
double relativeError(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / std::max(scale, 1e-300);
}

}  // namespace

TEST_CASE("attentionReadsAndWritesTheProjectionsColumnsInPlace") {
  for (DType t : {DType::F32, DType::F64, DType::BF16})
    for (int form = 0; form < 3; ++form) {
      const bool causal = form != 1, heads = form == 2;
      CAPTURE(dtypeName(t));
      CAPTURE(causal);
      CAPTURE(heads);
      const Block blk = attentionBlock(t, causal, heads);
      const auto viewed = compile(blk.g, true);
      const auto copied = compile(blk.g, false);
      // The views fired: no slice and no concatenate left, where the copying program has three and one.
      TSR_COMPARE(kernelsOf(*viewed, "slice"), 0);
      TSR_COMPARE(kernelsOf(*viewed, "concatenate"), 0);
      TSR_COMPARE(kernelsOf(*copied, "slice"), 3);
      TSR_COMPARE(kernelsOf(*copied, "concatenate"), 1);
      TSR_COMPARE(viewed->memory().findOverlap(), std::string());
      // Against double from the projection by hand: f32 and f64 within their summation error, bf16 within its
      // rounding of the results (the kernels compute in f32 from the bf16 operands, as the reference reads them).
      const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 2e-5 : 1e-2;
      for (uint32_t seed = 1; seed <= 2; ++seed) {
        const auto inputs = randomInputs(blk.g, seed);
        auto got = viewed->run(inputs);
        REQUIRE_MESSAGE(got.ok(), (got.ok() ? "" : got.error().message));
        const Reference want = reference(toDoubles(inputs[0], blk.g.aval(blk.x)),
                                         toDoubles(inputs[1], blk.g.aval(blk.dout)),
                                         toDoubles(inputs[2], blk.g.aval(blk.dlse)), causal);
        const auto out = toDoubles((*got)[0], blk.g.aval(blk.g.outputs()[0]));
        const auto dx = toDoubles((*got)[1], blk.g.aval(blk.g.outputs()[1]));
        CHECK_MESSAGE(relativeError(out, want.out) <= tol, "out: " << relativeError(out, want.out));
        CHECK_MESSAGE(relativeError(dx, want.dx) <= tol, "dx: " << relativeError(dx, want.dx));
        // And the interpreter, which copies each slice and concatenates: the same kernels on dense operands.
        auto interp = runtime::interpret(blk.g, reg(), inputs);
        REQUIRE_MESSAGE(interp.ok(), (interp.ok() ? "" : interp.error().message));
        for (size_t o = 0; o < 2; ++o) {
          const auto a = toDoubles((*interp)[o], blk.g.aval(blk.g.outputs()[o]));
          const auto b = toDoubles((*got)[o], blk.g.aval(blk.g.outputs()[o]));
          CHECK_MESSAGE(relativeError(b, a) <= (t == DType::F64 ? 1e-14 : 1e-6), "output " << o);
        }
      }
    }
}

// A view is planned only where every reader takes rows in place and nothing escapes: a slice another op reads
// too, a slice that is a graph output, a slice that cuts across rows, and a concatenate one of whose parts is
// read elsewhere all keep their kernels, and the program still gives the interpreter's results.
TEST_CASE("rowViewsOnlyWhereEveryReaderTakesThem") {
  auto check = [](const ir::Graph& g, int slices, int concatenates) {
    const auto exe = compile(g, true);
    CHECK(kernelsOf(*exe, "slice") == slices);
    CHECK(kernelsOf(*exe, "concatenate") == concatenates);
    const auto inputs = randomInputs(g, 7);
    auto got = exe->run(inputs);
    auto want = runtime::interpret(g, reg(), inputs);
    REQUIRE(got.ok());
    REQUIRE(want.ok());
    for (size_t o = 0; o < want->size(); ++o) {
      const Aval& a = g.aval(g.outputs()[o]);
      CHECK_MESSAGE(relativeError(toDoubles((*got)[o], a), toDoubles((*want)[o], a)) <= 1e-6, "output " << o);
    }
  };
  const Aval x = f32({kB, kT, 3 * kC});
  const ir::ReshapeAttrs heads{{kB, kT, kH, kD}};
  // Attention over the three column slices of one input: the slices and the attention's out.
  auto slicedAttention = [&](Builder& b, bool causal) {
    const auto in = b.input(x);
    std::vector<ir::ValueId> s, qkv;
    for (int64_t i = 0; i < 3; ++i) s.push_back(b.add(OpCode::Slice, {in}, columns(i * kC, (i + 1) * kC)));
    for (auto v : s) qkv.push_back(b.add(OpCode::Reshape, {v}, heads));
    return std::pair{s, b.addMulti(OpCode::DotProductAttention, qkv, ir::AttentionAttrs{causal})[0]};
  };
  {  // q's slice is also read by an add: q keeps its copy, k and v are views
    Builder b;
    const auto [s, out] = slicedAttention(b, true);
    check(b.done({out, b.add(OpCode::Add, {s[0], s[0]})}), 1, 0);
  }
  {  // k's slice is a graph output
    Builder b;
    const auto [s, out] = slicedAttention(b, false);
    check(b.done({out, s[1]}), 1, 0);
  }
  {  // slices of rows (the batch dim), not columns: copied
    Builder b;
    const auto in = b.input(f32({2 * kB, kT, kC}));
    std::vector<ir::ValueId> qkv;
    for (int64_t i = 0; i < 3; ++i) {
      const ir::SliceAttrs rows{{i % 2 * kB, 0, 0}, {i % 2 * kB + kB, kT, kC}, {1, 1, 1}};
      const auto s = b.add(OpCode::Slice, {in}, rows);
      qkv.push_back(b.add(OpCode::Reshape, {s}, heads));
    }
    check(b.done({b.addMulti(OpCode::DotProductAttention, qkv, ir::AttentionAttrs{true})[0]}), 3, 0);
  }
  {  // dk is read by a reduction besides the concatenate: the concatenate copies (the slices are still views)
    Block blk = attentionBlock(DType::F32, true);
    Builder b;
    b.g = blk.g;
    const ir::Node& grad = [&]() -> const ir::Node& {
      for (const auto& n : b.g.nodes())
        if (n.op == OpCode::DotProductAttentionGrad) return n;
      TSR_FATAL("no gradient node");
    }();
    const ir::ValueId dk = grad.results[1];
    const ir::ValueId sum = b.add(OpCode::ReduceSum, {dk}, axes({0, 1, 2, 3}));
    check(b.done({b.g.outputs()[0], b.g.outputs()[1], sum}), 0, 1);
  }
}
