#pragma once
// A project: a folder with project.toml naming the model family and config, the data, the training settings,
// the mesh and sharding rules, and the precision. Errors name the file, the line and the key.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/result.h"
#include "engine/project/model_family.h"

namespace tsr::project {

struct ModelSection {
  std::string family = "gpt2";  // a registered family's name (model_family.h)
  ModelConfig config;           // its [model] keys, every declared one (defaults filled in)

  // The family's declaration; the project parser accepts only registered families, so it is never null for a
  // parsed project.
  const ModelFamily* definition() const { return findModelFamily(family); }
  // A model of token sequences ([B, T] -> logits [B, T, V]) trained on [data] text.
  bool languageModel() const;
  // A language model's longest sequence (its context key, block_size for gpt2); 0 when it declares none.
  int64_t contextLength() const;
};

struct DataSection {
  // text | synthetic-images | synthetic-digits | npy | cifar10 | image_folder | shapes; when absent, the family's
  // first data kind
  std::string kind;
  std::string path;           // text corpus, CIFAR-10 folder or image folder, relative to the project folder
  std::string tokenizer = "bpe";  // bpe: trained on the corpus and cached; gpt2: encoder.json + vocab.bpe
  std::string encoderJson, vocabBpe;  // for tokenizer = gpt2
  int64_t vocabSize = 512;    // for a trained tokenizer
  double valFraction = 0.1;   // held out for validation (text; npy and image_folder without validation files)

  // Array and image data (npy, cifar10, image_folder); read only for those kinds.
  std::string x, y;           // npy: inputs and labels, "file.npy" or "file.npz:member"
  std::string valX, valY;     // npy: validation inputs and labels (else val_fraction of x and y)
  std::string valPath;        // image_folder: a validation folder of the same classes (else val_fraction)
  double scale = 0.0;         // npy: inputs times scale; 0: 1/255 for uint8 inputs, 1 otherwise
  std::vector<double> mean, stddev;  // [data] mean and std: cifar10, image_folder: per-channel normalisation of [0, 1] pixels
  bool augment = false;       // cifar10, image_folder: random crop and horizontal flip of training images
  std::string badFiles = "stop";  // image_folder: stop | skip on an image that does not decode

  // shapes (segmentation images drawn from a seed, data/synthetic_shapes.h); read only for that kind. The last
  // val_fraction of the samples are the validation set.
  int64_t samples = 2048;     // images in the dataset, training and validation together
  int64_t maxShapes = 3;      // shapes per image: 1 to max_shapes
  double noise = 0.1;         // standard deviation of the pixel noise
  uint64_t seed = 0;          // the dataset's seed ([train] seed draws the order and the weights)
};

struct TrainSection {
  int64_t steps = 100;
  int64_t batchSize = 8;
  int64_t seqLen = 64;
  std::string optimizer = "adamw";  // adamw | adam | sgd
  std::string loss = "cross_entropy";  // cross_entropy | mse (against one-hot labels)
  double lr = 3e-4;
  double minLr = 0.0;
  int64_t warmupSteps = 10;
  // The learning rate over the run: warmup_cosine | constant | linear | cosine | step | wsd. Every one starts
  // with warmup_steps of linear warmup from 0 to lr; linear and cosine then decay to min_lr at the last step,
  // step multiplies by step_gamma every step_every steps, wsd holds lr and decays linearly to min_lr over the
  // last decay_fraction of the run.
  std::string schedule = "warmup_cosine";
  int64_t stepEvery = 100;
  double stepGamma = 0.1;
  double decayFraction = 0.2;
  double weightDecay = 0.1;
  double gradClip = 1.0;
  double beta1 = 0.9, beta2 = 0.95;
  double momentum = 0.9;
  bool nesterov = false;  // sgd: Nesterov momentum
  int64_t evalEvery = 50;
  int64_t evalSteps = 4;
  int64_t logEvery = 1;
  int64_t checkpointEvery = 0;  // the run's latest checkpoint every N steps; 0: only at the end
  int64_t keepCheckpoints = 0;  // with checkpoint_every: also keep the last K step-N checkpoints; 0: latest only
  std::string bestMetric = "val_loss";  // best.safetensors holds the step where it was lowest: val_loss | loss
  int64_t accumulate = 1;       // gradient accumulation: K micro-batches of batch_size per optimizer update
  // What the backward pass recomputes instead of keeping from the forward pass: none | blocks (each block of the
  // model, all of it) | dots_saveable (each block, keeping its matmul results).
  std::string remat = "none";
  uint64_t seed = 0;
  bool shuffle = true;
};

struct MeshSection {
  std::vector<int64_t> shape = {1};
  std::vector<std::string> axes = {"data"};
};

struct ShardingRule {
  std::string pattern;  // a regex over parameter paths
  std::string spec;     // a PartitionSpec, e.g. "None, model"
  int line = 0;
};

// One `--set SECTION.KEY=VALUE` override. VALUE is a TOML value (3e-4, 4, true, [2, 4], "text"); text that is
// no TOML value is a string, so `--set train.schedule=cosine` needs no quotes.
struct Override {
  std::string section, key, value;
  std::string spec() const { return section + "." + key + "=" + value; }
};
Result<Override> parseOverride(const std::string& spec);
Result<std::vector<Override>> parseOverrides(const std::vector<std::string>& specs);

// One setting of the resolved configuration: after defaults and overrides, as TOML text ("3e-4", "\"adamw\"").
struct Setting {
  std::string section, key, value;
};

struct Project {
  std::string dir;   // the project folder
  std::string file;  // its project.toml
  std::string name;
  std::string text;  // the file as read, stored with each run
  ModelSection model;
  DataSection data;
  TrainSection train;
  MeshSection mesh;
  std::vector<ShardingRule> sharding;
  std::string precision = "f32";  // f32 | bf16
  std::vector<Override> overrides;  // applied over the file's text, in order
  // Every setting the parser read, in the file's section order, defaults included ([sharding] aside: `sharding`).
  std::vector<Setting> settings;
  // Where each key the file or a --set gives was written, by "section.key": "p/project.toml:7", or
  // "--set model.python=m.py (over p/project.toml)". Keys left at their defaults are absent.
  std::map<std::string, std::string> origins;

  std::string resolve(const std::string& relative) const;  // a path relative to the project folder
  // What an error about a key starts with: its origin, or the file when the key was not written.
  std::string origin(const std::string& section, const std::string& key) const;
};

// The files the model reads that its family declares as [model] keys (FamilyKey::projectFile: a Python model's
// `python = "model.py"`): an error naming the key's line when one does not exist or is not a file.
Status checkModelFiles(const Project& p);

// Loads `path`: a folder holding project.toml, or the file itself. Overrides replace (or add) keys before the
// file is checked; an error about an overridden value names the --set that gave it.
Result<Project> loadProject(const std::string& path, const std::vector<Override>& overrides = {});
Result<Project> parseProject(const std::string& text, const std::string& file, const std::string& dir,
                             const std::vector<Override>& overrides = {});

// The resolved configuration as project.toml text: every table and key after defaults and overrides. Training
// from it gives the same run as training the project with its overrides.
std::string resolvedToml(const Project& p);

}  // namespace tsr::project
