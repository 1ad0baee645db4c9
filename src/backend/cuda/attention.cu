// Causal multi-head self-attention, the CUDA twin of src/backend/cpu/attention.cpp: full T x T
// scores by strided-batched cuBLAS GEMMs reading q, k, v in place, a causal softmax kernel (zeros
// past t make the second product causal), out = att V. Not for: long T (flash_attention.cu).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <algorithm>

#include <cmath>

namespace dptrain::cuda {

constexpr int kRowsPerBlock = 8;  // one warp per attention row

// Row r = (b*NH + h)*T + t of att: softmax over t2 <= t in place, zeros past t.
__global__ void causal_softmax_kernel(float* att, long rows, int T) {
    const long r = (long)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const int t = (int)(r % T);
    float* row = att + r * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, row[t2]);
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) {
        float e = expf(row[t2] - maxv);
        row[t2] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int t2 = lane; t2 < T; t2 += 32) row[t2] = t2 <= t ? row[t2] * inv : 0.0f;
}

// datt row in place: dpre = att * (datt - sum_t2 att * datt) * scale for t2 <= t, zeros past t.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, long rows, int T, float scale) {
    const long r = (long)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (r >= rows) return;
    const int t = (int)(r % T);
    const float* ar = att + r * T;
    float* dr = datt + r * T;
    float dot = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) dot += ar[t2] * dr[t2];
    dot = warp_sum(dot);
    for (int t2 = lane; t2 < T; t2 += 32) dr[t2] = t2 <= t ? ar[t2] * (dr[t2] - dot) * scale : 0.0f;
}

static unsigned row_blocks(long rows) { return (unsigned)((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// Strided-batched GEMM over one sequence's NH heads (column-major arguments): fp32, or TF32
// operands with fp32 sums, whose conversion is cuBLAS's own (docs/GPU.md, "Mixed precision").
static void heads_gemm(cublasHandle_t h, bool tf32, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       float alpha, const float* A, int lda, long sa, const float* Bm, int ldb, long sb, float* Cm,
                       int ldc, long sc, int NH) {
    const float beta = 0.0f;
    if (!tf32) {
        CUBLAS_CHECK(
            cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A, lda, sa, Bm, ldb, sb, &beta, Cm, ldc, sc, NH));
        return;
    }
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, sa, Bm, CUDA_R_32F, ldb, sb,
                                            &beta, Cm, CUDA_R_32F, ldc, sc, NH, CUBLAS_COMPUTE_32F_FAST_TF32,
                                            CUBLAS_GEMM_DEFAULT));
}

void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32, Context& ctx,
                       cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    CUDA_REQUIRE(NH > 0 && C % NH == 0);
    const int C3 = 3 * C, hs = C / NH;
    const long TT = (long)T * T, rows = (long)B * NH * T;
    const float scale = 1.0f / sqrtf((float)hs);
    ctx.bind_blas(stream);
    cublasHandle_t h = ctx.blas();
    // S (T,T) = scale * Q K^T  ->  S^T = scale * K Q^T; K and Q are stored transposed (hs x T, ld 3C).
    for (int b = 0; b < B; ++b) {
        const float* q = inp + (long)b * T * C3;  // head h at +h*hs
        heads_gemm(h, tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, q + C, C3, hs, q, C3, hs, att + b * NH * TT, T, TT,
                   NH);
    }
    causal_softmax_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(att, rows, T);
    CUDA_CHECK(cudaGetLastError());
    // out (T,hs) = att V  ->  out^T = V^T att^T, both stored that way; out rows have stride C.
    for (int b = 0; b < B; ++b) {
        const float* v = inp + (long)b * T * C3 + 2 * C;
        heads_gemm(h, tf32, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, C3, hs, att + b * NH * TT, T, TT,
                   out + (long)b * T * C, C, hs, NH);
    }
}

void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B, int T,
                        int C, int NH, bool tf32, Context& ctx, cudaStream_t stream) {
    if (B <= 0 || T <= 0) return;
    CUDA_REQUIRE(NH > 0 && C % NH == 0);
    const int C3 = 3 * C, hs = C / NH;
    const long TT = (long)T * T, rows = (long)B * NH * T;
    const float scale = 1.0f / sqrtf((float)hs);
    ctx.bind_blas(stream);
    cublasHandle_t h = ctx.blas();
    for (int b = 0; b < B; ++b) {
        const float* v = inp + (long)b * T * C3 + 2 * C;
        const float* d = dout + (long)b * T * C;
        const float* a = att + b * NH * TT;
        float* dv = dinp + (long)b * T * C3 + 2 * C;
        // out = att V:  datt = dout V^T  ->  datt^T = V dout^T
        heads_gemm(h, tf32, CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, C3, hs, d, C, hs, datt + b * NH * TT, T, TT, NH);
        //               dV = att^T dout  ->  dV^T = dout^T att
        heads_gemm(h, tf32, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, d, C, hs, a, T, TT, dv, C3, hs, NH);
    }
    causal_softmax_backward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, stream>>>(datt, att, rows, T, scale);
    CUDA_CHECK(cudaGetLastError());
    for (int b = 0; b < B; ++b) {
        const float* q = inp + (long)b * T * C3;
        const float* da = datt + b * NH * TT;
        float* dq = dinp + (long)b * T * C3;
        // scores = Q K^T (scale already in dpre):  dQ = dpre K  ->  dQ^T = K^T dpre^T
        heads_gemm(h, tf32, CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, q + C, C3, hs, da, T, TT, dq, C3, hs, NH);
        //                                          dK = dpre^T Q  ->  dK^T = Q^T dpre
        heads_gemm(h, tf32, CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, C3, hs, da, T, TT, dq + C, C3, hs, NH);
    }
}

// Incremental decoding: row i's k and v (KV heads of hs, after its NH query heads) into the caches
// (slots, T, KV hs) at (slot[i], pos[i]); one thread a value.
__global__ void decode_cache_kernel(float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                                    int n, int T, int NH, int KV, int hs) {
    const int KC = KV * hs, W = (NH + 2 * KV) * hs;
    const long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= (long)n * KC) return;
    const int i = (int)(e / KC), c = (int)(e % KC);
    const size_t at = ((size_t)slot[i] * T + pos[i]) * KC + c;
    kcache[at] = qkv[(size_t)i * W + (size_t)NH * hs + c];
    vcache[at] = qkv[(size_t)i * W + (size_t)NH * hs + KC + c];
}

// A block of kDecodeWarps warps a (row, head), where one warp walked every position in turn (a
// position's value rows read one after another; docs/SERVING.md, "Note [decoding on the GPU]").
// Order of work, fixed by pos alone (so a row's bits are the same alone or batched):
//   1. warp w scores positions j = w, w + kDecodeWarps, ...: lanes split the hs-term dot (lane c
//      takes c, c + 32, ...), warp_sum joins them;
//   2. the maximum and the exp-sum over 0..pos: each thread over j = t, t + blockDim, ..., then a
//      fixed tree over the block (block_reduce);
//   3. warp w sums weight * value over its contiguous share of the positions, lanes over c; the
//      warps' partial outputs are then added in warp order.
// Query head h reads key/value head h / (NH / KV).
constexpr int kDecodeWarps = 8;

// Over the block's threads, a fixed tree: every thread gets the result. red holds kDecodeWarps.
template <bool Max>
__device__ float block_reduce(float x, float* red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    x = Max ? warp_max(x) : warp_sum(x);
    if (lane == 0) red[w] = x;
    __syncthreads();
    float r = red[0];
    for (int k = 1; k < kDecodeWarps; ++k) r = Max ? fmaxf(r, red[k]) : r + red[k];
    __syncthreads();  // red is read by all before it is written again
    return r;
}

__global__ void attention_decode_kernel(float* out, const float* kcache, const float* vcache, const float* qkv,
                                        const int* slot, const int* pos, int T, int NH, int KV, int hs, float scale) {
    extern __shared__ float scores[];  // (max(T + 4, kDecodeWarps hs)): the scores, then the partial outputs
    __shared__ float red[kDecodeWarps];
    const int i = blockIdx.x / NH, h = blockIdx.x % NH, p = pos[i];
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const int KC = KV * hs, W = (NH + 2 * KV) * hs, g = h / (NH / KV);
    const float* q = qkv + (size_t)i * W + h * hs;
    const float* k = kcache + (size_t)slot[i] * T * KC + g * hs;
    const float* v = vcache + (size_t)slot[i] * T * KC + g * hs;
    for (int j = w; j <= p; j += kDecodeWarps) {
        float d = 0.0f;
        for (int c = lane; c < hs; c += 32) d += q[c] * k[(size_t)j * KC + c];
        d = warp_sum(d);
        if (lane == 0) scores[j] = d * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = t; j <= p; j += blockDim.x) m = fmaxf(m, scores[j]);
    m = block_reduce<true>(m, red);
    float sum = 0.0f;
    for (int j = t; j <= p; j += blockDim.x) {
        const float e = expf(scores[j] - m);
        scores[j] = e;
        sum += e;
    }
    const float inv = 1.0f / block_reduce<false>(sum, red);  // its barrier orders the exps before the reads
    const int share = (p + kDecodeWarps) / kDecodeWarps, j0 = w * share, j1 = min(p + 1, j0 + share);
    float acc[kMaxDecodeHead / 32];  // lane's outputs c = lane, lane + 32, ...
#pragma unroll
    for (int r = 0; r < kMaxDecodeHead / 32; ++r) acc[r] = 0.0f;
    for (int j = j0; j < j1; ++j) {
        const float a = scores[j] * inv;
#pragma unroll
        for (int r = 0; r < kMaxDecodeHead / 32; ++r)
            if (lane + 32 * r < hs) acc[r] += a * v[(size_t)j * KC + lane + 32 * r];
    }
    __syncthreads();  // every warp done with the scores: their room takes the partial outputs
    float* part = scores + (size_t)w * hs;
#pragma unroll
    for (int r = 0; r < kMaxDecodeHead / 32; ++r)
        if (lane + 32 * r < hs) part[lane + 32 * r] = acc[r];
    __syncthreads();
    float* o = out + (size_t)i * NH * hs + h * hs;
    for (int c = t; c < hs; c += blockDim.x) {
        float x = scores[c];
        for (int k2 = 1; k2 < kDecodeWarps; ++k2) x += scores[(size_t)k2 * hs + c];
        o[c] = x;
    }
}

void attention_decode_grouped(float* out, float* kcache, float* vcache, const float* qkv, const int* slot,
                              const int* pos, int n, int T, int NH, int KV, int hs, cudaStream_t stream) {
    CUDA_REQUIRE(NH > 0 && KV > 0 && NH % KV == 0 && hs > 0 && T > 0 && T <= kMaxDecodeContext && n >= 0);
    if (n == 0) return;
    const long values = (long)n * KV * hs;
    decode_cache_kernel<<<(unsigned)((values + 255) / 256), 256, 0, stream>>>(kcache, vcache, qkv, slot, pos, n, T, NH,
                                                                              KV, hs);
    CUDA_CHECK(cudaGetLastError());
    const float scale = 1.0f / sqrtf((float)hs);
    // The scores (4 floats of slack kept from the one-warp form), then the warps' partial outputs.
    const size_t scores_bytes = std::max<size_t>((size_t)T + 4, (size_t)kDecodeWarps * hs) * sizeof(float);
    CUDA_REQUIRE(hs <= kMaxDecodeHead && scores_bytes <= 48 * 1024);
    attention_decode_kernel<<<(unsigned)n * NH, kDecodeWarps * 32, scores_bytes, stream>>>(
        out, kcache, vcache, qkv, slot, pos, T, NH, KV, hs, scale);
    CUDA_CHECK(cudaGetLastError());
}

void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH, cudaStream_t stream) {
    CUDA_REQUIRE(NH > 0 && C % NH == 0);
    attention_decode_grouped(out, kcache, vcache, qkv, slot, pos, n, T, NH, NH, C / NH, stream);
}

} // namespace dptrain::cuda
