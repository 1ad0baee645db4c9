// What generate and serve share: a GPT checkpoint loaded for inference (train/inference_model.h),
// and the choice of the next token from a row of logits. Not for: training (train/) or HTTP
// (serve.cpp).
#pragma once

#include "dptrain/core/rng.h"
#include "dptrain/train/inference_model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

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

// The ids a picker draws from: those the tokenizer can decode. A model's vocabulary padded past
// the tokenizer's (--vocab-size 512 on bytes, or GPT-2's 50,304) has logits for ids that decode to
// nothing, or to other bytes; they are never drawn.
int drawable_ids(const GptConfig& cfg, const Tokenizer& tok);

} // namespace dptrain
