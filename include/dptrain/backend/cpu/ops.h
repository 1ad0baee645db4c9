// Tensor ops of the CPU backend, the reference every other backend is tested against. Raw
// pointers and explicit shapes (llm.c style); backward takes gradient outputs first and
// accumulates into weight gradients (+=), so callers zero gradients once per step.
// Not for: owning memory or parameters (model.h), or anything that knows MPI or HDF5.
#pragma once

#include "dptrain/core/bf16.h"

namespace dptrain::cpu {

// Compute threads for OpenBLAS and OpenMP in this process.
void set_threads(int n);
int get_threads();
// Cores this process may run on (its CPU affinity; mpirun binds ranks to cores by default), and
// whether that is fewer than the machine has (the process is bound).
int usable_cores(bool* bound = nullptr);

// out = inp @ weight^T + bias.  out (B, OC), inp (B, C), weight (OC, C), bias (OC) or null.
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC);
// The same product with every row of out computed alone, in one fixed order of operations: a
// row's bits do not depend on how many rows the call has or where the row is among them
// (matmul_forward's do, through OpenBLAS's kernels for 1-2, 3, 4-7, 8-11 and 12 or more rows),
// nor on the thread count. For decoding, where a request's answer must not depend on what it was
// batched with.
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                         int OC);
// The same with bf16 weights, widened exactly as they are read: the bits of the fp32 form on the
// widened weights, from half the bytes (decoding with --precision bf16).
void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC);
// dinp = dout @ weight (written; skipped when dinp is null); dweight += dout^T @ inp;
// dbias += column sums of dout (skipped when null).  dout (B, OC), the rest as above.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC);

// dst = src rounded to bf16 (nearest even, NaN kept NaN: the bits of to_bf16 in bf16.h) and
// widened back to float: the operands of a bf16 matmul, which is then an fp32 matmul (bf16 x bf16
// products are exact in fp32). The CPU twin of cuda::to_bf16. dst may equal src.
void round_bf16(float* dst, const float* src, long N);

// Measured sgemm throughput of this process (its current thread count), GFLOP/s: the fastest of
// the n x n x n products run for about `seconds`. For the MFU denominator.
double measure_sgemm_gflops(int n, double seconds);

// Elementwise activations over N values. backward writes dinp = dout * f'(inp).
void relu_forward(float* out, const float* inp, long N);
void relu_backward(float* dinp, const float* inp, const float* dout, long N);
// GELU, tanh approximation (as GPT-2), through tanh_approx (fastmath.h).
void gelu_forward(float* out, const float* inp, long N);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N);

// Row-wise softmax and cross-entropy, the probabilities not kept. losses (B); stats (B, 2): each
// row's largest logit and 1 / sum of exp(logit - largest), all backward needs; argmax (B, or
// null): each row's first largest logit, for the accuracy count. logits (B, V), targets (B).
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V);
// dlogits = (softmax(logits) - onehot(targets)) * scale (scale = 1 / global batch for a mean loss),
// the probabilities recomputed from the forward's stats; dlogits may be logits (in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V);

// GPT ops (llm.c shapes: B batch, T time, C channels, NH heads, V vocabulary).
// out(B,T,C) = wte[inp] + wpe[t].  inp (B,T) with row stride `stride` (>= T), wte (V,C), wpe (maxT,C).
void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C);
// Incremental decoding's rows: out (n, C), row i = wte[tok[i]] + wpe[pos[i]].
void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C);
// dwte[inp] += dout, dwpe[t] += dout (sequential over rows: deterministic).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C);

// out = (inp - mean) * rstd * weight + bias per row of C; mean, rstd (N) kept for backward. N rows.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C);
// The residual add and the LayerNorm after it as one op: res = a + b (N rows of C), then
// layernorm_forward(out, mean, rstd, res, ...). The GPT's blocks end so; in the CUDA twin the
// LayerNorm's first pass takes the sums as they are computed instead of reading res back.
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C);
// dinp += ..., dweight += ..., dbias += ... (dinp accumulates: it is a residual stream).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C);

// Causal multi-head self-attention. inp (B,T,3C) holds q,k,v; out (B,T,C); att (B,NH,T,T) keeps
// the softmax for backward (only t2 <= t is used). tf32: each product's operands rounded to TF32
// (round_tf32, nearest even) first, as --precision bf16 feeds the GPU's tensor cores (whose own
// conversion may truncate instead); sums and softmax fp32.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32 = false);
// dinp (B,T,3C) written (not accumulated); datt scratch (B,NH,T,T).
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH, bool tf32 = false);
// Attention of n new positions against a key/value cache (incremental decoding: a prompt, then
// one token at a time; rows of several sequences may share a call). qkv (n, 3C) holds each row's
// q, k, v; row i is position pos[i] of cache slot slot[i]. Every row's k and v are first written
// into kcache and vcache (slots, T, C) at (slot, pos), so that rows of one sequence in one call
// see each other causally; then row i attends to positions 0..pos[i] of its slot. out (n, C).
// fp32 throughout; the scores of each (row, head) in per-thread scratch allocated once.
void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH);
// dst = src rounded to TF32 (10 mantissa bits, nearest even; NaN and infinity kept), as float.
void round_tf32(float* dst, const float* src, long N);

// Causal self-attention without the T x T matrices (--attention flash): key tiles of 64 with a
// running softmax, as the CUDA twin computes them. q, k, v, the softmax weights P and the
// gradients dout and dS enter the products rounded to bf16 (round_bf16); sums and softmax fp32.
// out (B,T,C); lse (B,NH,T) keeps each query's log-sum-exp of its scaled scores for backward.
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH);
// dinp (B,T,3C) written (not accumulated); delta (B,NH,T) scratch (rowsum of dout * out); out and
// lse of the forward.
void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH);
// The head sizes (C / NH) the kernels are built for: 16, 32, 64 and 128. Inline, so the CUDA
// launchers and the standalone benchmark need nothing else of the CPU backend.
inline bool flash_attention_supported(int C, int NH) {
    if (NH <= 0 || C <= 0 || C % NH != 0) return false;
    const int hs = C / NH;
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

// out = a + b, N values; backward: da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, long N);
void residual_backward(float* da, float* db, const float* dout, long N);

} // namespace dptrain::cpu
