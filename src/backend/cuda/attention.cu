// Causal multi-head self-attention, the CUDA twin of src/backend/cpu/attention.cpp: full T x T
// scores by strided-batched cuBLAS GEMMs reading q, k, v in place, a causal softmax kernel (zeros
// past t make the second product causal), out = att V. Not for: long T (flash_attention.cu).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

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

// One warp a (row, head), as the CPU twin's loop body: lane scores j = lane, lane + 32, ... (an
// hs-term dot in order), the softmax over 0..pos, then lane c sums weight * value in order. Query
// head h reads key/value head h / (NH / KV).
__global__ void attention_decode_kernel(float* out, const float* kcache, const float* vcache, const float* qkv,
                                        const int* slot, const int* pos, int T, int NH, int KV, int hs, float scale) {
    extern __shared__ float scores[];
    const int i = blockIdx.x / NH, h = blockIdx.x % NH, p = pos[i], lane = threadIdx.x;
    const int KC = KV * hs, W = (NH + 2 * KV) * hs, g = h / (NH / KV);
    const float* q = qkv + (size_t)i * W + h * hs;
    const float* k = kcache + (size_t)slot[i] * T * KC + g * hs;
    const float* v = vcache + (size_t)slot[i] * T * KC + g * hs;
    float maxv = -INFINITY;
    for (int j = lane; j <= p; j += 32) {
        float d = 0.0f;
        for (int c = 0; c < hs; ++c) d += q[c] * k[(size_t)j * KC + c];
        scores[j] = d * scale;
        maxv = fmaxf(maxv, scores[j]);
    }
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int j = lane; j <= p; j += 32) {
        const float e = expf(scores[j] - maxv);
        scores[j] = e;
        sum += e;
    }
    const float inv = 1.0f / warp_sum(sum);
    __syncwarp();  // every lane's scores written before any lane reads them all
    float* o = out + (size_t)i * NH * hs + h * hs;
    for (int c = lane; c < hs; c += 32) {
        float acc = 0.0f;
        for (int j = 0; j <= p; ++j) acc += scores[j] * inv * v[(size_t)j * KC + c];
        o[c] = acc;
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
    // 4 floats of slack: the unrolled sum's remainder reads up to 12 bytes past T (compute-sanitizer
    // caught it; values past pos are never used).
    const size_t scores_bytes = ((size_t)T + 4) * sizeof(float);
    attention_decode_kernel<<<(unsigned)n * NH, 32, scores_bytes, stream>>>(out, kcache, vcache, qkv, slot, pos, T, NH,
                                                                             KV, hs, scale);
    CUDA_CHECK(cudaGetLastError());
}

void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH, cudaStream_t stream) {
    CUDA_REQUIRE(NH > 0 && C % NH == 0);
    attention_decode_grouped(out, kcache, vcache, qkv, slot, pos, n, T, NH, NH, C / NH, stream);
}

} // namespace dptrain::cuda
