// What generate and serve share: the checkpoint loaded and the next token's choice.
// Not for: training (train/) or HTTP (serve.cpp).
#pragma once

#include "dptrain/core/rng.h"
#include "dptrain/core/token_draw.h"
#include "dptrain/infer/inference_model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dptrain {

// Temperature 0: argmax; else softmax(logits / T) within top_k and top_p (core/token_draw.h). One
// random stream per picker, so a request's draws do not depend on its neighbours.
class TokenPicker {
  public:
    TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed);
    // The next token's rule and draw (one uniform taken where the temperature is above 0), for a
    // decoder that picks itself (Decoder::decode_pick); pick(z) is pick_token(z, next_draw()).
    TokenDraw next_draw();
    int pick(const float* logits);

  private:
    TokenDraw rule_;  // u unset
    std::vector<float> probs_;
    std::vector<int> order_;
    Rng rng_;
};

// A padded vocabulary (GPT-2's 50,304) has ids the tokenizer cannot decode: never drawn.
int drawable_ids(const GptConfig& cfg, const Tokenizer& tok);

} // namespace dptrain
