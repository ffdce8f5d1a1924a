#pragma once
// `tessera logits PROJECT --checkpoint F --tokens 1,2,3`: a language model's logits for given token ids, to
// compare a checkpoint (ours or a Hugging Face model.safetensors) with another implementation.
#include <CLI/CLI.hpp>

namespace tsr::cli {

// Adds the subcommand; the returned function runs it when it was parsed (returns the exit code, -1 if not).
std::function<int()> addLogitsCommand(CLI::App& app);

}  // namespace tsr::cli
