// What generate and serve share: a GPT checkpoint loaded for inference (model configuration,
// parameters and tokenizer rebuilt from what the checkpoint stores), and the choice of the next
// token from a row of logits. Not for: training (train/) or HTTP (serve.cpp).
#pragma once

#include "dptrain/core/rng.h"
#include "dptrain/data/tokens.h"
#include "dptrain/model/gpt.h"

#include <cstdint>
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

// The next token from a row of logits: the largest (temperature 0), else a draw from the softmax of
// logits / temperature over the k most likely (top_k > 0) whose probabilities, largest first, first
// reach top_p (nucleus sampling; 1 = all). One random stream per picker, from seed. Buffers are
// allocated once.
class TokenPicker {
  public:
    TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed);
    int pick(const float* logits);

  private:
    int V_, k_;
    double temperature_, top_p_;
    std::vector<float> probs_;
    std::vector<int> order_;
    Rng rng_;
};

} // namespace dptrain
