#pragma once
// `tessera shard show`: the device layout of an array under a mesh and a PartitionSpec, drawn as
// jax.debug.visualize_array_sharding does, with each shard's shape and bytes.
#include <functional>

#include <CLI/CLI.hpp>

namespace tsr::cli {

std::function<int()> addShardCommand(CLI::App& app);

}  // namespace tsr::cli
