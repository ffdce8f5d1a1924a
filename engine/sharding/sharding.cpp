#include "engine/sharding/sharding.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "engine/core/limits.h"

namespace tsr::sharding {

namespace {

// The mesh axes one dim is split over, with their sizes: "mesh axis 'data' has size 2", "mesh axes 'a', 'b'
// have sizes 4, 2".
std::string axesOfDim(const Mesh& mesh, const std::vector<std::string>& axes) {
  std::string names, sizes;
  for (size_t i = 0; i < axes.size(); ++i) {
    names += fmt::format("{}'{}'", i ? ", " : "", axes[i]);
    sizes += fmt::format("{}{}", i ? ", " : "", mesh.axisSize(axes[i]));
  }
  return axes.size() == 1 ? fmt::format("mesh axis {} has size {}", names, sizes)
                          : fmt::format("mesh axes {} have sizes {}", names, sizes);
}

}  // namespace

Result<Mesh> Mesh::create(std::vector<int64_t> shape, std::vector<std::string> axes, std::vector<int> devices) {
  if (shape.size() != axes.size())
    return makeError("mesh: {} sizes but {} axis names", shape.size(), axes.size());
  if (shape.empty()) return makeError("mesh: no axes");
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) return makeError("mesh: axis '{}' has size {}", axes[i], shape[i]);
    if (axes[i].empty()) return makeError("mesh: axis {} has no name", i);
    for (size_t j = 0; j < i; ++j)
      if (axes[j] == axes[i]) return makeError("mesh: axis name '{}' is used twice", axes[i]);
  }
  // Bounded before anything is sized by it: a product that overflowed would make a wrong (or negative) count.
  auto counted = limits::checkedProduct("mesh shape", shape, limits::kMeshDevices);
  if (!counted.ok()) return makeError("mesh: {}", counted.error().message);
  const int64_t n = *counted;
  if (devices.empty()) {
    devices.resize(static_cast<size_t>(n));
    std::iota(devices.begin(), devices.end(), 0);
  }
  if (static_cast<int64_t>(devices.size()) != n)
    return makeError("mesh: shape {} holds {} devices, {} given", Shape(shape).toString(), n, devices.size());
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i] == sorted[i - 1]) return makeError("mesh: device {} appears twice", sorted[i]);
  return Mesh{std::move(shape), std::move(axes), std::move(devices)};
}

int Mesh::axisIndex(const std::string& name) const {
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] == name) return static_cast<int>(i);
  return -1;
}

int64_t Mesh::axisSize(const std::string& name) const {
  int i = axisIndex(name);
  return i < 0 ? 0 : shape[static_cast<size_t>(i)];
}

std::vector<int64_t> Mesh::coordinates(int position) const {
  std::vector<int64_t> c(shape.size());
  int64_t p = position;
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = p % shape[d];
    p /= shape[d];
  }
  return c;
}

std::string Mesh::toString() const {
  std::string s = "Mesh(";
  for (size_t i = 0; i < axes.size(); ++i) s += fmt::format("{}'{}': {}", i ? ", " : "", axes[i], shape[i]);
  return s + ")";
}

Result<PartitionSpec> PartitionSpec::parse(const std::string& input) {
  // toString's form, P('a', None), reads back as well.
  std::string text = input;
  {
    size_t b = text.find_first_not_of(" \t");
    size_t e = text.find_last_not_of(" \t");
    if (b != std::string::npos && text.compare(b, 2, "P(") == 0 && text[e] == ')') text = text.substr(b + 2, e - b - 2);
  }
  PartitionSpec spec;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && (std::isspace(static_cast<unsigned char>(text[i])) || text[i] == '\'' || text[i] == '"'))
      ++i;
  };
  auto name = [&]() -> Result<std::string> {
    skip();
    size_t b = i;
    while (i < text.size() && (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_')) ++i;
    if (b == i)
      return makeError("partition spec '{}': expected an axis name or None at column {}", text, i + 1);
    std::string s = text.substr(b, i - b);
    skip();
    return s;
  };
  skip();
  if (i == text.size()) return spec;
  for (;;) {
    skip();
    std::vector<std::string> dim;
    if (i < text.size() && text[i] == '(') {
      ++i;
      for (;;) {
        Result<std::string> a = name();  // not TSR_ASSIGN: GCC 12 warns of the moved-into string as uninitialized
        if (!a.ok()) return a.error();
        if (*a == "None") return makeError("partition spec '{}': None inside a tuple at column {}", text, i);
        dim.push_back(std::move(*a));
        if (i < text.size() && text[i] == ',') {
          ++i;
          continue;
        }
        if (i < text.size() && text[i] == ')') {
          ++i;
          break;
        }
        return makeError("partition spec '{}': expected ',' or ')' at column {}", text, i + 1);
      }
    } else {
      TSR_ASSIGN(std::string a, name());
      if (a != "None") dim.push_back(a);
    }
    spec.dims.push_back(std::move(dim));
    skip();
    if (i == text.size()) break;
    if (text[i] != ',') return makeError("partition spec '{}': expected ',' at column {}", text, i + 1);
    ++i;
  }
  return spec;
}

std::string PartitionSpec::toString() const {
  std::string s = "P(";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) s += ", ";
    if (dims[d].empty()) s += "None";
    else if (dims[d].size() == 1) s += "'" + dims[d][0] + "'";
    else {
      s += "(";
      for (size_t k = 0; k < dims[d].size(); ++k) s += fmt::format("{}'{}'", k ? ", " : "", dims[d][k]);
      s += ")";
    }
  }
  return s + ")";
}

Result<NamedSharding> NamedSharding::create(Mesh mesh, PartitionSpec spec) {
  std::map<std::string, size_t> used;
  for (size_t d = 0; d < spec.dims.size(); ++d)
    for (const auto& a : spec.dims[d]) {
      if (mesh.axisIndex(a) < 0)
        return makeError("{}: axis '{}' is not in {}", spec.toString(), a, mesh.toString());
      auto [it, fresh] = used.emplace(a, d);
      if (!fresh)
        return makeError("{}: mesh axis '{}' shards both dim {} and dim {}", spec.toString(), a, it->second, d);
    }
  return NamedSharding{std::move(mesh), std::move(spec)};
}

std::vector<int64_t> NamedSharding::shardsPerDim(int rank) const {
  std::vector<int64_t> n(static_cast<size_t>(rank), 1);
  for (size_t d = 0; d < spec.dims.size() && d < n.size(); ++d)
    for (const auto& a : spec.dims[d]) n[d] *= mesh.axisSize(a);
  return n;
}

Status NamedSharding::check(const Shape& shape) const {
  // A spec made without create() may name an axis the mesh lacks: its size would count as 0 shards.
  for (const auto& dim : spec.dims)
    for (const auto& a : dim)
      if (mesh.axisIndex(a) < 0) return makeError("{}: axis '{}' is not in {}", spec.toString(), a, mesh.toString());
  if (static_cast<int>(spec.dims.size()) > shape.rank())
    return makeError("{} has {} dims but the array {} has rank {}", spec.toString(), spec.dims.size(),
                     shape.toString(), shape.rank());
  // As jax.device_put, a split must divide its dim: an uneven split is refused, never padded or replicated.
  auto n = shardsPerDim(shape.rank());
  for (int d = 0; d < shape.rank(); ++d)
    if (shape[d] % n[static_cast<size_t>(d)] != 0)
      return makeError("{} splits dim {} of {} into {} shards, which does not divide {} ({}); the dim must be a "
                       "multiple of {}",
                       spec.toString(), d, shape.toString(), n[static_cast<size_t>(d)], shape[d],
                       axesOfDim(mesh, spec.dims[static_cast<size_t>(d)]), n[static_cast<size_t>(d)]);
  return {};
}

Shape NamedSharding::shardShape(const Shape& shape) const {
  auto n = shardsPerDim(shape.rank());
  std::vector<int64_t> s(shape.dims());
  for (size_t d = 0; d < s.size(); ++d) s[d] /= n[d];
  return Shape(s);
}

Result<std::vector<Shard>> NamedSharding::layout(const Shape& shape) const {
  TSR_TRY(check(shape));
  const int rank = shape.rank();
  Shape block = shardShape(shape);
  std::map<std::vector<int64_t>, std::vector<int>> holders;
  for (int p = 0; p < mesh.size(); ++p) {
    auto c = mesh.coordinates(p);
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (size_t d = 0; d < spec.dims.size(); ++d)
      for (const auto& a : spec.dims[d]) {  // major to minor
        int ai = mesh.axisIndex(a);
        idx[d] = idx[d] * mesh.shape[static_cast<size_t>(ai)] + c[static_cast<size_t>(ai)];
      }
    holders[idx].push_back(mesh.devices[static_cast<size_t>(p)]);
  }
  std::vector<Shard> out;
  for (auto& [idx, devs] : holders) {
    Shard s;
    s.index = idx;
    for (int d = 0; d < rank; ++d) {
      s.start.push_back(idx[static_cast<size_t>(d)] * block[d]);
      s.limit.push_back((idx[static_cast<size_t>(d)] + 1) * block[d]);
    }
    std::sort(devs.begin(), devs.end());
    s.devices = devs;
    out.push_back(std::move(s));
  }
  return out;
}

std::string NamedSharding::toString() const { return "NamedSharding(" + mesh.toString() + ", " + spec.toString() + ")"; }

namespace {

std::string deviceLabel(const std::vector<int>& devices, const std::string& prefix) {
  std::string s = prefix + " ";
  for (size_t i = 0; i < devices.size(); ++i) s += fmt::format("{}{}", i ? "," : "", devices[i]);
  return s;
}

std::string centered(const std::string& text, size_t width) {
  if (text.size() >= width) return text.substr(0, width);
  size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

// A grid of rows x cols boxes with labels; all boxes the same size, as the shards are.
std::string drawGrid(int64_t rows, int64_t cols, const std::vector<std::string>& labels, int width) {
  size_t longest = 0;
  for (const auto& l : labels) longest = std::max(longest, l.size());
  size_t cell = std::max<size_t>(longest + 2, static_cast<size_t>(std::max<int64_t>(4, width / std::max<int64_t>(cols, 1))));
  const int height = rows <= 2 ? 3 : 1;  // blank lines around the label keep tall grids readable
  auto rule = [&](const char* l, const char* m, const char* r) {
    std::string s = l;
    for (int64_t c = 0; c < cols; ++c) {
      for (size_t k = 0; k < cell; ++k) s += "─";
      s += c + 1 < cols ? m : r;
    }
    return s + "\n";
  };
  std::string out = rule("┌", "┬", "┐");
  for (int64_t r = 0; r < rows; ++r) {
    for (int h = 0; h < height; ++h) {
      std::string line = "│";
      for (int64_t c = 0; c < cols; ++c) {
        const std::string& label = labels[static_cast<size_t>(r * cols + c)];
        line += (h == height / 2 ? centered(label, cell) : std::string(cell, ' ')) + "│";
      }
      out += line + "\n";
    }
    out += r + 1 < rows ? rule("├", "┼", "┤") : rule("└", "┴", "┘");
  }
  return out;
}

}  // namespace

Result<std::string> visualizeSharding(const Shape& shape, const NamedSharding& sharding, int width,
                                      const std::string& devicePrefix) {
  TSR_ASSIGN(std::vector<Shard> shards, sharding.layout(shape));
  const int rank = shape.rank();
  auto n = sharding.shardsPerDim(rank);
  if (rank == 0) return drawGrid(1, 1, {deviceLabel(shards[0].devices, devicePrefix)}, width);
  // The two dims drawn: for rank <= 2 the array's own; above, the last two sharded dims (or the last two).
  std::vector<int> sharded;
  for (int d = 0; d < rank; ++d)
    if (n[static_cast<size_t>(d)] > 1) sharded.push_back(d);
  int rowDim = -1, colDim = rank - 1;
  if (rank >= 2) {
    if (sharded.size() >= 2) {
      rowDim = sharded[sharded.size() - 2];
      colDim = sharded.back();
    } else if (sharded.size() == 1) {
      rowDim = sharded[0] == rank - 1 ? rank - 2 : sharded[0];
    } else {
      rowDim = rank - 2;
    }
  }
  // Other sharded dims: one grid per block index along them.
  std::vector<int> others;
  for (int d : sharded)
    if (d != rowDim && d != colDim) others.push_back(d);
  const int64_t rows = rowDim >= 0 ? n[static_cast<size_t>(rowDim)] : 1;
  const int64_t cols = n[static_cast<size_t>(colDim)];
  std::map<std::vector<int64_t>, std::vector<std::string>> grids;
  for (const auto& s : shards) {
    std::vector<int64_t> key;
    for (int d : others) key.push_back(s.index[static_cast<size_t>(d)]);
    auto& labels = grids[key];
    labels.resize(static_cast<size_t>(rows * cols));
    int64_t r = rowDim >= 0 ? s.index[static_cast<size_t>(rowDim)] : 0;
    int64_t c = s.index[static_cast<size_t>(colDim)];
    labels[static_cast<size_t>(r * cols + c)] = deviceLabel(s.devices, devicePrefix);
  }
  std::string out;
  for (const auto& [key, labels] : grids) {
    if (!others.empty()) {
      std::string head;
      for (size_t i = 0; i < others.size(); ++i)
        head += fmt::format("{}dim {} block {} of {}", i ? ", " : "", others[i], key[i], n[static_cast<size_t>(others[i])]);
      out += head + ":\n";
    }
    out += drawGrid(rows, cols, labels, width);
  }
  if (rank > 2)
    out += fmt::format("rows: dim {}, columns: dim {} of {}\n", rowDim, colDim, shape.toString());
  return out;
}

}  // namespace tsr::sharding
