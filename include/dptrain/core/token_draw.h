// One row's next-token rule and its random draw, what the CPU's and the GPU's token pickers
// (cpu::pick_token, cuda::pick_tokens) read. Not for: the random stream (TokenPicker, infer/).
#pragma once

namespace dptrain {

// temperature 0: the first largest logit; above 0: softmax(logits / temperature) over the first
// `vocab` ids, within the top_k largest (0: all of them) and the smallest most-likely set whose
// mass reaches top_p; u in [0, 1) picks along that set's cumulative mass (in id order over the
// whole vocabulary, most likely first where top_k or top_p cut it). Below 0: no token asked for.
struct TokenDraw {
    int vocab = 0;
    int top_k = 0;
    double temperature = 0;
    double top_p = 1.0;
    double u = 0;
};

} // namespace dptrain
