// A GPT checkpoint loaded for inference: the model configuration, parameters and tokenizer rebuilt
// from what the checkpoint stores. Used by generate and serve (app/inference.h) and by
// dptrain-bench decode. Not for: resuming training (checkpoints.h).
#pragma once

#include "dptrain/data/tokens.h"
#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

struct InferenceModel {
    std::string path;  // the checkpoint file
    long step = 0;
    GptConfig cfg;
    Tokenizer tok;
    std::vector<float> params;
};

// PATH: a checkpoint file, or a run or checkpoint directory for its newest complete checkpoint (a
// damaged newer one is skipped with a line on stderr). Throws UserError naming the path and what
// is wrong (no checkpoint, not a language model, options that do not rebuild its model).
InferenceModel load_inference_model(const std::string& path);

} // namespace dptrain
