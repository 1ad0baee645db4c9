// Hugging Face GPT-2 weights as a checkpoint's state, for `dptrain-ckpt import` and `dptrain eval`:
// the parameters, the tokenizer beside them and the training options that rebuild the model.
// Not for: reading the weights themselves (hf_gpt2.h).
#pragma once

#include "dptrain/io/checkpoint.h"

#include <string>

namespace dptrain {

// DIR: an export or GPT-2 weights with config.json and the tokenizer's files. No optimizer state
// (zeros) and no data position; the step an export recorded, else 0. Throws UserError naming
// what is missing; *note: a crop of the position table, or "".
CheckpointState import_hf_checkpoint(const std::string& dir, std::string* note);

} // namespace dptrain
