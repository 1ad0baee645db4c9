// A GPT checkpoint loaded for inference (config, parameters, tokenizer), for generate, serve and
// dptrain-bench decode. Not for: resuming training (checkpoints.h).
#pragma once

#include "dptrain/data/tokenizer.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/model/gpt.h"

#include <string>
#include <vector>

namespace dptrain {

struct InferenceModel {
    std::string path;  // the file
    long step = 0;
    GptConfig cfg;
    TokenizerPtr tok = make_byte_tokenizer();  // never null
    std::vector<float> params;
};

// A directory: its newest complete checkpoint, a damaged newer one skipped with a line on stderr.
// Throws UserError naming the path and what is wrong.
InferenceModel load_inference_model(const std::string& path);
// A checkpoint's state already read (an import's too): the model its stored options rebuild.
InferenceModel inference_model_from(CheckpointState ck, const std::string& path);

} // namespace dptrain
