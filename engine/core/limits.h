#pragma once
// Bounds on every size a user can ask for (project keys, command-line options, files read whole), checked before
// anything is allocated from it: a typo or a hostile file then gives a message that names the key, the value
// and the limit, never an abort deep inside an allocation. The limits are far above any model that trains on
// one machine and far below what overflows 64-bit arithmetic when sizes are multiplied together.
#include <cstdint>
#include <span>
#include <string_view>

#include "engine/core/result.h"

namespace tsr::limits {

constexpr int64_t kMeshDevices = int64_t(1) << 20;  // devices of a mesh, all axes together
constexpr int64_t kLayers = 4096;                   // n_layer, layers
constexpr int64_t kWidth = int64_t(1) << 17;        // n_embd, hidden, mlp, heads, an MLP layer
constexpr int64_t kImageSize = 8192;                // image_size, patch_size (pixels a side)
constexpr int64_t kVocab = int64_t(1) << 24;        // vocab_size, num_classes
constexpr int64_t kSequence = int64_t(1) << 20;     // block_size, seq_len
constexpr int64_t kBatch = int64_t(1) << 20;        // batch_size
constexpr int64_t kSteps = int64_t(1) << 40;        // steps, warmup, eval and checkpoint periods
constexpr int64_t kDrawingWidth = 4096;             // columns of a drawn device grid
constexpr int64_t kProjectFileBytes = int64_t(16) << 20;  // project.toml
constexpr int64_t kCorpusBytes = int64_t(4) << 30;  // a text corpus, read whole and tokenized in memory
constexpr int64_t kSafetensorsHeaderBytes = int64_t(100) << 20;  // as the safetensors library allows
constexpr int64_t kArrayElements = int64_t(1) << 40;            // elements of one array

// "'n_layer' is 100000, above the limit of 4096" (or below the minimum), as an Error; OK inside [min, max].
Status checkRange(std::string_view key, int64_t value, int64_t min, int64_t max);

// The product of sizes, or an error naming `key` once it passes `limit` (checked at every factor, so it never
// overflows). Sizes cannot be negative.
Result<int64_t> checkedProduct(std::string_view key, std::span<const int64_t> sizes, int64_t limit);

// Bytes this process can still take: the smaller of the kernel's MemAvailable (/proc/meminfo), the cgroup's
// memory.max less its usage (containers), and the address-space limit (ulimit -v) less the mapped size; -1
// when none of them is known.
int64_t availableMemoryBytes();

// An error naming `what` and both sizes when `bytes` exceed availableMemoryBytes(); OK when they fit or nothing
// is known. Called before a large allocation that a user's configuration decides (a model's state), so that it
// fails with a sentence instead of the out-of-memory killer.
Status checkFitsInMemory(std::string_view what, int64_t bytes);

}  // namespace tsr::limits
