// CUDA twins of cpu/ops.h and optim.h: same names, arguments and shapes, device pointers, a trailing
// stream; no CUDA headers needed. Not for: allocating, synchronising or host copies.
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/core/token_draw.h"

#include <cstddef>
#include <string>
#include <vector>

// driver_types.h's own spelling: an identical typedef may repeat.
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct cublasContext;
struct cublasLtContext;

namespace dptrain::cuda {

// Visible CUDA devices; 0 with the reason in *why. Never throws.
int device_count(std::string* why = nullptr);

// bind_device's UserError text (pure, for tests).
std::string device_shortage_message(int local_size, int gpus, const std::string& visible, const std::string& why);

// Makes GPU local_rank of this host's local_size ranks current; UserError with more ranks than GPUs.
int bind_device(int local_rank, int local_size);

struct LtPlans;  // cuBLASLt algorithms by GEMM shape (matmul.cu)

// One device's stream, cuBLAS(Lt) handles, workspace and scratch; none process-wide, so tests and
// devices stay independent. Construct after bind_device.
class Context {
  public:
    explicit Context(int device);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    int device() const { return device_; }
    cudaStream_t stream() const { return stream_; }
    cublasContext* blas() const { return blas_; }
    // Our workspace on our stream, cuBLAS's pool elsewhere: never two streams on one workspace.
    void bind_blas(cudaStream_t stream);

    // cuBLASLt takes the workspace per call, so fused epilogues run only on the context's stream.
    cublasLtContext* lt() const { return lt_; }
    void* workspace() const { return workspace_; }
    size_t workspace_bytes() const { return workspace_bytes_; }
    LtPlans* lt_plans() const { return lt_plans_; }
    // Off: bias, bias gradient and GELU as separate passes (tests run both).
    void set_epilogues(bool on) { epilogues_ = on; }
    bool epilogues() const { return epilogues_; }
    // >= n floats, one stream at a time. Growing waits for the device: models reserve at construction.
    float* reduction_scratch(size_t n);
    // Which path ran, per kind of GEMM.
    long fused_bias_gemms() const { return fused_bias_gemms_; }
    long unfused_bias_gemms() const { return unfused_bias_gemms_; }
    void count_bias_gemm(bool fused) { ++(fused ? fused_bias_gemms_ : unfused_bias_gemms_); }
    long direct_out16_gemms() const { return direct_out16_gemms_; }
    long staged_out16_gemms() const { return staged_out16_gemms_; }
    void count_out16_gemm(bool direct) { ++(direct ? direct_out16_gemms_ : staged_out16_gemms_); }
    long fused_bias_grads() const { return fused_bias_grads_; }
    long unfused_bias_grads() const { return unfused_bias_grads_; }
    void count_bias_grad(bool fused) { ++(fused ? fused_bias_grads_ : unfused_bias_grads_); }
    long fused_gelu_gemms() const { return fused_gelu_gemms_; }
    long unfused_gelu_gemms() const { return unfused_gelu_gemms_; }
    void count_gelu_gemm(bool fused) { ++(fused ? fused_gelu_gemms_ : unfused_gelu_gemms_); }
    long fused_dgelu_gemms() const { return fused_dgelu_gemms_; }
    long unfused_dgelu_gemms() const { return unfused_dgelu_gemms_; }
    void count_dgelu_gemm(bool fused) { ++(fused ? fused_dgelu_gemms_ : unfused_dgelu_gemms_); }

  private:
    int device_ = 0;
    cudaStream_t stream_ = nullptr;
    cublasContext* blas_ = nullptr;
    cublasLtContext* lt_ = nullptr;
    LtPlans* lt_plans_ = nullptr;
    bool epilogues_ = true;
    long fused_bias_gemms_ = 0, unfused_bias_gemms_ = 0, direct_out16_gemms_ = 0, staged_out16_gemms_ = 0;
    long fused_bias_grads_ = 0, unfused_bias_grads_ = 0, fused_gelu_gemms_ = 0, unfused_gelu_gemms_ = 0;
    long fused_dgelu_gemms_ = 0, unfused_dgelu_gemms_ = 0;
    float* reduction_ = nullptr;
    size_t reduction_n_ = 0;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    cudaStream_t blas_stream_ = nullptr;  // the stream blas_ is bound to now
};

// Page-locks [p, p + bytes) until destroyed; if the driver refuses, copies still work and why() says.
class PinnedHost {
  public:
    PinnedHost(void* p, size_t bytes);
    ~PinnedHost();
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;
    bool ok() const { return ok_; }
    const std::string& why() const { return why_; }

  private:
    void* p_ = nullptr;
    bool ok_ = false;
    std::string why_;
};

// When resident, forward reads device_params(), not the host pointer, and backward leaves the
// gradients on the device for DeviceStep.
class Resident {
  public:
    virtual ~Resident() = default;
    void set_resident(bool on) { resident_ = on; }
    virtual float* device_params() = 0;
    virtual float* device_grads() = 0;
    virtual Context& context() = 0;
    // bf16 (else null): the parameters rounded for the matmuls. set_rounded_current(true): an
    // update wrote them, so the next forward need not.
    virtual bf16* rounded_params() = 0;
    virtual void set_rounded_current(bool current) = 0;

    // --grad-accum: the next backward writes the gradients, later ones add until the next call.
    // Before any call every backward writes.
    void begin_gradients() { backwards_ = 0; }

  protected:
    // Once per backward: does it add to the device gradients?
    bool backward_adds() {
        const bool adds = resident_ && backwards_ > 0;
        if (backwards_ >= 0) ++backwards_;
        return adds;
    }
    bool resident_ = false;

  private:
    long backwards_ = -1;  // -1: begin_gradients never called
};

// ---- Ops (llm.c names: B batch, T time, C channels, NH heads)
// bf16 forms: unless said otherwise, the fp32 form on the widened inputs, rounded, bit for bit.
// accumulate false: weight and bias gradients written (=), as adding onto zeros would give.

// out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC, or null). fp32, no TF32.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                    Context& ctx, cudaStream_t stream);
// A row's bits independent of the call's other rows (decoding), where inp starts on 16 bytes
// (every caller's rows do) or C is not a multiple of 8: docs/GPU.md, "Note [matmul_rows order]".
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream);
// bf16 weights, widened as read: the fp32 form's bits.
void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream);
// dinp (B, C) = dout @ weight (null: skipped); dweight (OC, C) += dout^T @ inp; dbias (OC) +=
// column sums of dout in a fixed order (null: skipped).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream,
                     bool accumulate = true);
// Floats of reduction_scratch for `sums` (1 or 2) column sums over N rows of C.
size_t column_sums_scratch(long N, int C, int sums);
// out (B, OC) fp32 = inp @ weight^T + bias (fp32 or null); docs/GPU.md, "The bias in the GEMM".
void matmul_forward_bf16(float* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         Context& ctx, cudaStream_t stream);
// out (B, OC) rounded; staging (B * OC floats) only with a bias where cuBLASLt has no bf16 output.
// ld: out's row stride (0: OC), > OC only without a bias (padded logits).
void matmul_forward_bf16_out(bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                             float* staging, Context& ctx, cudaStream_t stream, int ld = 0);
// bf16 operands, fp32 results; dbias in the epilogue or as column sums (other orders). ld: dout's
// row stride (0: OC), > OC only without dbias.
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                          const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld = 0,
                          bool accumulate = true);
// dinp (B, C) rounded. cuBLAS picks its kernel by output type: within fp32 tolerance, not bit for bit.
void matmul_backward_bf16_out(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                              const bf16* weight, int B, int C, int OC, Context& ctx, cudaStream_t stream, int ld = 0,
                              bool accumulate = true);
// x = inp @ weight^T + bias (fp32); pre (B, OC) = x rounded, out (B, OC) = GELU(x) rounded.
// staging (B * OC floats): the unfused path's. docs/GPU.md, "GELU in the GEMM".
void matmul_forward_bf16_gelu(bf16* pre, bf16* out, const bf16* inp, const bf16* weight, const float* bias, int B,
                              int C, int OC, float* staging, Context& ctx, cudaStream_t stream);
// The matmul after GELU, with GELU's backward: dpre (B, C) = (dout @ weight) * GELU'(pre).
// staging (B * C floats): the unfused path's. dpre must not overlap dout, inp, pre or staging.
void matmul_backward_bf16_gelu(bf16* dpre, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                               const bf16* weight, const bf16* pre, int B, int C, int OC, float* staging, Context& ctx,
                               cudaStream_t stream, bool accumulate = true);
// dst (n) = src rounded: to_bf16's bits (bf16.h), NaN kept.
void to_bf16(bf16* dst, const float* src, size_t n, cudaStream_t stream);
// dst (n) = src rounded to bf16 and kept in fp32: cpu::round_bf16's bits; dst may be src.
void round_bf16(float* dst, const float* src, size_t n, cudaStream_t stream);
// dst (n) = src widened to fp32 (exact).
void from_bf16(float* dst, const bf16* src, size_t n, cudaStream_t stream);

// Elementwise over N values; backward writes dinp = dout * f'(inp). GELU: tanh approximation.
void relu_forward(float* out, const float* inp, long N, cudaStream_t stream);
void relu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream);
void gelu_forward(float* out, const float* inp, long N, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream);
// pre = inp rounded, out = GELU(inp) rounded, as the epilogue. Backward's dinp: its own buffer.
void gelu_forward_keep_bf16(bf16* pre, bf16* out, const float* inp, long N, cudaStream_t stream);
void gelu_backward_bf16(bf16* dinp, const bf16* inp, const float* dout, long N, cudaStream_t stream);

// losses (B), stats (B, 2) (max, 1 / sum), argmax (B or null: first largest) from logits (B, V),
// targets (B). docs/GPU.md, "The loss keeps no probabilities".
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V, cudaStream_t stream);
// dlogits (B, V) = (softmax - onehot(targets)) * scale, from stats; may be logits (in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V, cudaStream_t stream);
// dlogits its own buffer; rows `stride` (>= V) apart, values past V untouched.
void softmax_crossentropy_forward_bf16(float* losses, float* stats, int* argmax, const bf16* logits,
                                       const int* targets, int B, int V, int stride, cudaStream_t stream);
void softmax_crossentropy_backward_bf16(bf16* dlogits, const bf16* logits, const float* stats, const int* targets,
                                        float scale, int B, int V, int stride, cudaStream_t stream);

// out (B,T,C) = wte (V,C)[inp] + wpe (maxT,C)[t]; inp (B,T) with row stride `stride` (>= T). wpe
// null (a Llama's, positions rotated in attention): wte's rows alone, here and in decode and backward.
void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream);
// Decoding's rows: out (n, C), row i = wte[tok[i]] + wpe[pos[i]]; tok, pos on the device.
void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C,
                    cudaStream_t stream);
// dwte[inp] += dout, dwpe[t] += dout in the CPU's order, no atomics: its bits.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C,
                      Context& ctx, cudaStream_t stream);
// Floats of reduction_scratch encoder_backward of BT positions needs (CUB's sort).
size_t encoder_backward_scratch(long BT);

// Llama ops, twins of cpu/ops.h's (rmsnorm.cu, rope.cu, activation.cu). The norms' weight
// gradients are fixed-order column sums as layernorm_backward's (accumulate false: written).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C, float eps,
                     cudaStream_t stream);
void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                              const float* weight, long N, int C, float eps, cudaStream_t stream);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C, Context& ctx, cudaStream_t stream, bool accumulate = true);
// cos, sin: device copies of the (T, hs/2) angle table.
void rope_qkv_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T, int NH, int KV,
                      int hs, cudaStream_t stream);
void rope_qkv_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T, int NH,
                       int KV, int hs, cudaStream_t stream);
// Decoding: cpu::rope_decode's twin, pos on the device; q and k heads of each row rotated in place.
void rope_decode(float* qkv, const int* pos, const float* cos, const float* sin, int n, int NH, int KV, int hs,
                 cudaStream_t stream);
void swiglu_forward(float* out, const float* inp, long N, int F, cudaStream_t stream);
void swiglu_backward(float* dinp, const float* inp, const float* dout, long N, int F, cudaStream_t stream);

// out (N, C), mean and rstd (N) kept for backward; eps 1e-5 as the CPU.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       long N, int C, cudaStream_t stream);
void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, long N, int C, cudaStream_t stream);
// res = a + b, then layernorm_forward of res, in one launch (the two ops' bits).
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C, cudaStream_t stream);
void residual_layernorm_forward_bf16(float* res, bf16* out, float* mean, float* rstd, const float* a, const float* b,
                                     const float* weight, const float* bias, long N, int C, cudaStream_t stream);
// dinp (N, C) += always (the residual stream); dweight, dbias (C) += column sums in a fixed order.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate = true);
// From a bf16 dout (matmul_backward_bf16_out's).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const bf16* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate = true);
// Also dinp's new values rounded into dinp16 (N, C).
void layernorm_backward_bf16(float* dinp, bf16* dinp16, float* dweight, float* dbias, const bf16* dout,
                             const float* inp, const float* weight, const float* mean, const float* rstd, long N,
                             int C, Context& ctx, cudaStream_t stream, bool accumulate = true);

// inp (B,T,3C) = q,k,v; out (B,T,C); att (B,NH,T,T) keeps the softmax. tf32: TF32 operands, fp32
// sums and softmax.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32, Context& ctx,
                       cudaStream_t stream);
// dinp (B,T,3C) written (=); datt (B,NH,T,T) scratch.
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B, int T,
                        int C, int NH, bool tf32, Context& ctx, cudaStream_t stream);
// The longest context attention_decode takes: its scores in 48 KiB of shared memory; and the
// widest head (its eight warps' partial outputs, eight values a lane).
constexpr int kMaxDecodeContext = 12284;
constexpr int kMaxDecodeHead = 256;
// cpu::attention_decode's twin; slot and pos on the device. T <= kMaxDecodeContext, C / NH <=
// kMaxDecodeHead.
void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH, cudaStream_t stream);
// cpu::attention_decode_grouped's twin: qkv (n, (NH+2KV)*hs), caches (slots, T, KV*hs), out (n, NH*hs);
// attention_decode is its KV = NH case.
void attention_decode_grouped(float* out, float* kcache, float* vcache, const float* qkv, const int* slot,
                              const int* pos, int n, int T, int NH, int KV, int hs, cudaStream_t stream);

// bf16 operands, fp32 sums and softmax, cpu::flash_attention_forward's tiles. lse (B,NH,T).
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH,
                             cudaStream_t stream);
// q, k, v already bf16; out16 (B,T,C) = out rounded; out may be null. inp (and dout below) must be
// 16-byte aligned: the tiles are copied in 16-byte pieces.
void flash_attention_forward_bf16(float* out, bf16* out16, float* lse, const bf16* inp, int B, int T, int C, int NH,
                                  cudaStream_t stream);
// Shared memory per block at this head size (a GPU's opt-in limit must reach it).
size_t flash_attention_shared_bytes(int C, int NH);
// dinp (B,T,3C) written (=); delta (B,NH,T) scratch.
void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH, cudaStream_t stream);
// dout and out in bf16, as FlashAttention-2 (only delta sees it); dinp rounded.
void flash_attention_backward_bf16(bf16* dinp, float* delta, const bf16* dout, const bf16* inp, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH, cudaStream_t stream);

// out = a + b over N values; backward: da += dout, db += dout.
// ids (n) of the rows of logits (n, stride) by draws (n), all on the device: cpu::pick_token's
// rule and ids; a row whose top_k exceeds 2,048, or whose nucleus is wider than its 2,048 most
// likely ids, gets kPickOnHost (its caller picks it with cpu::pick_token); one that asks none -1.
constexpr int kPickOnHost = -2;
void pick_tokens(int* ids, const float* logits, int n, int stride, const TokenDraw* draws, cudaStream_t stream);

void residual_forward(float* out, const float* a, const float* b, long N, cudaStream_t stream);
void residual_backward(float* da, float* db, const float* dout, long N, cudaStream_t stream);

// ---- Optimizer updates over n values of the flat buffers: optim.h's.

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t, cudaStream_t stream);
void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd,
                         cudaStream_t stream);

// Every view in one launch, the per-view bits. chunks: update_chunks on the device. gscale: clipping
// as g is read (scale()'s bits). p16 (or null): the new parameters rounded too.
struct UpdateChunk {
    size_t offset, size;
    unsigned decay;  // 1: the view takes weight decay
};
constexpr size_t kUpdateChunk = 1 << 16;
std::vector<UpdateChunk> update_chunks(const std::vector<UpdateChunk>& views);
void adamw_update_chunks(float* p, const float* g, float* m, float* v, const UpdateChunk* chunks, int n_chunks,
                         float lr, float beta1, float beta2, float eps, float wd, long t, float gscale,
                         cudaStream_t stream, bf16* p16 = nullptr);
void sgd_momentum_update_chunks(float* p, const float* g, float* buf, const UpdateChunk* chunks, int n_chunks,
                                float lr, float momentum, float wd, float gscale, cudaStream_t stream,
                                bf16* p16 = nullptr);

// *out (device) = sum of x[i]^2 in double, in an order fixed by n and x's alignment (same bits on
// every run and GPU; not global_norm's order). partial: kNormBlocks doubles.
constexpr int kNormBlocks = 1024;
void sum_squares(double* out, double* partial, const float* x, size_t n, cudaStream_t stream);
// x *= s, each product rounded on its own: clip_grad_norm's bits.
void scale(float* x, float s, size_t n, cudaStream_t stream);

} // namespace dptrain::cuda
