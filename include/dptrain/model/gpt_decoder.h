// The CPU's Decoder for a GPT: a key/value cache over Gpt's parameter views and CPU ops.
// Not for: training (model/gpt.h), or choosing the rows of a call (infer/completions.cpp).
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <utility>
#include <vector>

namespace dptrain {

class GptDecoder : public Decoder {
  public:
    // weights bf16: the products read a copy rounded at each set_params; the rest stays fp32.
    explicit GptDecoder(const GptConfig& cfg, Precision weights = Precision::fp32);

    void reserve(int slots, int max_rows) override;
    void set_params(const float* params) override;  // the caller's buffer, kept (not copied)
    // Decoder's contract; in fp32 Gpt::forward's model, each position computed once.
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows = nullptr,
                int n_out = 0) override;
    std::string where() const override { return w16_.empty() ? "the CPU" : "the CPU, bf16 weights"; }

  private:
    // out (n, OC) = inp (n, C) @ weight^T + bias at offsets w and b, by the runs of prompts_.
    void product(float* out, const float* inp, size_t w, size_t b, int n, int C, int OC);
    // logits (m, V) of m rows of the final LayerNorm's output, one row at a time.
    void head(float* logits, const float* rows, int m) const;

    GptConfig cfg_;
    size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
    std::vector<Gpt::LayerViews> lv_;
    const float* params_ = nullptr;  // set_params'
    std::vector<bf16> w16_;          // bf16 weights: (P) the parameters rounded, at the same offsets
    std::vector<float> wide_;        // and a layer's largest matrix (4C x C) widened for sgemm
    std::vector<float> kcache_, vcache_;  // (L, slots, T, C) each
    std::vector<float> x_, ln_, y_;       // (rows, C) each
    std::vector<float> qkv_, fc_;         // (rows, 3C), (rows, 4C)
    std::vector<float> mean_, rstd_;      // (rows)
    int slots_ = 0, rows_ = 0;
    std::vector<std::pair<int, int>> prompts_;  // decode_prompt_runs of the call's rows
};

} // namespace dptrain
