#pragma once
// Where a project's training batches come from: the [data] kinds (text windows of a tokenized corpus, synthetic
// images, synthetic digit-like vectors, NumPy arrays, CIFAR-10 files, image folders) as resumable sources, and
// synthetic batches of the right shapes for benchmarks. The kind and the batch's shapes come from the project's model family (project/model_family.h).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/data/bpe.h"
#include "engine/project/project.h"
#include "engine/train/trainer.h"

namespace tsr::train {

// A non-negative integer stored as text (checkpoint metadata, data positions); a damaged file is an error.
Result<int64_t> parseCount(const std::string& text, const std::string& what);

// Where a batch comes from: text windows, synthetic images, synthetic digit-like vectors, arrays or images.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Result<Batch> next() = 0;
  virtual std::string state() const = 0;
  virtual Status restore(const std::string& state) = 0;
  virtual int64_t itemsPerBatch() const = 0;  // tokens (or samples) a step consumes
  // Back to the first batch (evaluation reads the same validation batches every time).
  virtual Status rewind() = 0;
};

// The data of a project: training and validation sources, and the tokenizer for text.
struct ProjectData {
  std::unique_ptr<DataSource> train, val;
  std::optional<data::BpeTokenizer> tokenizer;
};

// Prepares [data] for [train] batch_size and seq_len: text is tokenized (the tokenizer trained or loaded) and
// cached in the project's .tessera folder; synthetic kinds take their shapes from the family's batch.
Result<ProjectData> prepareData(const project::Project& project, const std::function<void(const std::string&)>& info);

// The data files (or folders) a project reads from outside its folder, for every kind that reads files (a
// corpus and its tokenizer, arrays, CIFAR-10 or image folders; "../../../etc/passwd" as much as a dataset kept
// elsewhere): they are read, but the run says so and records them, since a project copied from elsewhere should
// not read a user's files unnoticed.
std::vector<std::string> filesOutsideProject(const project::Project& project);

// A batch of the shapes `signature` gives, drawn from `seed`: integer inputs and labels uniform in
// [0, classes), floating inputs standard normal.
Batch syntheticBatch(const project::BatchSignature& signature, uint64_t seed);
// The project's batch (a language model's with `vocab` tokens) at [train] batch_size and seq_len.
Batch syntheticBatch(const project::Project& project, int64_t vocab, uint64_t seed);
// The shapes of the project's batch at [train] batch_size and seq_len.
project::BatchSignature batchSignature(const project::Project& project, int64_t vocab);

}  // namespace tsr::train
