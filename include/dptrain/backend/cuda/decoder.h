// What the GPU's decoders (CudaGptDecoder, CudaLlamaDecoder) share, as CpuDecoder does on the CPU:
// the parameters and their bf16 copy on the device, the rows' way in with the CPU's checks, the
// products by prompt runs and the head over the rows asked for. Built only with CUDA.
// Not for: a model's layers (each decoder's decode) or training (cuda/gpt.h, cuda/llama.h).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/model/decoder.h"
#include "dptrain/model/gpt.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

class CudaDecoder : public Decoder {
  public:
    ~CudaDecoder() override;
    CudaDecoder(const CudaDecoder&) = delete;
    CudaDecoder& operator=(const CudaDecoder&) = delete;

    // Copied (and rounded) before it returns: the caller may refill them at once.
    void set_params(const float* params) override;
    std::string where() const override;

  protected:
    // `model` names it in messages ("GPT", "Llama"); P parameters on `device`; in bf16 their rounded
    // copy and room to widen the largest matrix a product reads (`widest` values).
    CudaDecoder(const char* model, size_t P, size_t widest, int device, Precision weights);
    // n floats kept in `into`; `need` names the whole want on failure.
    float* alloc(size_t n, std::vector<void*>& into, const std::string& need);
    // reserve's start: checks the sizes, frees the last reservation's buffers (cache_) and takes
    // room for the rows' ids and the head's logits, R rows of V. A reservation that fails later
    // calls free_cache: it leaves none, and decode refuses rows until the next.
    void begin_reserve(int slots, int max_rows, int V, const std::string& need);
    void free_cache();
    void end_reserve(int slots, int max_rows);  // after the model's buffers: zeroes nothing itself
    // The CPU decoders' checks and messages, then the rows' tokens, slots and positions copied to
    // the device (d_tok(), d_slot(), d_pos()) and the prompt runs found. False: no rows.
    bool begin_call(const int* tok, const int* slot, const int* pos, int n, int V, int T, const int* out_rows,
                    int n_out);
    const int* d_tok() const { return rows_dev_; }
    const int* d_slot() const { return rows_dev_ + n_; }
    const int* d_pos() const { return rows_dev_ + 2 * n_; }
    // out (n, OC) = inp (n, C) @ params[w]^T + bias (null: none). A prompt's run is one cuBLAS call
    // of its own, other rows go through matmul_forward_rows: a row's bits stay its own. Why:
    // docs/SERVING.md, "Note [decode products]".
    void product(float* out, const float* inp, size_t w, const float* bias, int n, int C, int OC);
    // logits (host; n or n_out rows of V) of the normed rows (or out_rows'), through the head at
    // `head`, row by row so that asking for fewer rows does not change theirs; spare (n, C) holds
    // the rows picked. Waits for the stream.
    void head(float* logits, const float* normed, float* spare, int n, const int* out_rows, int n_out, size_t head,
              int C, int V);

    int device_;
    size_t P_ = 0;
    std::unique_ptr<cuda::Context> ctx_;  // stream and cuBLAS (a prompt's products)
    float* params_ = nullptr;             // (P)
    std::vector<void*> cache_;            // reserve's buffers, the model's own among them
    int slots_ = 0, rows_ = 0;

  private:
    std::vector<void*> allocs_;  // the parameters' buffers
    bf16* w16_ = nullptr;        // bf16 weights: (P) the parameters rounded
    float* wide_ = nullptr;      // and the largest matrix widened for cuBLAS
    float* logits_ = nullptr;    // (R, V)
    int* rows_dev_ = nullptr;    // the call's tokens, slots and positions (3n of 3R)
    int n_ = 0;                  // the call's rows
    bool params_set_ = false;
    std::vector<int> ints_;      // their host copy
    std::vector<std::pair<int, int>> prompts_;  // decode_prompt_runs of the call's rows
};

// The GPU's decoder of cfg.arch's kind (CudaGptDecoder or CudaLlamaDecoder) on `device`.
std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);

} // namespace dptrain
