// The CPU backend's ops, every other backend's reference: raw pointers and shapes (llm.c style);
// backward adds into weight gradients (+=).
// Not for: owning memory or parameters (model.h), or anything that knows MPI or HDF5.
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/core/token_draw.h"

#include <string>

namespace dptrain::cpu {

// Compute threads for OpenBLAS and OpenMP in this process.
void set_threads(int n);
int get_threads();
// Cores in this process's affinity; *bound: fewer than the machine's.
int usable_cores(bool* bound = nullptr);
// What --threads `want` will not get as asked, said once: more threads than the cores this
// process may run on (they take turns), or above OpenBLAS's build limit (its products use fewer);
// "" when neither. After set_threads(want).
std::string thread_note(int want);

// out (B, OC) = inp (B, C) @ weight (OC, C)^T + bias (OC, or null).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC);
// A row's bits independent of other rows and threads: docs/GPU.md, "Note [matmul_rows order]".
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                         int OC);
// bf16 weights, widened as read: the fp32 form's bits from half the bytes.
void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC);
// dinp = dout @ weight (null: skipped); dweight += dout^T @ inp; dbias += column sums (null: skipped).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC);

// dst = src rounded to bf16 (to_bf16's bits), as float (products stay exact in fp32). dst may be src.
void round_bf16(float* dst, const float* src, long N);

// sgemm GFLOP/s at this thread count: the fastest n^3 product in `seconds`.
double measure_sgemm_gflops(int n, double seconds);

// Over N values; backward writes dinp = dout * f'(inp).
void relu_forward(float* out, const float* inp, long N);
void relu_backward(float* dinp, const float* inp, const float* dout, long N);
// GELU: GPT-2's tanh approximation (fastmath.h).
void gelu_forward(float* out, const float* inp, long N);
void gelu_backward(float* dinp, const float* inp, const float* dout, long N);

// losses (B); stats (B, 2): max and 1 / sum of exp(logit - max); argmax (B, or null): first largest.
// logits (B, V), targets (B). Probabilities not kept.
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V);
// dlogits = (softmax - onehot(targets)) * scale, from the stats; may be logits (in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V);

// GPT ops (B batch, T time, C channels, NH heads, V vocabulary).
// out (B,T,C) = wte (V,C)[inp] + wpe (maxT,C)[t]; inp (B,T), row stride `stride` (>= T). A null
// wpe (dwpe in backward): token rows alone.
void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C);
// Decoding: out (n, C), row i = wte[tok[i]] + wpe[pos[i]].
void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C);
// dwte[inp] += dout, dwpe[t] += dout, rows in order: deterministic.
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C);

// N rows of C: out = (inp - mean) * rstd * weight + bias; mean, rstd (N) kept for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C);
// res = a + b, then layernorm_forward of res (the CUDA twin fuses them).
void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C);
// All three +=: dinp is a residual stream.
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C);

// Causal. inp (B,T,3C) = q,k,v; out (B,T,C); att (B,NH,T,T) keeps the softmax. tf32: operands
// rounded as the GPU's tensor cores take them; sums and softmax fp32.
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32 = false);
// dinp (B,T,3C) written (=); datt (B,NH,T,T) scratch.
void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH, bool tf32 = false);
// Decoding: row i of qkv (n, 3C) is position pos[i] of slot[i]. Every row's k, v go into kcache,
// vcache (slots, T, C) first, so a sequence's rows see each other; out (n, C).
void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH);
// dst = src rounded to TF32 (nearest even; NaN and infinity kept), as float.
void round_tf32(float* dst, const float* src, long N);

// The CUDA twin's tiles: bf16-rounded operands, fp32 sums and softmax. out (B,T,C); lse (B,NH,T).
void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH);
// dinp (B,T,3C) written (=); delta (B,NH,T) scratch.
void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH);
// Head sizes the kernels are built for (inline: the CUDA launchers need nothing else here).
inline bool flash_attention_supported(int C, int NH) {
    if (NH <= 0 || C <= 0 || C % NH != 0) return false;
    const int hs = C / NH;
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

// Llama ops (hs head size, KV key/value heads dividing NH, F SwiGLU's width).
// N rows of C: out = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps) kept for backward.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C, float eps);
// res = a + b, then rmsnorm_forward of res (the residual stream's add and the next norm together).
void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                              const float* weight, long N, int C, float eps);
// dinp += and dweight +=.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C);
// Rotary positions on inp (B,T,(NH+2KV)*hs), the projection's q, k, v: out (B,T,3C) holds q and k
// rotated (pairs i, i + hs/2 of a head, as Hugging Face's Llama), k and v repeated for each query
// head of their group, for the attention ops. cos, sin (T, hs/2): the angles of position t.
void rope_qkv_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T, int NH, int KV,
                      int hs);
// dinp (B,T,(NH+2KV)*hs) written (=) from dout (B,T,3C): rotated back, a group's k, v summed in head order.
void rope_qkv_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T, int NH,
                       int KV, int hs);
// Decoding: row i of qkv (n, (NH+2KV)*hs) at position pos[i]; its q and k heads rotated in place.
void rope_decode(float* qkv, const int* pos, const float* cos, const float* sin, int n, int NH, int KV, int hs);
// Decoding with KV key/value heads: row i of qkv (n, (NH+2KV)*hs); caches (slots, T, KV*hs); out (n, NH*hs).
// attention_decode is this with KV = NH.
void attention_decode_grouped(float* out, float* kcache, float* vcache, const float* qkv, const int* slot,
                              const int* pos, int n, int T, int NH, int KV, int hs);
// inp (N, 2F): gate, up; out (N, F) = silu(gate) * up. backward: dinp (N, 2F) written (=).
void swiglu_forward(float* out, const float* inp, long N, int F);
void swiglu_backward(float* dinp, const float* inp, const float* dout, long N, int F);

// out = a + b, N values; backward: da += dout, db += dout.
void residual_forward(float* out, const float* a, const float* b, long N);
void residual_backward(float* da, float* db, const float* dout, long N);

// A row's token by d's rule (token_draw.h) from its logits z (at least d.vocab values); probs and
// order hold d.vocab values each (scratch). -1 where d.temperature < 0.
int pick_token(const float* z, const TokenDraw& d, float* probs, int* order);

} // namespace dptrain::cpu
