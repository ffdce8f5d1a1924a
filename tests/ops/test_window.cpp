// The window ops beyond the conformance suite (values, gradients and vmap run there over every case): their
// errors name the op and the shapes and never abort, the Array API resolves SAME/VALID padding and pools as
// flax.linen does (avg_pool's count with and without padding), and the shard rule splits batch-like dims only.
#include "tests/check.h"
#include "tests/ops/raised.h"

#include <cmath>

#include "engine/ops/registry.h"
#include "engine/transform/api.h"

using namespace tsr;
using tsr::test::raised;

namespace {

Aval f32(std::initializer_list<int64_t> d) { return Aval{Shape(d), DType::F32}; }

ir::WindowAttrs pool2x2() {
  return ir::WindowAttrs{{1, 1, 2, 2}, {1, 1, 2, 2}, {0, 0, 0, 0}, {0, 0, 0, 0}, {1, 1, 1, 1}};
}

std::string inferError(ir::OpCode op, std::vector<Aval> in, const ir::WindowAttrs& at) {
  auto r = ir::inferSafely(ops::registry().get(op), in, at);
  return r.ok() ? "" : r.error().message;
}

void requireMentions(const std::string& msg, std::initializer_list<const char*> words) {
  REQUIRE_MESSAGE(!msg.empty(), "expected an error");
  for (const char* w : words) REQUIRE_MESSAGE(msg.find(w) != std::string::npos, "'" << w << "' missing from: " << msg);
}

Array arange2d(int64_t h, int64_t w) { return reshape(astype(arange(h * w), DType::F32), {1, h, w, 1}); }  // NHWC

}  // namespace

TEST_CASE("inferNamesTheOpAndShapes") {
  using ir::OpCode;
  const Aval x = f32({2, 3, 6, 6});
  ir::WindowAttrs rank3 = pool2x2();
  rank3.windowDimensions = {1, 2, 2};
  requireMentions(inferError(OpCode::ReduceWindowMax, {x}, rank3),
                  {"reduce_window_max", "f32[2,3,6,6]", "window_dimensions [1,2,2]", "one entry per operand dim (4)"});
  ir::WindowAttrs stride0 = pool2x2();
  stride0.windowStrides = {1, 1, 0, 2};
  requireMentions(inferError(OpCode::ReduceWindowSum, {x}, stride0),
                  {"reduce_window_sum", "window_strides", "at least 1"});
  ir::WindowAttrs negative = pool2x2();
  negative.windowStrides = {1, 1, -2, 2};
  requireMentions(inferError(OpCode::ReduceWindowMin, {x}, negative),
                  {"reduce_window_min", "window_strides [1,1,-2,2]"});
  ir::WindowAttrs wide = pool2x2();
  wide.windowDimensions = {1, 1, 4, 8};
  wide.paddingHi = {0, 0, 0, 1};
  requireMentions(inferError(OpCode::ReduceWindowMax, {x}, wide),
                  {"reduce_window_max", "f32[2,3,6,6]", "dim 3",
                   "larger than the padded operand (6 + padding 0 + 1 = 7)"});
  ir::WindowAttrs cropping = pool2x2();
  cropping.paddingLo = {0, 0, -1, 0};
  requireMentions(inferError(OpCode::ReduceWindowMax, {x}, cropping), {"padding_lo", "at least 0"});
  requireMentions(inferError(OpCode::ReduceWindowMax, {Aval{Shape({2, 3, 6, 6}), DType::Bool}}, pool2x2()),
                  {"reduce_window_max", "bool", "not supported"});
  requireMentions(inferError(OpCode::SelectAndScatterAdd, {f32({2, 3, 2, 3}), x}, pool2x2()),
                  {"select_and_scatter_add", "f32[2,3,2,3]", "f32[2,3,6,6]", "one element per window", "[2,3,3,3]"});
  requireMentions(inferError(OpCode::SelectAndScatterAdd, {Aval{Shape({2, 3, 3, 3}), DType::F64}, x}, pool2x2()),
                  {"select_and_scatter_add", "equal dtypes"});
}

TEST_CASE("apiResolvesSameValidAndPools") {
  Array x = Array::zeros(Shape({2, 7, 6, 3}), DType::F32);  // NHWC
  TSR_COMPARE(reduceWindow(x, WindowReduction::Max, {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME").shape(), Shape({2, 4, 3, 3}));
  TSR_COMPARE(reduceWindow(x, WindowReduction::Sum, {1, 3, 3, 1}, {}, "VALID").shape(), Shape({2, 5, 4, 3}));
  // SAME with dilation: the window's extent (5) decides the padding.
  TSR_COMPARE(reduceWindow(x, WindowReduction::Min, {1, 3, 3, 1}, {}, "SAME", {1, 2, 2, 1}).shape(),
              Shape({2, 7, 6, 3}));
  TSR_COMPARE(maxPool(x, {2, 2}, {2, 2}).shape(), Shape({2, 3, 3, 3}));
  TSR_COMPARE(avgPool(x, {3, 3}, {1, 1}, "SAME").shape(), Shape({2, 7, 6, 3}));
  TSR_COMPARE(maxPool(Array::zeros(Shape({9, 4}), DType::F32), {3}, {2}).shape(), Shape({4, 4}));  // no batch dim
}

// x = [[0 1 2] [3 4 5] [6 7 8]], 2x2 windows, stride 1, padded (0, 1) on both spatial dims: the last row and
// column of windows reach into the padding.
TEST_CASE("poolsCountPaddingAsFlaxDoes") {
  Array x = arange2d(3, 3);
  ConvPadding pad(std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 1}});
  std::vector<double> maxes = maxPool(x, {2, 2}, {1, 1}, pad).toDoubles();
  TSR_COMPARE(maxes, (std::vector<double>{4, 5, 5, 7, 8, 8, 7, 8, 8}));
  std::vector<double> withPad = avgPool(x, {2, 2}, {1, 1}, pad).toDoubles();
  TSR_COMPARE(withPad, (std::vector<double>{2, 3, 7.0 / 4, 5, 6, 13.0 / 4, 13.0 / 4, 15.0 / 4, 2}));
  std::vector<double> withoutPad = avgPool(x, {2, 2}, {1, 1}, pad, false).toDoubles();
  TSR_COMPARE(withoutPad, (std::vector<double>{2, 3, 3.5, 5, 6, 6.5, 6.5, 7.5, 8}));
}

TEST_CASE("apiErrorsAreExceptionsNamingTheOp") {
  Array x = Array::zeros(Shape({1, 5, 5, 2}), DType::F32);
  requireMentions(raised([&] { reduceWindow(x, WindowReduction::Max, {1, 2, 2, 1}, {}, "FULL"); }),
                  {"reduce_window_max", "FULL", "f32[1,5,5,2]"});
  requireMentions(raised([&] { reduceWindow(x, WindowReduction::Sum, {2, 2}, {}, "VALID"); }),
                  {"reduce_window_sum", "window_dimensions [2,2]", "f32[1,5,5,2]"});
  requireMentions(raised([&] { reduceWindow(x, WindowReduction::Min, {1, 6, 1, 1}, {}, "VALID"); }),
                  {"reduce_window_min", "f32[1,5,5,2]", "larger than the padded operand"});
  requireMentions(raised([&] { maxPool(x, {2, 2}, {1, 0}); }), {"reduce_window_max", "window_strides"});
  requireMentions(raised([&] { maxPool(x, {2, 2, 2, 2}); }), {"max_pool", "f32[1,5,5,2]", "features dim"});
  requireMentions(raised([&] { avgPool(x, {2, 2}, {}, std::vector<std::pair<int64_t, int64_t>>{{1, 1}}); }),
                  {"avg_pool", "2 (low, high) pairs"});
  const Array source = Array::zeros(Shape({1, 2, 2, 2}), DType::F32);
  requireMentions(raised([&] { selectAndScatterAdd(source, x, {1, 2, 2, 1}, {1, 1, 1, 1}, "VALID"); }),
                  {"select_and_scatter_add", "f32[1,2,2,2]", "f32[1,5,5,2]"});
}

TEST_CASE("shardRuleSplitsBatchLikeDimsOnly") {
  // NHWC with a 3x3 window over H and W: N and C pass through, H and W stay whole.
  const ir::WindowAttrs at{{1, 3, 3, 1}, {1, 2, 2, 1}, {0, 1, 1, 0}, {0, 1, 1, 0}, {1, 1, 1, 1}};
  std::vector<Aval> in{f32({4, 8, 8, 16})}, out{f32({4, 4, 4, 16})};
  auto r = ops::registry().get(ir::OpCode::ReduceWindowMax).shard(in, out, at);
  REQUIRE(r.ok());
  TSR_COMPARE(r->operandDims[0], (std::vector<int>{0, -1, -1, 1}));
  TSR_COMPARE(r->resultDims[0], (std::vector<int>{0, -1, -1, 1}));
  // A dim with a one-element window that is padded or strided is windowed too.
  ir::WindowAttrs strided = at;
  strided.windowStrides[3] = 2;
  std::vector<Aval> out2{f32({4, 4, 4, 8})};
  auto s = ops::registry().get(ir::OpCode::ReduceWindowSum).shard(in, out2, strided);
  REQUIRE(s.ok());
  TSR_COMPARE(s->resultDims[0], (std::vector<int>{0, -1, -1, -1}));
  std::vector<Aval> sel{f32({4, 4, 4, 16}), f32({4, 8, 8, 16})};
  auto t = ops::registry().get(ir::OpCode::SelectAndScatterAdd).shard(sel, in, at);
  REQUIRE(t.ok());
  TSR_COMPARE(t->operandDims[0], (std::vector<int>{0, -1, -1, 1}));
  TSR_COMPARE(t->operandDims[1], (std::vector<int>{0, -1, -1, 1}));
  TSR_COMPARE(t->resultDims[0], (std::vector<int>{0, -1, -1, 1}));
}

// select_and_scatter_add picks, per window and per channel, the first maximum in row-major window order, a NaN
// above any number: NHWC [1, 2, 2, 2] with one 2x2 window, channel 0 holding 1, NaN, 3, NaN (the first NaN,
// position 1, takes the source) and channel 1 holding 5, 5, 2, 5 (a tie: position 0 takes it). The channels are
// compared side by side by the kernel, so each must keep its own choice.
TEST_CASE("selectAndScatterAddPicksTheFirstMaximumPerChannel") {
  const float nan = std::nanf("");
  Array x = Array::fromVector(std::vector<float>{1, 5, nan, 5, 3, 2, nan, 5}, Shape{1, 2, 2, 2});
  Array source = Array::fromVector(std::vector<float>{10, 20}, Shape{1, 1, 1, 2});
  std::vector<double> got = selectAndScatterAdd(source, x, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID")
                                .toDoubles();
  const std::vector<double> want = {0, 20, 10, 0, 0, 0, 0, 0};
  REQUIRE(got == want);
}

// Max pooling over channels last compares rows of channels side by side: a NaN in a window gives NaN in its
// channel only, and the others keep their maxima (NHWC [1, 2, 2, 8], one 2x2 window; even channels hold a NaN at
// position c / 2 % 4, odd ones the values c, 2c, -c, c + 1).
TEST_CASE("maxPoolPropagatesNaNPerChannel") {
  const float nan = std::nanf("");
  std::vector<float> v(32);
  for (int p = 0; p < 4; ++p)
    for (int c = 0; c < 8; ++c) {
      const float values[] = {float(c), float(2 * c), float(-c), float(c + 1)};
      v[static_cast<size_t>(p * 8 + c)] = c % 2 == 0 && p == c / 2 % 4 ? nan : values[p];
    }
  std::vector<double> got = maxPool(Array::fromVector(v, Shape{1, 2, 2, 8}), {2, 2}).toDoubles();
  REQUIRE(got.size() == 8);
  for (int c = 0; c < 8; ++c) {
    if (c % 2 == 0) CHECK_MESSAGE(std::isnan(got[static_cast<size_t>(c)]), "channel " << c);
    else CHECK_MESSAGE(got[static_cast<size_t>(c)] == double(std::max(2 * c, c + 1)), "channel " << c);
  }
}
