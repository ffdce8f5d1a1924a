#include "engine/data/synthetic_shapes.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tsr::data {

namespace {

// SplitMix64 (Steele, Lea and Flood, 2014): a small generator whose stream is fixed by its 64-bit state.
class Stream {
 public:
  explicit Stream(uint64_t state) : m_state(state) {}
  uint64_t bits() {
    uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int64_t below(int64_t n) { return static_cast<int64_t>(bits() % static_cast<uint64_t>(n)); }
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t m_state;
};

struct Shape {
  int64_t kind;  // 1 circle, 2 rectangle, 3 triangle
  double cx, cy, r, hw, hh;
  bool covers(double x, double y) const {
    const double dx = x - cx, dy = y - cy;
    if (kind == 1) return dx * dx + dy * dy <= r * r;
    if (kind == 2) return std::fabs(dx) <= hw && std::fabs(dy) <= hh;
    // Apex (cx, cy - r), base from (cx - r, cy + r) to (cx + r, cy + r): inside where y is below the apex and
    // |dx| at most the half-width at that height.
    return dy <= r && dy >= -r && std::fabs(dx) <= (dy + r) / 2.0;
  }
};

}  // namespace

Status checkShapesOptions(const ShapesOptions& o, const std::string& where) {
  if (o.classes < 2 || o.classes > kShapeKinds + 1)
    return makeError("{}: kind 'shapes' draws circles, rectangles and triangles: [model] num_classes must be 2 to {} "
                     "(the background and up to {} kinds of shape), got {}",
                     where, kShapeKinds + 1, kShapeKinds, o.classes);
  if (o.size < 8) return makeError("{}: kind 'shapes' needs images of at least 8 pixels a side, got {}", where, o.size);
  return {};
}

void renderShapes(const ShapesOptions& o, int64_t index, float* chw, int32_t* mask) {
  Stream rng(o.seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull + 1);
  const auto side = static_cast<double>(o.size);
  const int64_t count = 1 + rng.below(o.maxShapes);
  std::vector<Shape> shapes;
  std::vector<std::vector<float>> colours;
  // Each kind of shape has a tint of its own, bright in one channel (kind k in channel k - 1, modulo the channels)
  // and dull in the others, and each shape varies it by up to 0.15 a channel: colour hints at the class, the
  // outline decides where tints coincide (one channel, or a background as bright).
  auto tint = [&](int64_t kind, size_t channel) {
    return static_cast<int64_t>(channel) == (kind - 1) % o.channels ? 0.85 : 0.3;
  };
  std::vector<float> background(static_cast<size_t>(o.channels));
  for (float& c : background) c = static_cast<float>(rng.uniform(0.0, 0.6));
  for (int64_t s = 0; s < count; ++s) {
    Shape sh;
    sh.kind = 1 + rng.below(o.classes - 1);
    sh.r = rng.uniform(side / 8.0, side / 4.0);
    sh.cx = rng.uniform(sh.r, side - sh.r);
    sh.cy = rng.uniform(sh.r, side - sh.r);
    sh.hw = rng.uniform(sh.r / 2.0, sh.r);
    sh.hh = rng.uniform(sh.r / 2.0, sh.r);
    shapes.push_back(sh);
    // A colour at least 0.3 from the background's in some channel, so that every shape can be seen: redrawn a
    // few times, then the first channel moved away from the background.
    std::vector<float> colour(static_cast<size_t>(o.channels));
    double farthest = 0;
    for (int tries = 0; tries < 8 && farthest < 0.3; ++tries) {
      farthest = 0;
      for (size_t c = 0; c < colour.size(); ++c) {
        colour[c] = static_cast<float>(std::clamp(tint(sh.kind, c) + rng.uniform(-0.15, 0.15), 0.0, 1.0));
        farthest = std::max(farthest, std::fabs(static_cast<double>(colour[c] - background[c])));
      }
    }
    if (farthest < 0.3) colour[0] = background[0] + 0.4f;  // the background is at most 0.6
    colours.push_back(std::move(colour));
  }
  const int64_t plane = o.size * o.size;
  for (int64_t y = 0; y < o.size; ++y)
    for (int64_t x = 0; x < o.size; ++x) {
      const double px = static_cast<double>(x) + 0.5, py = static_cast<double>(y) + 0.5;  // the pixel's centre
      int64_t top = -1;
      for (int64_t s = 0; s < count; ++s)
        if (shapes[static_cast<size_t>(s)].covers(px, py)) top = s;
      mask[y * o.size + x] = top < 0 ? 0 : static_cast<int32_t>(shapes[static_cast<size_t>(top)].kind);
      const std::vector<float>& colour = top < 0 ? background : colours[static_cast<size_t>(top)];
      for (int64_t c = 0; c < o.channels; ++c)
        chw[c * plane + y * o.size + x] = colour[static_cast<size_t>(c)] + static_cast<float>(o.noise * rng.normal());
    }
}

}  // namespace tsr::data
