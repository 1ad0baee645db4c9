// Incremental decoding behind one interface, CPU (GptDecoder) or GPU (CudaGptDecoder), each with its
// own key/value cache. Not for: training (Model), or choosing the rows of a call.
#pragma once

#include "dptrain/core/token_draw.h"
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
    // decode's call, then out row r's next token by draws[r] (core/token_draw.h) in ids[r] (-1
    // where draws[r] asks none): the ids cpu::pick_token takes from decode's logits, though a GPU
    // picks them where the logits are and hands back only the ids. logits (null: not wanted) gets
    // decode's. out_rows null: every row is an out row.
    virtual void decode_pick(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out,
                             const TokenDraw* draws, int* ids, float* logits = nullptr);
    // "the CPU", "the CPU, bf16 weights" or "GPU 0", for banners.
    virtual std::string where() const = 0;
    virtual int vocab_size() const = 0;  // a logits row's values
    // A GPU's decoder replays one CUDA graph a row count; off, it launches kernel by kernel (a
    // benchmark's reference). False: this decoder has no graphs (the CPU's).
    virtual bool set_graphs(bool on) {
        (void)on;
        return false;
    }

  private:
    std::vector<float> pick_logits_, pick_probs_;  // decode_pick's on the host, grown once
    std::vector<int> pick_order_;
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
