// Private to src/cuda: column sums over the rows of an (N, C) array, the reduction behind the bias
// gradients (matmul_backward; in bf16 only where cuBLASLt has no bias-gradient epilogue) and
// LayerNorm's weight and bias gradients: out_k[c] += sum over rows of term_k(row, c), for K sums at
// once. Deterministic without float atomics, and parallel over rows as well as columns: the rows
// are cut into N / kChunkRows chunks (rounded up, at most kMaxChunks) of ceil(N / chunks) rows (the
// last may be shorter), a first kernel sums each chunk's rows of 32 columns in a fixed order into a
// partial per chunk, a second adds the partials in chunk order. The chunking depends only on N, so
// a shape gives the same bits on every run and every GPU. With one block per 32 columns only (the
// first form), C = 768 kept 24 blocks busy on a 132-SM GPU.
// Scratch: column_sums_scratch(N, C, K) = K * chunks(N) * C floats from Context::reduction_scratch.
// accumulate false: out_k[c] = the sums instead of += (what adding onto zeros gives), so a
// gradient's first writer needs no zeroing pass before it; with N = 0 the sums are 0.
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

// Terms: a functor with `__device__ void operator()(long row, int c, float* acc) const` adding
// its K terms of (row, c) to acc[0..K-1].
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

// out0 (and out1 when K = 2) += the column sums of terms over N rows of C columns, on `stream`
// (accumulate false: = them).
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
