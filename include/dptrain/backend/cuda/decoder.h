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

// driver_types.h's own spelling, as ops.h does for the stream.
struct CUgraphExec_st;
typedef struct CUgraphExec_st* cudaGraphExec_t;

namespace dptrain {

class CudaDecoder : public Decoder {
  public:
    ~CudaDecoder() override;
    CudaDecoder(const CudaDecoder&) = delete;
    CudaDecoder& operator=(const CudaDecoder&) = delete;

    // Copied (and rounded) before it returns: the caller may refill them at once.
    void set_params(const float* params) override;
    // Decoder's contract; checked as on the CPU before anything is queued. A call of at most one
    // row a slot and no prompt run (kDecodePromptRows) replays its row count's CUDA graph of the
    // layers, captured at its first call: one launch a token instead of one a kernel.
    void decode(const int* tok, const int* slot, const int* pos, int n, float* logits, const int* out_rows = nullptr,
                int n_out = 0) final;
    // The ids picked on the device (cuda::pick_tokens); a row cut wider than it sorts, on the host.
    void decode_pick(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out,
                     const TokenDraw* draws, int* ids, float* logits = nullptr) final;
    std::string where() const override;
    int vocab_size() const override { return V_; }
    bool set_graphs(bool on) override {
        graphs_on_ = on;
        return true;
    }
    int graphs_captured() const { return captured_; }

  protected:
    // `model` names it in messages ("GPT", "Llama"); P parameters on `device`; in bf16 their rounded
    // copy and room to widen the largest matrix a product reads (`widest` values). A call's rows
    // hold positions below T, C wide, and the head at `head` makes V logits of each.
    CudaDecoder(const char* model, size_t P, size_t widest, int device, Precision weights, int T, int C, int V);
    void set_head(size_t head) { head_at_ = head; }
    // The model's layers over the call's n rows (d_tok(), d_slot(), d_pos()), from the tokens to the
    // final norm, queued on the stream and nothing else (a graph captures them); returns the normed
    // rows (n, C), the same buffer every call.
    virtual const float* layers(int n) = 0;
    // n floats kept in `into`; `need` names the whole want on failure.
    float* alloc(size_t n, std::vector<void*>& into, const std::string& need);
    // reserve's start: checks the sizes, frees the last reservation's buffers (cache_) and graphs,
    // and takes room for the rows' ids, the head's logits (R rows of V) and the picks. A reservation
    // that fails later calls free_cache: it leaves none, and decode refuses rows until the next.
    void begin_reserve(int slots, int max_rows, const std::string& need);
    void free_cache();
    void end_reserve(int slots, int max_rows);  // after the model's buffers: zeroes nothing itself
    const int* d_tok() const { return rows_dev_; }
    const int* d_slot() const { return rows_dev_ + n_; }
    const int* d_pos() const { return rows_dev_ + 2 * n_; }
    // out (n, OC) = inp (n, C) @ params[w]^T + bias (null: none). A prompt's run is one cuBLAS call
    // of its own, other rows go through matmul_forward_rows: a row's bits stay its own. Why:
    // docs/SERVING.md, "Note [decode products]".
    void product(float* out, const float* inp, size_t w, const float* bias, int n, int C, int OC);

    int device_;
    size_t P_ = 0;
    std::unique_ptr<cuda::Context> ctx_;  // stream and cuBLAS (a prompt's products)
    float* params_ = nullptr;             // (P)
    std::vector<void*> cache_;            // reserve's buffers, the model's own among them
    int slots_ = 0, rows_ = 0;

  private:
    // The CPU decoders' checks and messages, then the rows' tokens, slots and positions copied to
    // the device and the prompt runs found. False: no rows.
    bool begin_call(const int* tok, const int* slot, const int* pos, int n, const int* out_rows, int n_out);
    // layers(n), or its graph's replay (captured first where none is).
    const float* run_layers(int n);
    void free_graphs();
    // The head over the normed rows (or out_rows'), row by row so that asking for fewer rows does
    // not change theirs: logits_ (m, V) on the device, m the rows asked for.
    int head(const float* normed, int n, const int* out_rows, int n_out);

    int T_, C_, V_;
    size_t head_at_ = 0;
    std::vector<void*> allocs_;  // the parameters' buffers
    bf16* w16_ = nullptr;        // bf16 weights: (P) the parameters rounded
    float* wide_ = nullptr;      // and the largest matrix widened for cuBLAS
    float* logits_ = nullptr;    // (R, V)
    float* gather_ = nullptr;    // (R, C): the out rows' normed rows
    int* rows_dev_ = nullptr;    // the call's tokens, slots and positions (3n of 3R)
    TokenDraw* draws_dev_ = nullptr;  // (R)
    int* ids_dev_ = nullptr;          // (R)
    int n_ = 0;                  // the call's rows
    bool params_set_ = false;
    std::vector<int> ints_;      // their host copy
    std::vector<std::pair<int, int>> prompts_;  // decode_prompt_runs of the call's rows
    std::vector<float> host_row_, probs_;       // a row picked on the host, and its scratch (V)
    std::vector<int> order_;
    bool graphs_on_ = true;
    int captured_ = 0;
    std::vector<cudaGraphExec_t> graphs_;  // by row count, up to slots_ (null: none yet)
    const float* normed_ = nullptr;        // what the graphs' layers return
};

// The GPU's decoder of cfg.arch's kind (CudaGptDecoder or CudaLlamaDecoder) on `device`.
std::unique_ptr<Decoder> make_cuda_decoder(const GptConfig& cfg, int device, Precision weights = Precision::fp32);

} // namespace dptrain
