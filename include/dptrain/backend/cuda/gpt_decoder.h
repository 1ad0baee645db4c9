// The GPU's Decoder for a GPT: the CPU GptDecoder's ops in the same order on the device, with its
// own parameters, key/value cache and stream. Built only with CUDA.
// Not for: training (cuda/gpt.h), or choosing the rows of a call.
#pragma once

#include "dptrain/backend/cuda/decoder.h"
#include "dptrain/model/gpt.h"

#include <vector>

namespace dptrain {

class CudaGptDecoder : public CudaDecoder {
  public:
    // Parameters' room allocated here, the cache by reserve. Each call makes `device` current
    // first: serving decodes on a thread of its own.
    CudaGptDecoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);

    void reserve(int slots, int max_rows) override;

  private:
    const float* layers(int n) override;

    GptConfig cfg_;
    size_t wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
    std::vector<Gpt::LayerViews> lv_;
    // reserve's (in cache_):
    float *k_ = nullptr, *v_ = nullptr;   // (L, slots, T, C) each
    float *x_ = nullptr, *ln_ = nullptr, *y_ = nullptr, *qkv_ = nullptr, *fc_ = nullptr;  // (R, C|3C|4C)
    float *mean_ = nullptr, *rstd_ = nullptr;                                            // (R)
};

} // namespace dptrain
