// The eager Array API against values computed by hand or by naive loops written here.
#include "tests/check.h"

#include <cmath>
#include <random>

#include "engine/transform/api.h"
#include "engine/transform/autocast.h"
#include "engine/transform/autodiff.h"
#include "engine/transform/trace.h"

using namespace tsr;

namespace {

Array randomArray(Shape s, std::mt19937& rng, DType t = DType::F32) {
  std::uniform_real_distribution<double> d(-1, 1);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = d(rng);
  return Array::fromVector(v, std::move(s), t);
}

void expectNear(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (size_t i = 0; i < got.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << ": element " << i << ": " << got[i] << " vs " << want[i]);
}

}  // namespace

TEST_CASE("broadcastingFollowsNumpy") {
  Array a = Array::fromVector({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
  Array col = Array::fromVector({10, 20}, Shape{2, 1}, DType::F32);
  Array row = Array::fromVector({100, 200, 300}, Shape{3}, DType::F32);
  Array r = a + col + row;
  TSR_COMPARE(r.shape(), (Shape{2, 3}));
  TSR_COMPARE(r.toDoubles(), (std::vector<double>{111, 212, 313, 124, 225, 326}));
  // [3,1] + [1,4] -> [3,4]
  Array x = Array::fromVector({1, 2, 3}, Shape{3, 1}, DType::F32);
  Array y = Array::fromVector({10, 20, 30, 40}, Shape{1, 4}, DType::F32);
  Array z = x * y;
  TSR_COMPARE(z.shape(), (Shape{3, 4}));
  TSR_COMPARE(z.toDoubles()[7], 80.0);  // row 1, col 3: 2*40
  TSR_COMPARE(z.toDoubles()[11], 120.0);
  // A scalar broadcasts to anything.
  Array s = Array::scalar(2.0);
  TSR_COMPARE((a * s).toDoubles()[5], 12.0);
}

TEST_CASE("promotionAndWeakScalars") {
  Array i = Array::fromVector({1, 2}, Shape{2}, DType::I32);
  Array f = Array::fromVector({0.5, 0.25}, Shape{2}, DType::F32);
  Array r = i + f;
  TSR_COMPARE(r.dtype(), DType::F32);
  TSR_COMPARE(r.toDoubles(), (std::vector<double>{1.5, 2.25}));
  Array h = Array::fromVector({1.0, 3.0}, Shape{2}, DType::BF16);
  TSR_COMPARE((h * 2.0).dtype(), DType::BF16);  // weakly typed scalar keeps bf16
  TSR_COMPARE((h * 2.0).toDoubles(), (std::vector<double>{2, 6}));
  TSR_COMPARE(promoteTypes(DType::BF16, DType::F16), DType::F32);
  TSR_COMPARE(promoteTypes(DType::U32, DType::I32), DType::I32);  // jnp.promote_types with x64 off
  TSR_COMPARE(promoteTypes(DType::I32, DType::U32), DType::I32);
  TSR_COMPARE(promoteTypes(DType::U32, DType::I64), DType::I64);
  TSR_COMPARE(promoteTypes(DType::Bool, DType::U8), DType::U8);
}

TEST_CASE("comparisonsAndWhere") {
  Array a = Array::fromVector({1, 5, 3}, Shape{3}, DType::F32);
  Array b = Array::fromVector({2, 2, 3}, Shape{3}, DType::F32);
  Array lt = a < b;
  TSR_COMPARE(lt.dtype(), DType::Bool);
  TSR_COMPARE(lt.toDoubles(), (std::vector<double>{1, 0, 0}));
  TSR_COMPARE((a == b).toDoubles(), (std::vector<double>{0, 0, 1}));
  TSR_COMPARE(where(a > b, a, b).toDoubles(), (std::vector<double>{2, 5, 3}));
  TSR_COMPARE(clamp(a, Array::scalar(2), Array::scalar(4)).toDoubles(), (std::vector<double>{2, 4, 3}));
}

// A large eager op is split over the CPU backend's pool (registered by the tests' main), whose workers flush
// subnormals for jitted code: every chunk keeps them as the calling thread does, and every element is computed.
TEST_CASE("eagerOpsOverThePoolKeepSubnormalsInEveryChunk") {
  const int64_t n = int64_t{1} << 20;
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = i % 2 ? 1e-40f : static_cast<float>(i);
  const std::vector<float> y = mul(Array::fromVector(x, Shape{n}), Array::scalar(2.0)).toFloats();
  for (int64_t i = 0; i < n; ++i)
    REQUIRE_MESSAGE(y[static_cast<size_t>(i)] == 2.0f * x[static_cast<size_t>(i)], "element ", i, ": ",
                    y[static_cast<size_t>(i)]);
}

TEST_CASE("matmulAgainstNaiveLoops") {
  std::mt19937 rng(3);
  struct Case { Shape a, b; };
  for (const auto& c : {Case{{5, 7}, {7, 3}}, Case{{2, 5, 7}, {7, 3}}, Case{{4, 5, 7}, {4, 7, 3}},
                        Case{{1, 5, 7}, {4, 7, 3}}, Case{{7}, {7, 3}}, Case{{5, 7}, {7}}, Case{{7}, {7}}}) {
    Array a = randomArray(c.a, rng), b = randomArray(c.b, rng);
    Array r = matmul(a, b);
    // Naive reference with numpy's rules written out.
    auto av = a.toDoubles(), bv = b.toDoubles();
    int64_t K = c.a[c.a.rank() - 1];
    int64_t M = c.a.rank() >= 2 ? c.a[c.a.rank() - 2] : 1;
    int64_t N = c.b.rank() >= 2 ? c.b[c.b.rank() - 1] : 1;
    int64_t batchA = c.a.rank() == 3 ? c.a[0] : 1, batchB = c.b.rank() == 3 ? c.b[0] : 1;
    int64_t batch = std::max(batchA, batchB);
    std::vector<double> want;
    for (int64_t p = 0; p < batch; ++p)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += av[static_cast<size_t>((batchA > 1 ? p : 0) * M * K + i * K + k)] *
                 bv[static_cast<size_t>((batchB > 1 ? p : 0) * K * N + k * N + j)];
          want.push_back(s);
        }
    expectNear(r.toDoubles(), want, 1e-5, "matmul");
  }
  REQUIRE(!capture([&] { return matmul(Array::zeros({2, 3}), Array::zeros({4, 5})); }).ok());
}

TEST_CASE("einsumAgainstNaiveLoops") {
  std::mt19937 rng(5);
  // Attention scores: bhtd,bhsd->bhts
  Array q = randomArray({2, 3, 4, 5}, rng), k = randomArray({2, 3, 6, 5}, rng);
  Array s = einsum("bhtd,bhsd->bhts", q, k);
  TSR_COMPARE(s.shape(), (Shape{2, 3, 4, 6}));
  auto qv = q.toDoubles(), kv = k.toDoubles(), sv = s.toDoubles();
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int t = 0; t < 4; ++t)
        for (int u = 0; u < 6; ++u) {
          double acc = 0;
          for (int d = 0; d < 5; ++d) acc += qv[((b * 3 + h) * 4 + t) * 5 + d] * kv[((b * 3 + h) * 6 + u) * 5 + d];
          REQUIRE(std::fabs(sv[((b * 3 + h) * 4 + t) * 6 + u] - acc) < 1e-5);
        }
  // Output in an order other than dot_general's: ij,jk->ki
  Array a = randomArray({3, 4}, rng), b = randomArray({4, 2}, rng);
  Array r = einsum("ij,jk->ki", a, b);
  Array want = transpose(matmul(a, b));
  expectNear(r.toDoubles(), want.toDoubles(), 1e-6, "einsum ki");
}

TEST_CASE("reductionsAndCompositions") {
  Array x = Array::fromVector({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
  TSR_COMPARE(sum(x).toDoubles(), (std::vector<double>{21}));
  TSR_COMPARE(sum(x, {0}).toDoubles(), (std::vector<double>{5, 7, 9}));
  TSR_COMPARE(sum(x, {-1}, true).shape(), (Shape{2, 1}));
  TSR_COMPARE(mean(x, {1}).toDoubles(), (std::vector<double>{2, 5}));
  TSR_COMPARE(max(x, {1}).toDoubles(), (std::vector<double>{3, 6}));
  TSR_COMPARE(argmax(x, 1).toDoubles(), (std::vector<double>{2, 2}));
  // softmax of [1,2,3] by hand: e^k / (e + e^2 + e^3)
  double z = std::exp(1) + std::exp(2) + std::exp(3);
  expectNear(softmax(x).toDoubles(),
             {std::exp(1) / z, std::exp(2) / z, std::exp(3) / z, std::exp(1) / z, std::exp(2) / z, std::exp(3) / z},
             1e-6, "softmax");
  expectNear(logsumexp(x).toDoubles(), {std::log(z), std::log(z) + 3}, 1e-6, "logsumexp");
  expectNear(logSoftmax(x).toDoubles(),
             {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), 1 - std::log(z), 2 - std::log(z), 3 - std::log(z)},
             1e-6, "logSoftmax");
}

TEST_CASE("indexing") {
  Array table = Array::fromVector({0, 1, 10, 11, 20, 21}, Shape{3, 2}, DType::F32);
  Array ids = Array::fromVector(std::vector<int32_t>{2, 0, 2}, Shape{3});
  TSR_COMPARE(take(table, ids).toDoubles(), (std::vector<double>{20, 21, 0, 1, 20, 21}));
  Array logits = Array::fromVector({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
  Array labels = Array::fromVector(std::vector<int32_t>{2, 0}, Shape{2});
  TSR_COMPARE(takeAlongAxis(logits, labels, -1).toDoubles(), (std::vector<double>{3, 4}));
  TSR_COMPARE(oneHot(labels, 3).toDoubles(), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  Array acc = scatterAdd(Array::zeros({3, 2}), ids, Array::ones({3, 2}), 0);
  TSR_COMPARE(acc.toDoubles(), (std::vector<double>{1, 1, 0, 0, 2, 2}));
}

TEST_CASE("layout") {
  Array x = Array::fromVector({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::F32);
  TSR_COMPARE(reshape(x, {3, -1}).shape(), (Shape{3, 2}));
  TSR_COMPARE(transpose(x).toDoubles(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  TSR_COMPARE(sliceAxis(x, 1, 1, 3).toDoubles(), (std::vector<double>{2, 3, 5, 6}));
  TSR_COMPARE(concatenate({x, x}, 0).shape(), (Shape{4, 3}));
  TSR_COMPARE(stack({x, x}, 1).shape(), (Shape{2, 2, 3}));
  TSR_COMPARE(pad(x, {0, 1}, {0, 0}).toDoubles(), (std::vector<double>{0, 1, 2, 3, 0, 4, 5, 6}));
  TSR_COMPARE(flip(x, {1}).toDoubles(), (std::vector<double>{3, 2, 1, 6, 5, 4}));
  TSR_COMPARE(expandDims(x, 0).shape(), (Shape{1, 2, 3}));
  TSR_COMPARE(squeeze(expandDims(x, 2)).shape(), (Shape{2, 3}));
  TSR_COMPARE(arange(4).toDoubles(), (std::vector<double>{0, 1, 2, 3}));
}

TEST_CASE("shapeErrorNamesOpShapesAndCallSite") {
  Array a = Array::zeros({2, 3});
  Array b = Array::zeros({4});
  int line = __LINE__ + 1;
  auto r = capture([&] { return a + b; });
  REQUIRE(!r.ok());
  const std::string& m = r.error().message;
  REQUIRE_MESSAGE(m.find("add") != std::string::npos, m.c_str());
  REQUIRE_MESSAGE((m.find("[2,3]") != std::string::npos && m.find("[4]") != std::string::npos), m.c_str());
  REQUIRE_MESSAGE(m.find("test_array_api.cpp:" + std::to_string(line)) != std::string::npos, m.c_str());

  // An op-level error (matmul inner dims) also names both shapes and the call site.
  line = __LINE__ + 1;
  auto r2 = capture([&] { return matmul(Array::zeros({8, 784}), Array::zeros({1024, 10})); });
  REQUIRE(!r2.ok());
  REQUIRE_MESSAGE(r2.error().message.find("f32[8,784]") != std::string::npos, r2.error().message.c_str());
  REQUIRE_MESSAGE(r2.error().message.find("f32[1024,10]") != std::string::npos, r2.error().message.c_str());
  REQUIRE_MESSAGE(r2.error().message.find(":" + std::to_string(line)) != std::string::npos, r2.error().message.c_str());

  // Bad input never crashes: empty arrays, bad axes, bad reshapes.
  REQUIRE(!capture([&] { return sum(a, {5}); }).ok());
  REQUIRE(!capture([&] { return reshape(a, {4, -1}); }).ok());
  REQUIRE(!capture([&] { return Array() + a; }).ok());
  REQUIRE(!capture([&] { return transpose(a, {0, 0}); }).ok());
  REQUIRE(!capture([&] { return Array::scalar(1.0).item() + a.item(); }).ok());
}

namespace {

// x rounded to bf16 (round to nearest even), as a double.
double toBf16(double x) { return static_cast<double>(static_cast<float>(bf16(static_cast<float>(x)))); }

// [M, K] . [K, N] in double over the operands rounded to bf16.
std::vector<double> bf16Product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                int64_t n) {
  std::vector<double> out;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += toBf16(a[static_cast<size_t>(i * k + p)]) * toBf16(b[static_cast<size_t>(p * n + j)]);
      out.push_back(s);
    }
  return out;
}

}  // namespace

TEST_CASE("autocastRunsProductsInBf16AndSoftmaxInF32") {
  std::mt19937 rng(11);
  Array a = randomArray({5, 9}, rng), b = randomArray({9, 4}, rng);
  const std::vector<double> want = bf16Product(a.toDoubles(), b.toDoubles(), 5, 9, 4);
  {
    AutocastScope autocast(DType::BF16);
    REQUIRE(autocastDType() == DType::BF16);
    Array r = matmul(a, b);
    TSR_COMPARE(r.dtype(), DType::BF16);
    // The product of the rounded operands (accumulated in f32), rounded once: within bf16's half ulp, 2^-9.
    expectNear(r.toDoubles(), want, 1.0 / 256, "autocast matmul");
    // Integers stay exact, f64 stays f64.
    Array i = Array::fromVector({1, 2, 3, 4}, Shape{2, 2}, DType::I32);
    TSR_COMPARE(matmul(i, i).dtype(), DType::I32);
    TSR_COMPARE(matmul(astype(a, DType::F64), astype(b, DType::F64)).dtype(), DType::F64);
    // softmax reads the bf16 product widened and gives f32, matching a double softmax of the same values.
    Array s = softmax(r, -1);
    TSR_COMPARE(s.dtype(), DType::F32);
    const std::vector<double> rv = r.toDoubles();
    std::vector<double> ref;
    for (int64_t row = 0; row < 5; ++row) {
      double m = -1e300, z = 0;
      for (int64_t j = 0; j < 4; ++j) m = std::max(m, rv[static_cast<size_t>(row * 4 + j)]);
      for (int64_t j = 0; j < 4; ++j) z += std::exp(rv[static_cast<size_t>(row * 4 + j)] - m);
      for (int64_t j = 0; j < 4; ++j) ref.push_back(std::exp(rv[static_cast<size_t>(row * 4 + j)] - m) / z);
    }
    expectNear(s.toDoubles(), ref, 1e-6, "autocast softmax");
    {
      AutocastScope off(std::nullopt);  // switched off inside
      TSR_COMPARE(matmul(a, b).dtype(), DType::F32);
    }
    TSR_COMPARE(matmul(a, b).dtype(), DType::BF16);
  }
  REQUIRE(!autocastDType().has_value());
  TSR_COMPARE(matmul(a, b).dtype(), DType::F32);
}

// The gradient of an f32 weight through a bf16 product is f32 (the convert's vjp), and near the f32 gradient
// worked out by hand: d/dw sum((x w)^2) = 2 x^T (x w).
TEST_CASE("autocastGradientsOfF32WeightsAreF32") {
  std::mt19937 rng(12);
  const int64_t m = 6, k = 8, n = 3;
  Array x = randomArray({m, k}, rng), w = randomArray({k, n}, rng);
  auto loss = [&](const Tree& p) {
    AutocastScope autocast(DType::BF16);
    return sum(square(matmul(x, p.leaf())));
  };
  Tree g = grad(loss)(Tree(w));
  TSR_COMPARE(g.leaf().dtype(), DType::F32);
  const std::vector<double> xv = x.toDoubles(), wv = w.toDoubles();
  std::vector<double> want(static_cast<size_t>(k * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double y = 0;
      for (int64_t p = 0; p < k; ++p) y += xv[static_cast<size_t>(i * k + p)] * wv[static_cast<size_t>(p * n + j)];
      for (int64_t p = 0; p < k; ++p) want[static_cast<size_t>(p * n + j)] += 2 * xv[static_cast<size_t>(i * k + p)] * y;
    }
  // bf16 operands, product and cotangents: a few bf16 ulps of the gradient's scale.
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  const std::vector<double> got = g.leaf().toDoubles();
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= 0.03 * scale, "element " << i << ": " << got[i] << " vs " << want[i]);
}

// dot_product_attention reads bf16 q, k and v as they are (autocast's activations): one op, no converts around it,
// bf16 out within one bf16 rounding of the attention of the same bf16 values worked in double here; its gradient
// through an f32 q (converted for the op) is f32 and near the gradient of the unfused f64 formula.
TEST_CASE("attentionTakesBf16AsItIs") {
  std::mt19937 rng(13);
  const int64_t b = 2, t = 5, h = 2, d = 4;
  Array q = randomArray({b, t, h, d}, rng), k = randomArray({b, t, h, d}, rng), v = randomArray({b, t, h, d}, rng);
  const Array qb = astype(q, DType::BF16), kb = astype(k, DType::BF16), vb = astype(v, DType::BF16);
  // The reference: causal softmax(q k^T / sqrt(d)) v per batch and head, in double over the bf16 values.
  const std::vector<double> qv = qb.toDoubles(), kv = kb.toDoubles(), vv = vb.toDoubles();
  auto at = [&](int64_t bi, int64_t ti, int64_t hi, int64_t di) {
    return static_cast<size_t>(((bi * t + ti) * h + hi) * d + di);
  };
  std::vector<double> want(qv.size(), 0.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double mx = -1e300, z = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t e = 0; e < d; ++e) s[static_cast<size_t>(j)] += qv[at(bi, i, hi, e)] * kv[at(bi, j, hi, e)];
          s[static_cast<size_t>(j)] /= std::sqrt(static_cast<double>(d));
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        for (double& x : s) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e) want[at(bi, i, hi, e)] += s[static_cast<size_t>(j)] / z * vv[at(bi, j, hi, e)];
      }
  Array out = dotProductAttention(qb, kb, vb, true);
  TSR_COMPARE(out.dtype(), DType::BF16);
  expectNear(out.toDoubles(), want, 1.0 / 256, "bf16 attention");

  auto traced = makeGraph(
      [](const std::vector<Array>& xs) { return std::vector<Array>{dotProductAttention(xs[0], xs[1], xs[2], true)}; },
      {qb.aval(), kb.aval(), vb.aval()});
  REQUIRE_MESSAGE(traced.ok(), traced.error().message);
  int converts = 0, attentions = 0;
  for (const ir::Node& n : traced->graph.nodes()) {
    converts += n.op == ir::OpCode::Convert;
    if (n.op == ir::OpCode::DotProductAttention) {
      ++attentions;
      TSR_COMPARE(traced->graph.aval(n.operands[0]).dtype, DType::BF16);
      TSR_COMPARE(traced->graph.aval(n.results[1]).dtype, DType::F32);  // lse
    }
  }
  TSR_COMPARE(attentions, 1);
  TSR_COMPARE(converts, 0);

  // d/dq sum(attention(q, k, v) * w) with q converted to bf16 for the op, against the unfused f64 formula's.
  Array w = randomArray({b, t, h, d}, rng);
  auto fused = [&](const Tree& p) {
    return sum(astype(dotProductAttention(astype(p.leaf(), DType::BF16), kb, vb, true), DType::F32) * w);
  };
  auto unfused = [&](const Tree& p) {
    const Array q64 = transpose(p.leaf(), {0, 2, 1, 3}), k64 = transpose(astype(kb, DType::F64), {0, 2, 1, 3}),
                v64 = transpose(astype(vb, DType::F64), {0, 2, 1, 3});
    Array s = dotGeneral(q64, k64, {{3}, {3}, {0, 1}, {0, 1}}) * (1.0 / std::sqrt(static_cast<double>(d)));
    std::vector<double> maskv;
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < t; ++j) maskv.push_back(j <= i ? 0.0 : -1e30);
    s = s + Array::fromVector(maskv, Shape{t, t}, DType::F64);
    Array y = dotGeneral(softmax(s, -1), v64, {{3}, {2}, {0, 1}, {0, 1}});
    return sum(transpose(y, {0, 2, 1, 3}) * astype(w, DType::F64));
  };
  const Array g = grad(fused)(Tree(q)).leaf();
  TSR_COMPARE(g.dtype(), DType::F32);
  const std::vector<double> ref = grad(unfused)(Tree(astype(qb, DType::F64))).leaf().toDoubles(), got = g.toDoubles();
  double scale = 0;
  for (double x : ref) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < ref.size(); ++i)  // bf16 cotangents and dq: a few bf16 ulps of the gradient's scale
    REQUIRE_MESSAGE(std::fabs(got[i] - ref[i]) <= 0.02 * scale, "dq element " << i << ": " << got[i] << " vs " << ref[i]);
}
