// What the CPU's decoders (GptDecoder, LlamaDecoder) share: the caller's parameters and their bf16
// copy, the products by prompt runs, and the head over the rows asked for.
// Not for: a model's layers (each decoder's decode) or the GPU's decoders.
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/model/decoder.h"

#include <utility>
#include <vector>

namespace dptrain {

class CpuDecoder : public Decoder {
  public:
    void set_params(const float* params) override;  // the caller's buffer, kept (not copied)
    std::string where() const override { return w16_.empty() ? "the CPU" : "the CPU, bf16 weights"; }

  protected:
    // num_params: the layout's; widest: the largest matrix a product widens (bf16 only).
    CpuDecoder(size_t num_params, size_t widest, Precision weights);
    // Checks the call's rows (tokens < V, slots < slots_, positions < T) and finds its prompt runs.
    void begin_call(const int* tok, const int* slot, const int* pos, int n, int V, int T);
    // out (n, OC) = inp (n, C) @ params[w]^T + bias (null: none), by the runs of prompts_.
    void product(float* out, const float* inp, size_t w, const float* bias, int n, int C, int OC);
    // logits (n, V) of the n normed rows, or out_rows' (n_out, V), through the head at `head`;
    // spare (n, C) holds the rows picked.
    void head(float* logits, const float* normed, float* spare, int n, const int* out_rows, int n_out, size_t head,
              int C, int V) const;

    const float* params_ = nullptr;  // set_params'
    std::vector<bf16> w16_;          // bf16 weights: (P) the parameters rounded, at the same offsets
    std::vector<float> wide_;        // and the largest matrix widened for sgemm
    int slots_ = 0, rows_ = 0;
    std::vector<std::pair<int, int>> prompts_;  // decode_prompt_runs of the call's rows
};

} // namespace dptrain
