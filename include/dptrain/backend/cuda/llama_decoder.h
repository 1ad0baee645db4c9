// The GPU's Decoder for a Llama: the CPU LlamaDecoder's ops in the same order on the device, a
// key/value cache of the key/value heads only. Built only with CUDA.
// Not for: training (cuda/llama.h), or choosing the rows of a call.
#pragma once

#include "dptrain/backend/cuda/decoder.h"
#include "dptrain/model/llama.h"

#include <vector>

namespace dptrain {

class CudaLlamaDecoder : public CudaDecoder {
  public:
    // Parameters' room and the rotation's angles allocated here, the cache by reserve.
    CudaLlamaDecoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);
    ~CudaLlamaDecoder() override;

    void reserve(int slots, int max_rows) override;

  private:
    const float* layers(int n) override;

    GptConfig cfg_;  // resolved (llama_resolved)
    int hs_ = 0, qkv_w_ = 0;
    size_t wte_ = 0, lnfw_ = 0;
    std::vector<Llama::LayerViews> lv_;
    std::vector<void*> fixed_;                   // the angle table's buffers
    float *cos_ = nullptr, *sin_ = nullptr;      // (T, hs/2)
    // reserve's (in cache_):
    float *k_ = nullptr, *v_ = nullptr;          // (L, slots, T, KV hs) each
    float *x_ = nullptr, *ln_ = nullptr, *y_ = nullptr, *qkv_ = nullptr;  // (R, C|C|C|QKV)
    float *gu_ = nullptr, *swi_ = nullptr, *rstd_ = nullptr;             // (R, 2F), (R, F), (R)
};

} // namespace dptrain
