// Tensor ops of the CPU backend, the reference every other backend is tested against: raw pointers
// and explicit shapes (llm.c style); backward adds into weight gradients (+=).
// Not for: owning memory or parameters (model.h), or anything that knows MPI or HDF5.
#pragma once

#include "dptrain/core/bf16.h"

namespace dptrain::cpu {

// Compute threads for OpenBLAS and OpenMP in this process.
void set_threads(int n);
int get_threads();
// Cores in this process's affinity (mpirun binds ranks); *bound: fewer than the machine has.
int usable_cores(bool* bound = nullptr);

// out = inp @ weight^T + bias.  out (B, OC), inp (B, C), weight (OC, C), bias (OC) or null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC);
// A row's bits independent of the call's other rows and the thread count (decoding): docs/GPU.md,
// "Note [matmul_rows order]".
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                         int OC);
// bf16 weights, widened as read: the fp32 form's bits from half the bytes.
void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC);
// dinp = dout @ weight (written; skipped when null); dweight += dout^T @ inp; dbias += column
// sums of dout (skipped when null). dout (B, OC), the rest as above.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC);

// dst = src rounded to bf16 (to_bf16's bits), as float: a bf16 matmul's operands (the products are
// exact in fp32). dst may equal src.
void round_bf16(float* dst, const float* src, long N);

// sgemm GFLOP/s of this process at its thread count: the fastest n^3 product in `seconds` (MFU).
double measure_sgemm_gflops(int n, double seconds);

// Elementwise activations over N values. backward writes dinp = dout * f'(inp).
void relu_forward(float* out, const float* inp, long N);
void relu_backward(float* dinp, const float* inp, const float* dout, long N);
// GELU, tanh approximation (as GPT-2), through tanh_approx (fastmath.h).
void gelu_forward(float* out, const float* inp, long N);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N);

// Softmax cross-entropy, probabilities not kept. losses (B); stats (B, 2): each row's max and
// 1 / sum of exp(logit - max); argmax (B, or null): first largest. logits (B, V), targets (B).
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V);
// dlogits = (softmax - onehot(targets)) * scale (1 / global batch for a mean), from the stats;
// dlogits may be logits (in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V);

// GPT ops (B batch, T time, C channels, NH heads, V vocabulary).
// out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) with row stride `stride` (>= T), wte (V,C), wpe (maxT,C).
void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C);
// Incremental decoding's rows: out (n, C), row i = wte[tok[i]] + wpe[pos[i]].
void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C);
// dwte[inp] += dout, dwpe[t] += dout (sequential over rows: deterministic).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C);

// out = (inp - mean) * rstd * weight + bias per row of C; mean, rstd (N) kept for backward. N rows.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C);
// res = a + b (N rows of C), then layernorm_forward of res: the GPT's blocks end so, and the CUDA
// twin fuses the two.
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C);
// dinp += ..., dweight += ..., dbias += ... (dinp accumulates: it is a residual stream).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C);

// Causal multi-head self-attention. inp (B,T,3C) = q,k,v; out (B,T,C); att (B,NH,T,T) keeps the
// softmax (t2 <= t used). tf32: operands rounded to TF32 (round_tf32) first, as --precision bf16
// feeds the GPU's tensor cores; sums and softmax fp32.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32 = false);
// dinp (B,T,3C) written (not accumulated); datt scratch (B,NH,T,T).
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH, bool tf32 = false);
// Decoding (sequences may share a call): row i of qkv (n, 3C) is position pos[i] of cache slot
// slot[i]. All rows' k, v go into kcache, vcache (slots, T, C) first, so one sequence's rows see
// each other causally; then row i attends to 0..pos[i]. out (n, C).
void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH);
// dst = src rounded to TF32 (10 mantissa bits, nearest even; NaN and infinity kept), as float.
void round_tf32(float* dst, const float* src, long N);

// Key tiles of 64 with a running softmax, the CUDA twin's tiles; products on bf16-rounded operands,
// sums and softmax fp32. out (B,T,C); lse (B,NH,T) each query's log-sum-exp for backward.
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH);
// dinp (B,T,3C) written (not accumulated); delta (B,NH,T) scratch; out and lse of the forward.
void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH);
// Head sizes the kernels are built for. Inline: the CUDA launchers need nothing else from here.
inline bool flash_attention_supported(int C, int NH) {
    if (NH <= 0 || C <= 0 || C % NH != 0) return false;
    const int hs = C / NH;
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

// out = a + b, N values; backward: da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, long N);
void residual_backward(float* da, float* db, const float* dout, long N);

} // namespace dptrain::cpu
