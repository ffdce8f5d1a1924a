#pragma once
// Meshes, PartitionSpecs and NamedShardings (as in jax.sharding), and the device layout they give an array:
// which block of it each device holds. visualizeSharding draws that layout as
// jax.debug.visualize_array_sharding does.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/core/shape.h"

namespace tsr::sharding {

// A logical grid of devices with named axes: Mesh({4, 2}, {"a", "b"}) over devices 0..7 in row-major order.
struct Mesh {
  std::vector<int64_t> shape;
  std::vector<std::string> axes;
  std::vector<int> devices;  // row-major over shape

  // Checks names (unique, non-empty), sizes (positive) and devices (one per position, no repeats).
  static Result<Mesh> create(std::vector<int64_t> shape, std::vector<std::string> axes, std::vector<int> devices = {});
  int size() const { return static_cast<int>(devices.size()); }
  int axisIndex(const std::string& name) const;  // -1 when absent
  int64_t axisSize(const std::string& name) const;
  std::vector<int64_t> coordinates(int position) const;  // the mesh coordinates of devices[position]
  std::string toString() const;  // "Mesh('a': 4, 'b': 2)"
  bool operator==(const Mesh&) const = default;
};

// Per array dimension: the mesh axes it is split over (major to minor), none for replicated along the mesh.
struct PartitionSpec {
  std::vector<std::vector<std::string>> dims;

  // "a,b", "(a,b),None", "None,b", "" (fully replicated), and toString's "P('a', None)"; spaces and quotes are
  // ignored. Errors name the position and the text.
  static Result<PartitionSpec> parse(const std::string& text);
  std::string toString() const;  // "P('a', 'b')", "P(('a', 'b'), None)"
};

// One block of the array and the devices holding it.
struct Shard {
  std::vector<int64_t> index;         // block coordinates, per dim
  std::vector<int64_t> start, limit;  // element range, per dim
  std::vector<int> devices;           // ascending
};

struct NamedSharding {
  Mesh mesh;
  PartitionSpec spec;  // padded with None to the array's rank by layout()

  // Checks the spec against the mesh (known axes, each used once) and, when given, an array shape (rank, and
  // every dim divisible by its number of shards). The message names both.
  static Result<NamedSharding> create(Mesh mesh, PartitionSpec spec);
  Status check(const Shape& shape) const;
  // Number of shards along each dim of an array of this rank.
  std::vector<int64_t> shardsPerDim(int rank) const;
  Shape shardShape(const Shape& shape) const;
  // The distinct blocks of `shape`, in row-major block order, each with its devices.
  Result<std::vector<Shard>> layout(const Shape& shape) const;
  std::string toString() const;  // "NamedSharding(Mesh('a': 4, 'b': 2), P('a', 'b'))"
};

// The device grid as text. 1-D and 2-D arrays: one box per block, sized like the block (within the width),
// labelled with its devices ("CPU 0", "CPU 0,1" for a replicated block). Higher ranks: the grid of the two
// sharded dims (or the last two), with a line per other sharded dim.
Result<std::string> visualizeSharding(const Shape& shape, const NamedSharding& sharding, int width = 48,
                                      const std::string& devicePrefix = "CPU");

}  // namespace tsr::sharding
