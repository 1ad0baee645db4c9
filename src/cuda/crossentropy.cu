// Softmax + cross-entropy over rows of logits, the CUDA twin of src/cpu/crossentropy.cpp: one
// block per row, max subtracted, exponentials summed in double as the CPU does (a 50k-entry
// vocabulary summed in float would differ from it by ~1e-6 relative).
// Not for: fusing with the classifier matmul (the GPU trainer may do that later).
#include "dptrain/cuda_backend.h"

#include "check.h"

#include <cmath>

namespace dptrain::cuda {

constexpr int kRowThreads = 256;

__device__ inline double warp_sum_double(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Block-wide max and sum (blockDim.x a multiple of 32): warps reduce, then warp results in warp
// order. Every thread gets the result; the trailing barrier lets the caller reuse `scratch`.
__device__ float block_max(float x, float* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    x = warp_max(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = warp_max(lane < warps ? scratch[lane] : -INFINITY);
    __syncthreads();
    return x;
}

__device__ double block_sum(double x, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    x = warp_sum_double(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = warp_sum_double(lane < warps ? scratch[lane] : 0.0);
    __syncthreads();
    return x;
}

__global__ void softmax_crossentropy_forward_kernel(float* losses, float* probs, const float* logits,
                                                    const int* targets, int V) {
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    const long b = blockIdx.x;
    const float* z = logits + b * V;
    float* p = probs + b * V;
    float maxv = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, z[v]);
    maxv = block_max(maxv, fscratch);
    double sum = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float e = expf(z[v] - maxv);
        p[v] = e;
        sum += e;
    }
    sum = block_sum(sum, dscratch);
    float inv = (float)(1.0 / sum);
    // Each thread rescales the entries it wrote itself: no barrier needed.
    for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] *= inv;
    if (threadIdx.x == 0) losses[b] = (float)(log(sum) + maxv - z[targets[b]]);
}

// __fmul_rn keeps the product rounded on its own (no fused multiply-subtract), so the result is
// the CPU's bit for bit: p * scale, then minus scale at the target.
__global__ void softmax_crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets,
                                                     float scale, long n, int V) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float d = __fmul_rn(probs[i], scale);
        if (i % V == targets[i / V]) d -= scale;
        dlogits[i] = d;
    }
}

void softmax_crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int V,
                                  cudaStream_t stream) {
    if (B <= 0) return;
    softmax_crossentropy_forward_kernel<<<B, kRowThreads, 0, stream>>>(losses, probs, logits, targets, V);
    CUDA_CHECK(cudaGetLastError());
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B, int V,
                                   cudaStream_t stream) {
    long n = (long)B * V;
    if (n <= 0) return;
    softmax_crossentropy_backward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dlogits, probs, targets, scale, n, V);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
