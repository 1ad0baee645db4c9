// The GPU's Decoder for a GPT: the CPU GptDecoder's ops in the same order on the device, with its
// own parameters, key/value cache and stream. Built only with CUDA.
// Not for: training (cuda/gpt.h), or choosing the rows of a call.
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <memory>
#include <utility>
#include <vector>

namespace dptrain {

class CudaGptDecoder : public Decoder {
  public:
    // Parameters' room allocated here, the cache by reserve. Each call makes `device` current
    // first: serving decodes on a thread of its own.
    CudaGptDecoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);
    ~CudaGptDecoder() override;
    CudaGptDecoder(const CudaGptDecoder&) = delete;
    CudaGptDecoder& operator=(const CudaGptDecoder&) = delete;

    void reserve(int slots, int max_rows) override;
    // Copied (and rounded) before it returns: the caller may refill them at once.
    void set_params(const float* params) override;
    // Decoder's contract; checked as on the CPU before anything is queued.
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows = nullptr,
                int n_out = 0) override;
    std::string where() const override;

  private:
    // GptDecoder::product's rule, on the device.
    void product(float* out, const float* inp, size_t w, size_t b, int n, int C, int OC);
    // n floats kept in `into`; `need` names the whole want on failure.
    float* alloc(size_t n, std::vector<void*>& into, const std::string& need);
    void free_cache();

    GptConfig cfg_;
    int device_;
    size_t P_ = 0, wte_ = 0, wpe_ = 0, lnfw_ = 0, lnfb_ = 0;
    std::vector<Gpt::LayerViews> lv_;
    std::unique_ptr<cuda::Context> ctx_;  // stream and cuBLAS (a prompt's products)
    std::vector<void*> allocs_;           // the parameters' buffers
    float* params_ = nullptr;             // (P)
    bf16* w16_ = nullptr;                 // bf16 weights: (P) the parameters rounded
    float* wide_ = nullptr;               // and a layer's largest matrix (4C x C) widened for cuBLAS
    std::vector<void*> cache_;            // reserve's buffers:
    float *k_ = nullptr, *v_ = nullptr;   // (L, slots, T, C) each
    float *x_ = nullptr, *ln_ = nullptr, *y_ = nullptr, *qkv_ = nullptr, *fc_ = nullptr;  // (R, C|3C|4C)
    float *mean_ = nullptr, *rstd_ = nullptr, *logits_ = nullptr;                        // (R), (R, V)
    int* rows_dev_ = nullptr;  // the rows' tokens, slots and positions (3R)
    std::vector<int> ints_;    // their host copy
    int slots_ = 0, rows_ = 0;
    std::vector<std::pair<int, int>> prompts_;  // decode_prompt_runs of the call's rows
};

std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);

} // namespace dptrain
