// Private to src/backend/cuda: column sums over the rows of an (N, C) array (out_k[c] += sum of
// term_k(row, c), K = 1 or 2) for the bias and LayerNorm gradients, parallel over rows and without
// atomics; the chunking depends on N alone, so the same bits on every run and GPU (docs/GPU.md).
#pragma once

#include "check.h"

namespace dptrain::cuda {

constexpr long kChunkRows = 256;
constexpr long kMaxChunks = 128;
constexpr int kRowLanes = 8;  // block (32, kRowLanes): a warp reads 32 contiguous columns of a row

inline long column_chunks(long N) {
    long chunks = (N + kChunkRows - 1) / kChunkRows;
    return chunks < 1 ? 1 : (chunks > kMaxChunks ? kMaxChunks : chunks);
}

// Terms: `__device__ void operator()(long row, int c, float* acc) const` adds its K terms to acc.
template <int K, class Terms>
__global__ void column_partials_kernel(float* partial, Terms terms, long N, int C, long rows_per_chunk) {
    __shared__ float part[K][kRowLanes][32];
    const int c = blockIdx.x * 32 + threadIdx.x;
    const long r0 = blockIdx.y * rows_per_chunk, r1 = r0 + rows_per_chunk < N ? r0 + rows_per_chunk : N;
    float acc[K];
    for (int k = 0; k < K; ++k) acc[k] = 0.0f;
    if (c < C)
        for (long i = r0 + threadIdx.y; i < r1; i += kRowLanes) terms(i, c, acc);
    for (int k = 0; k < K; ++k) part[k][threadIdx.y][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C)
        for (int k = 0; k < K; ++k) {
            float s = 0.0f;
            for (int r = 0; r < kRowLanes; ++r) s += part[k][r][threadIdx.x];
            partial[((long)k * gridDim.y + blockIdx.y) * C + c] = s;
        }
}

// out_k[c] += the chunks' partials, added in chunk order (accumulate false: out_k[c] = them).
template <int K>
__global__ void column_finish_kernel(float* out0, float* out1, const float* partial, long chunks, int C,
                                     bool accumulate) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int k = 0; k < K; ++k) {
        float s = 0.0f;
        for (long g = 0; g < chunks; ++g) s += partial[((long)k * chunks + g) * C + c];
        float& out = (k == 0 ? out0 : out1)[c];
        out = accumulate ? out + s : s;
    }
}

// out0 (and out1 when K = 2) += the column sums of terms over N rows of C columns (accumulate
// false: =). Scratch: column_sums_scratch(N, C, K) floats of the context's reduction scratch.
template <int K, class Terms>
void column_sums(float* out0, float* out1, Terms terms, long N, int C, Context& ctx, cudaStream_t stream,
                 bool accumulate = true) {
    static_assert(K == 1 || K == 2, "one or two sums per column");
    if (C <= 0) return;
    if (N <= 0) {  // sums of no rows: 0
        if (!accumulate)
            for (float* out : {out0, K == 2 ? out1 : nullptr})
                if (out) CUDA_CHECK(cudaMemsetAsync(out, 0, (size_t)C * sizeof(float), stream));
        return;
    }
    const long chunks = column_chunks(N), rows = (N + chunks - 1) / chunks;
    float* partial = ctx.reduction_scratch(column_sums_scratch(N, C, K));
    column_partials_kernel<K><<<dim3((C + 31) / 32, (unsigned)chunks), dim3(32, kRowLanes), 0, stream>>>(
        partial, terms, N, C, rows);
    CUDA_CHECK(cudaGetLastError());
    column_finish_kernel<K><<<(C + 255) / 256, 256, 0, stream>>>(out0, out1, partial, chunks, C, accumulate);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
