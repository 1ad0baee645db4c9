// Incremental decoding behind one interface, CPU (GptDecoder) or GPU (CudaGptDecoder), each with its
// own key/value cache. Not for: training (Model), or choosing the rows of a call.
#pragma once

#include "dptrain/model/gpt.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

class Decoder {
  public:
    virtual ~Decoder() = default;
    // A key/value cache for `slots` sequences, max_rows rows a call; allocated once.
    virtual void reserve(int slots, int max_rows) = 0;
    // The CPU keeps the pointer (keep them alive and unchanged); a GPU copies them now.
    virtual void set_params(const float* params) = 0;
    // Row i: token tok[i] at position pos[i] of slot[i], in position order (0 starts afresh). logits
    // (n, V), or out_rows' (n_out, V), the same bits whatever else shares the call. Host memory.
    virtual void decode(const int* tok, const int* slot, const int* pos, int n, float* logits,
                        const int* out_rows = nullptr, int n_out = 0) = 0;
    // "the CPU", "the CPU, bf16 weights" or "GPU 0", for banners.
    virtual std::string where() const = 0;
};

// A run of this many rows of one slot (a prompt) gets one sgemm (cuBLAS call) of its own, shorter
// runs go row by row. Why: docs/SERVING.md, "Note [decode products]".
constexpr int kDecodePromptRows = 32;
// Those runs among n rows, as [begin, end) ranges in order (runs cleared first).
void decode_prompt_runs(const int* slot, int n, std::vector<std::pair<int, int>>& runs);

// A token's log-probability under the model (its softmax at temperature 1, what scoring asks for)
// and the most likely tokens at its place, most likely first.
struct TokenLogprob {
    int token = 0;
    float logprob = 0;
    std::vector<std::pair<int, float>> top;
};
// Of row `logits` (V values): token's, and the `top` most likely among the first `drawable` ids.
TokenLogprob token_logprob(const float* logits, int V, int drawable, int token, int top);

// GptDecoder or LlamaDecoder by cfg.arch; weights bf16: the products read a bf16 copy of the weights.
std::unique_ptr<Decoder> make_cpu_decoder(const GptConfig& cfg, Precision weights = Precision::fp32);

} // namespace dptrain
