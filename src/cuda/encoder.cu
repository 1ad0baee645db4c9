// Token + position embedding, forward and backward, the CUDA twin of src/cpu/encoder.cpp.
// The backward is a scatter into the token table where a token may repeat many times in a batch.
// Float atomics would make the sums depend on thread timing, so instead each row of dwte is
// owned by one block (the one at the token's first position) that adds every occurrence, in
// position order, onto the row's current value: the CPU's order, so the result is bit-identical
// to it and the same on every run. No sort and no scratch memory.
// Not for: vocabularies or batches where one block per position would be too slow (B*T in the
// tens of thousands is fine: the duplicate scan is O((B*T)^2 / 2) cached int reads).
#include "dptrain/cuda_backend.h"

#include "check.h"

namespace dptrain::cuda {

// Token at flat position i = b*T + t of inp (B, T) with row stride `stride`.
__device__ inline int token_at(const int* inp, long i, int T, int stride) {
    return inp[(i / T) * stride + i % T];
}

__global__ void encoder_forward_kernel(float* out, const int* inp, int stride, const float* wte, const float* wpe,
                                       long n, int T, int C) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        long pos = i / C;
        int c = (int)(i % C), t = (int)(pos % T);
        out[i] = wte[(long)token_at(inp, pos, T, stride) * C + c] + wpe[(long)t * C + c];
    }
}

constexpr int kChunk = 1024;  // positions warp 0 scans per round (a multiple of 32)

// One block per position i. 1: if the same token occurs at an earlier position, that position's
// block owns the row: return. 2: warp 0 lists, in order, the positions >= i holding the token,
// kChunk at a time; then every thread adds those rows of dout to its channels of dwte[token].
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* inp, int stride, int T, int C,
                                            long BT) {
    __shared__ int list[kChunk];
    __shared__ int count;
    const long i = blockIdx.x;
    const int v = token_at(inp, i, T, stride);

    int seen = 0;
    for (long j = threadIdx.x; j < i && !seen; j += blockDim.x) seen = token_at(inp, j, T, stride) == v;
    if (__syncthreads_or(seen)) return;  // uniform across the block: no thread is left at a barrier

    const int lane = threadIdx.x & 31;
    float* row = dwte + (long)v * C;
    for (long j0 = i; j0 < BT; j0 += kChunk) {
        if (threadIdx.x < 32) {
            // Ballot compaction keeps position order: lane k's match lands after lanes < k.
            int n = 0;
            for (long j = j0 + lane; j < j0 + kChunk; j += 32) {
                bool match = j < BT && token_at(inp, j, T, stride) == v;
                unsigned mask = __ballot_sync(0xffffffffu, match);
                if (match) list[n + __popc(mask & ((1u << lane) - 1u))] = (int)(j - j0);
                n += __popc(mask);
            }
            if (lane == 0) count = n;
        }
        __syncthreads();
        const int n = count;
        for (int c = threadIdx.x; c < C && n > 0; c += blockDim.x) {
            float acc = row[c];
            for (int q = 0; q < n; ++q) acc += dout[(j0 + list[q]) * C + c];
            row[c] = acc;
        }
        __syncthreads();  // list and count are rewritten next round
    }
}

// dwpe[t][c] += dout[b][t][c] for b in order, one thread per (t, c): the CPU's order.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    const long n = (long)T * C, TC = n;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; ++b) acc += dout[b * TC + i];
        dwpe[i] = acc;
    }
}

void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream) {
    long n = (long)B * T * C;
    if (n <= 0) return;
    CUDA_REQUIRE(stride >= T);
    encoder_forward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, inp, stride, wte, wpe, n, T, C);
    CUDA_CHECK(cudaGetLastError());
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C,
                      cudaStream_t stream) {
    long BT = (long)B * T;
    if (BT <= 0 || C <= 0) return;
    CUDA_REQUIRE(stride >= T && BT < (1L << 31));  // one block per position; positions fit an int
    encoder_backward_wte_kernel<<<(unsigned)BT, 256, 0, stream>>>(dwte, dout, inp, stride, T, C, BT);
    CUDA_CHECK(cudaGetLastError());
    encoder_backward_wpe_kernel<<<grid_for((long)T * C, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
