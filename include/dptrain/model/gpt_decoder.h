// The CPU's Decoder for a GPT: a key/value cache over Gpt's parameter views and CPU ops.
// Not for: training (model/gpt.h), or choosing the rows of a call (infer/completions.cpp).
#pragma once

#include "dptrain/model/cpu_decoder.h"
#include "dptrain/model/gpt.h"

#include <vector>

namespace dptrain {

class GptDecoder : public CpuDecoder {
  public:
    // weights bf16: the products read a copy rounded at each set_params; the rest stays fp32.
    explicit GptDecoder(const GptConfig& cfg, Precision weights = Precision::fp32);

    void reserve(int slots, int max_rows) override;
    // Decoder's contract; in fp32 Gpt::forward's model, each position computed once.
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows = nullptr,
                int n_out = 0) override;
    int vocab_size() const override { return cfg_.vocab_size; }

  private:
    GptConfig cfg_;
    size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
    std::vector<Gpt::LayerViews> lv_;
    std::vector<float> kcache_, vcache_;  // (L, slots, T, C) each
    std::vector<float> x_, ln_, y_;       // (rows, C) each
    std::vector<float> qkv_, fc_;         // (rows, 3C), (rows, 4C)
    std::vector<float> mean_, rstd_;      // (rows)
};

} // namespace dptrain
