// Optimisers, schedules and losses against updates computed by hand here with plain loops in double (Optax's
// formulas), and the same optimisers under jit against eager.
#include "tests/check.h"

#include <cmath>
#include <iomanip>
#include <numbers>

#include "engine/optim/optim.h"
#include "engine/compile/jit.h"

using namespace tsr;
using namespace tsr::optim;

namespace {

using Vec = std::vector<double>;

// params: {w: [2,2], b: [2]} (dict order w, b).
Tree params2(const Vec& w, const Vec& b) {
  return Tree::dict({{"w", Tree(Array::fromVector(w, Shape{2, 2}, DType::F32))},
                     {"b", Tree(Array::fromVector(b, Shape{2}, DType::F32))}});
}

Vec leafOf(const Tree& t, const std::string& path) { return t.findPath(path)->leaf().toDoubles(); }

void expectNear(const Vec& got, const Vec& want, double tol, const char* what) {
  TSR_COMPARE(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    REQUIRE_MESSAGE(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])),
                    what << "[" << i << "]: " << std::setprecision(10) << got[i] << " vs " << want[i]);
}

// Runs `steps` updates eagerly with the given gradient per step; returns the final params.
Tree runEager(const GradientTransformation& opt, Tree params, const std::vector<Tree>& grads) {
  Tree state = opt.init(params);
  for (const Tree& g : grads) {
    auto [u, s] = opt.update(g, state, params);
    params = applyUpdates(params, u);
    state = s;
  }
  return params;
}

const Vec kW = {0.5, -1.0, 2.0, 0.25}, kB = {0.1, -0.2};
const std::vector<Vec> kGw = {{0.3, -0.7, 1.1, 0.05}, {-0.2, 0.4, 0.9, -1.3}};
const std::vector<Vec> kGb = {{0.6, -0.1}, {0.25, 0.8}};

std::vector<Tree> grads2() { return {params2(kGw[0], kGb[0]), params2(kGw[1], kGb[1])}; }

}  // namespace

TEST_CASE("adamwMatchesHandComputedSteps") {
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.05;
  // Decay by path: the matrix "w" decays, the bias does not.
  ParamMask onlyW = [](const std::string& path, const Aval&) { return path == "w"; };
  Tree got = runEager(adamw(constantSchedule(lr), b1, b2, eps, wd, onlyW), params2(kW, kB), grads2());

  auto reference = [&](Vec p, const std::vector<Vec>& gs, bool decay) {
    Vec m(p.size(), 0.0), v(p.size(), 0.0);
    for (size_t t = 1; t <= gs.size(); ++t)
      for (size_t i = 0; i < p.size(); ++i) {
        double g = gs[t - 1][i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double mhat = m[i] / (1 - std::pow(b1, static_cast<double>(t)));
        double vhat = v[i] / (1 - std::pow(b2, static_cast<double>(t)));
        double step = mhat / (std::sqrt(vhat) + eps) + (decay ? wd * p[i] : 0.0);
        p[i] -= lr * step;
      }
    return p;
  };
  expectNear(leafOf(got, "w"), reference(kW, kGw, true), 1e-5, "w");
  expectNear(leafOf(got, "b"), reference(kB, kGb, false), 1e-5, "b");
  // The default mask (matrices only) picks the same leaves here.
  Tree dflt = runEager(adamw(constantSchedule(lr), b1, b2, eps, wd), params2(kW, kB), grads2());
  expectNear(leafOf(dflt, "w"), leafOf(got, "w"), 1e-7, "default mask w");
  expectNear(leafOf(dflt, "b"), leafOf(got, "b"), 1e-7, "default mask b");
  // Weight decay changes w only.
  Tree plain = runEager(adam(constantSchedule(lr), b1, b2, eps), params2(kW, kB), grads2());
  expectNear(leafOf(plain, "w"), reference(kW, kGw, false), 1e-5, "adam w");
  expectNear(leafOf(plain, "b"), leafOf(got, "b"), 1e-7, "adam b");
}

TEST_CASE("sgdMomentumAndNesterovMatchHandComputedSteps") {
  const double lr = 0.1, mom = 0.9;
  for (int mode = 0; mode < 3; ++mode) {  // plain, momentum, nesterov
    double m = mode == 0 ? 0.0 : mom;
    bool nesterov = mode == 2;
    Tree got = runEager(sgd(constantSchedule(lr), m, nesterov), params2(kW, kB), grads2());
    Vec p = kW, trace(4, 0.0);
    for (const Vec& g : kGw)
      for (size_t i = 0; i < 4; ++i) {
        trace[i] = m * trace[i] + g[i];
        double d = mode == 0 ? g[i] : nesterov ? m * trace[i] + g[i] : trace[i];
        p[i] -= lr * d;
      }
    expectNear(leafOf(got, "w"), p, 1e-6, mode == 0 ? "sgd" : nesterov ? "nesterov" : "momentum");
  }
}

TEST_CASE("sgdAndAdamWeightDecayIsL2OnTheMatrices") {
  // PyTorch's SGD(weight_decay=wd, momentum=m): g' = g + wd * p, then momentum; vectors (b) are not decayed.
  const double lr = 0.1, mom = 0.9, wd = 0.05;
  Tree got = runEager(sgd(constantSchedule(lr), mom, false, wd), params2(kW, kB), grads2());
  Vec p = kW, trace(4, 0.0);
  for (const Vec& g : kGw)
    for (size_t i = 0; i < 4; ++i) {
      trace[i] = mom * trace[i] + g[i] + wd * p[i];
      p[i] -= lr * trace[i];
    }
  expectNear(leafOf(got, "w"), p, 1e-6, "sgd with weight decay");
  Tree plain = runEager(sgd(constantSchedule(lr), mom, false), params2(kW, kB), grads2());
  expectNear(leafOf(got, "b"), leafOf(plain, "b"), 1e-7, "sgd leaves vectors undecayed");
  // Adam's L2 goes through the moments: with gradients of zero it still moves the weights (AdamW would too, but
  // by lr * wd * p exactly; Adam's first step is lr * sign(p) whatever wd is).
  Tree adamL2 = runEager(adam(constantSchedule(lr), 0.9, 0.999, 1e-8, wd), params2(kW, kB),
                         {params2(Vec(4, 0.0), Vec(2, 0.0))});
  Vec want = kW;
  for (double& v : want) v -= lr * (v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0);
  expectNear(leafOf(adamL2, "w"), want, 1e-5, "adam L2 first step");
}

TEST_CASE("sgdReadsItsScheduleAtTheStepCount") {
  // lr(0) = 1, lr(1) = 0.5: the first update uses lr(0).
  Tree got = runEager(sgd(linearSchedule(1.0, 0.0, 2)), params2(kW, kB), grads2());
  Vec want = kW;
  for (size_t i = 0; i < 4; ++i) want[i] -= 1.0 * kGw[0][i] + 0.5 * kGw[1][i];
  expectNear(leafOf(got, "w"), want, 1e-6, "scheduled sgd");
}

TEST_CASE("clipByGlobalNormScalesOnlyAboveTheLimit") {
  Tree g = params2(kGw[1], kGb[1]);
  double sq = 0;
  for (double x : kGw[1]) sq += x * x;
  for (double x : kGb[1]) sq += x * x;
  double norm = std::sqrt(sq);
  REQUIRE(std::fabs(globalNorm(g).item() - norm) < 1e-6);
  for (double maxNorm : {0.5, 1.0, 100.0}) {
    auto opt = clipByGlobalNorm(maxNorm);
    auto [u, s] = opt.update(g, opt.init(g), g);
    double scale = norm > maxNorm ? maxNorm / norm : 1.0;
    Vec w = kGw[1], b = kGb[1];
    for (auto& x : w) x *= scale;
    for (auto& x : b) x *= scale;
    expectNear(leafOf(u, "w"), w, 1e-6, "clipped w");
    expectNear(leafOf(u, "b"), b, 1e-6, "clipped b");
  }
}

TEST_CASE("schedulesFollowTheirFormulas") {
  auto at = [](const Schedule& s, int64_t step) { return s(Array::scalar(static_cast<double>(step), DType::I32)).item(); };
  Schedule lin = linearSchedule(1.0, 0.2, 8);
  for (int64_t s : {0, 1, 4, 7, 8, 9, 100}) {
    double frac = std::min(1.0, s / 8.0);
    REQUIRE_MESSAGE(std::fabs(at(lin, s) - (1.0 + frac * (0.2 - 1.0))) < 1e-6, "linear at " << s);
  }
  const double peak = 3e-3, end = 1e-4;
  const int64_t warm = 10, decay = 110;
  Schedule wc = warmupCosineSchedule(peak, warm, decay, end);
  for (int64_t s : {0, 1, 5, 9, 10, 11, 35, 60, 109, 110, 200}) {
    double want;
    if (s < warm) {
      want = peak * static_cast<double>(s) / warm;
    } else {
      double progress = std::min(1.0, static_cast<double>(s - warm) / static_cast<double>(decay - warm));
      want = end + 0.5 * (peak - end) * (1 + std::cos(std::numbers::pi * progress));
    }
    REQUIRE_MESSAGE(std::fabs(at(wc, s) - want) < 1e-6 * peak,
                    "warmup-cosine at " << s << ": " << at(wc, s) << " vs " << want);
  }
  TSR_COMPARE(at(constantSchedule(0.25), 17), 0.25);

  Schedule cs = cosineSchedule(2.0, 40, 0.5);
  for (int64_t s : {0, 1, 20, 39, 40, 80}) {
    double progress = std::min(1.0, s / 40.0);
    double want = 0.5 + 0.75 * (1 + std::cos(std::numbers::pi * progress));
    REQUIRE_MESSAGE(std::fabs(at(cs, s) - want) < 1e-6, "cosine at " << s << ": " << at(cs, s) << " vs " << want);
  }
  Schedule st = stepSchedule(0.8, 30, 0.5);
  for (int64_t s : {0, 29, 30, 59, 60, 95}) {
    double want = 0.8 * std::pow(0.5, static_cast<double>(s / 30));
    REQUIRE_MESSAGE(std::fabs(at(st, s) - want) < 1e-6, "step at " << s << ": " << at(st, s) << " vs " << want);
  }
  // WSD over 100 steps: 10 of warmup, stable to step 80, linear to 0.1 at 100.
  Schedule wsd = wsdSchedule(1.0, 10, 100, 0.2, 0.1);
  for (int64_t s : {0, 5, 10, 50, 79, 80, 90, 100, 120}) {
    double want = s < 10 ? s / 10.0 : s < 80 ? 1.0 : 1.0 + std::min(1.0, (s - 80) / 20.0) * (0.1 - 1.0);
    REQUIRE_MESSAGE(std::fabs(at(wsd, s) - want) < 1e-6, "wsd at " << s << ": " << at(wsd, s) << " vs " << want);
  }
  // Joined: the second schedule counts from the boundary.
  Schedule joined = joinSchedules(constantSchedule(7.0), linearSchedule(1.0, 0.0, 10), 5);
  for (int64_t s : {0, 4, 5, 10, 15, 30}) {
    double want = s < 5 ? 7.0 : 1.0 - std::min(1.0, (s - 5) / 10.0);
    REQUIRE_MESSAGE(std::fabs(at(joined, s) - want) < 1e-6, "joined at " << s << ": " << at(joined, s) << " vs " << want);
  }
}

TEST_CASE("lossesMatchHandValues") {
  const Vec logits = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0};  // [2, 3]
  const std::vector<int32_t> labels = {1, 2};
  const Vec probs = {0.2, 0.7, 0.1, 0.0, 0.5, 0.5};
  auto lse = [&](int r) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += std::exp(logits[static_cast<size_t>(r * 3 + c)]);
    return std::log(s);
  };
  double ceInt = 0, ceProb = 0;
  for (int r = 0; r < 2; ++r) {
    ceInt += lse(r) - logits[static_cast<size_t>(r * 3 + labels[static_cast<size_t>(r)])];
    for (int c = 0; c < 3; ++c)
      ceProb -= probs[static_cast<size_t>(r * 3 + c)] * (logits[static_cast<size_t>(r * 3 + c)] - lse(r));
  }
  ceInt /= 2;
  ceProb /= 2;
  Array l = Array::fromVector(logits, Shape{2, 3}, DType::F32);
  REQUIRE(std::fabs(softmaxCrossEntropy(l, Array::fromVector(labels, Shape{2})).item() - ceInt) < 1e-6);
  REQUIRE(std::fabs(softmaxCrossEntropyProbs(l, Array::fromVector(probs, Shape{2, 3}, DType::F32)).item() - ceProb) <
          1e-6);

  Array pred = Array::fromVector(Vec{1.0, -2.0, 0.5, 4.0}, Shape{2, 2}, DType::F32);
  Array tgt = Array::fromVector(Vec{0.0, -1.0, 1.5, 1.0}, Shape{2, 2}, DType::F32);
  REQUIRE(std::fabs(meanSquaredError(pred, tgt).item() - (1.0 + 1.0 + 1.0 + 9.0) / 4) < 1e-6);
}

TEST_CASE("chainAppliesItsPartsInOrder") {
  Tree p = Tree::dict({{"x", Tree(Array::fromVector(Vec{0.0, 0.0}, Shape{2}, DType::F32))}});
  Tree g = Tree::dict({{"x", Tree(Array::fromVector(Vec{3.0, 4.0}, Shape{2}, DType::F32))}});  // norm 5
  // Clip to norm 1, then step with lr 2: -2 * (0.6, 0.8).
  auto clipFirst = chain({clipByGlobalNorm(1.0), sgd(constantSchedule(2.0))});
  Tree s = clipFirst.init(p);
  TSR_COMPARE(s.size(), size_t(2));
  auto [u1, s1] = clipFirst.update(g, s, p);
  expectNear(leafOf(u1, "x"), {-1.2, -1.6}, 1e-6, "clip then sgd");
  TSR_COMPARE(s1.size(), size_t(2));
  // Step first (-6, -8), then clip the update to norm 1.
  auto stepFirst = chain({sgd(constantSchedule(2.0)), clipByGlobalNorm(1.0)});
  auto [u2, s2] = stepFirst.update(g, stepFirst.init(p), p);
  expectNear(leafOf(u2, "x"), {-0.6, -0.8}, 1e-6, "sgd then clip");
  // The sgd part's counter advanced in its own slot.
  TSR_COMPARE(s2.child(0).find("count")->leaf().item(), 1.0);
}

TEST_CASE("optimisersUnderJitMatchEager") {
  struct Case {
    const char* name;
    GradientTransformation opt;
  };
  std::vector<Case> cases = {
      {"adamw", adamw(warmupCosineSchedule(0.1, 1, 4, 0.01), 0.9, 0.99, 1e-8, 0.1)},
      {"nesterov", sgd(linearSchedule(0.1, 0.02, 3), 0.8, true)},
      {"clip+adam", chain({clipByGlobalNorm(0.5), adam(constantSchedule(0.05))})},
  };
  std::vector<Tree> gs = grads2();
  gs.push_back(params2({1.0, 2.0, -3.0, 0.5}, {-0.4, 0.3}));
  for (auto& c : cases) {
    Tree eager = runEager(c.opt, params2(kW, kB), gs);
    Jit step(
        [&](const Tree& args, const StaticArgs&) {
          const Tree& params = *args.find("params");
          auto [u, s] = c.opt.update(*args.find("grads"), *args.find("state"), params);
          return Tree::dict({{"params", applyUpdates(params, u)}, {"state", s}});
        },
        c.name);
    Tree params = params2(kW, kB);
    Tree state = c.opt.init(params);
    for (const Tree& g : gs) {
      auto out = step.call(Tree::dict({{"params", params}, {"state", state}, {"grads", g}}));
      REQUIRE_MESSAGE(out.ok(), out.error().message);
      params = *out->find("params");
      state = *out->find("state");
    }
    TSR_COMPARE(step.stats().misses, 1);  // compiled once, the state keeps its avals
    expectNear(leafOf(params, "w"), leafOf(eager, "w"), 1e-6, c.name);
    expectNear(leafOf(params, "b"), leafOf(eager, "b"), 1e-6, c.name);
  }
}
