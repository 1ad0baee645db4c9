// The CPU's Decoder for a Llama: a key/value cache of the key/value heads only (grouped-query
// attention's saving), rotary positions applied as each row is decoded.
// Not for: training (model/llama.h), or choosing the rows of a call (infer/completions.cpp).
#pragma once

#include "dptrain/model/cpu_decoder.h"
#include "dptrain/model/llama.h"

#include <vector>

namespace dptrain {

class LlamaDecoder : public CpuDecoder {
  public:
    // weights bf16: the products read a copy rounded at each set_params; the rest stays fp32.
    explicit LlamaDecoder(const GptConfig& cfg, Precision weights = Precision::fp32);

    void reserve(int slots, int max_rows) override;
    // Decoder's contract; in fp32 Llama::forward's model, each position computed once.
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows = nullptr,
                int n_out = 0) override;
    int vocab_size() const override { return cfg_.vocab_size; }
    // Bytes of the key/value cache reserve allocated.
    size_t cache_bytes() const { return (kcache_.size() + vcache_.size()) * sizeof(float); }

  private:
    GptConfig cfg_;  // resolved
    int hs_ = 0, qkv_w_ = 0;
    size_t wte_ = 0, lnfw_ = 0, head_ = 0;
    std::vector<Llama::LayerViews> lv_;
    std::vector<float> cos_, sin_;        // (T, hs/2)
    std::vector<float> kcache_, vcache_;  // (L, slots, T, KV * hs) each
    std::vector<float> x_, ln_, y_;       // (rows, C) each
    std::vector<float> qkv_, gu_, swi_;   // (rows, (NH + 2 KV) hs), (rows, 2F), (rows, F)
    std::vector<float> rstd_;             // (rows)
};

} // namespace dptrain
