// Token choice (inference.h), shared by generate and serve; the rule itself is cpu::pick_token.
// Not for: decoding (model/decoder.h).
#include "dptrain/infer/inference.h"

#include "dptrain/backend/cpu/ops.h"

#include <algorithm>

namespace dptrain {

TokenPicker::TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed)
    : probs_(vocab_size), order_(vocab_size), rng_(stream_seed(seed, 0x6E6E)) {
    rule_.vocab = vocab_size;
    rule_.top_k = top_k > 0 ? std::min(top_k, vocab_size) : 0;
    rule_.temperature = temperature;
    rule_.top_p = top_p;
}

TokenDraw TokenPicker::next_draw() {
    TokenDraw d = rule_;
    if (d.temperature > 0) d.u = rng_.uniform();
    return d;
}

int TokenPicker::pick(const float* z) { return cpu::pick_token(z, next_draw(), probs_.data(), order_.data()); }

int drawable_ids(const GptConfig& cfg, const Tokenizer& tok) { return std::min(cfg.vocab_size, tok.vocab_size()); }

} // namespace dptrain
