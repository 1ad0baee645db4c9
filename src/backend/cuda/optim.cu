// AdamW and SGD-momentum updates on device buffers, the gradient norm's sum of squares and the
// clipping scale: the CUDA twins of optim.h's. Not for: the learning-rate schedule or deciding
// whether to clip (the host does). Rounding: docs/GPU.md, "Note [update rounding]".
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace dptrain::cuda {

// One element's update in the CPU's order, every operation rounded on its own (_rn intrinsics):
// otherwise ptxas fuses the two kernels' copies differently (Note [update rounding]). gi: the
// gradient as read or clipped. Returns the new parameter.
__device__ inline float adamw_element(float* p, float gi, float* m, float* v, size_t i, float lr, float beta1,
                                      float beta2, float eps, float decay, float inv_c1, float inv_c2) {
    const float mi = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, gi));
    const float vi = __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, gi), gi));
    m[i] = mi;
    v[i] = vi;
    const float step = __fdiv_rn(__fmul_rn(lr, __fmul_rn(mi, inv_c1)), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, inv_c2)), eps));
    const float pi = __fsub_rn(__fmul_rn(decay, p[i]), step);
    p[i] = pi;
    return pi;
}

__device__ inline float sgd_element(float* p, float gi, float* buf, size_t i, float lr, float momentum, float wd) {
    const float b = __fadd_rn(__fadd_rn(__fmul_rn(momentum, buf[i]), gi), __fmul_rn(wd, p[i]));
    buf[i] = b;
    const float pi = __fsub_rn(p[i], __fmul_rn(lr, b));
    p[i] = pi;
    return pi;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float inv_c1, float inv_c2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        adamw_element(p, g[i], m, v, i, lr, beta1, beta2, eps, decay, inv_c1, inv_c2);
}

__global__ void sgd_momentum_kernel(float* p, const float* g, float* buf, size_t n, float lr, float momentum,
                                    float wd) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        sgd_element(p, g[i], buf, i, lr, momentum, wd);
}

// A block per chunk (<= kUpdateChunk values of one view). decay_off is 1 - lr * 0 from the host,
// as the per-view update computes it (a literal 1 could change the fusing). g times gscale rounded
// as scale() stores it; p16 (or null) gets each new value rounded to bf16.
__global__ void adamw_chunks_kernel(float* p, uint16_t* p16, const float* g, float* m, float* v,
                                    const UpdateChunk* chunks, float lr, float beta1, float beta2, float eps,
                                    float decay, float decay_off, float inv_c1, float inv_c2, float gscale) {
    const UpdateChunk c = chunks[blockIdx.x];
    const float d = c.decay ? decay : decay_off;
    for (size_t i = c.offset + threadIdx.x; i < c.offset + c.size; i += blockDim.x) {
        const float pi = adamw_element(p, __fmul_rn(g[i], gscale), m, v, i, lr, beta1, beta2, eps, d, inv_c1, inv_c2);
        if (p16) p16[i] = bf16_bits(pi);
    }
}

__global__ void sgd_momentum_chunks_kernel(float* p, uint16_t* p16, const float* g, float* buf,
                                           const UpdateChunk* chunks, float lr, float momentum, float wd,
                                           float gscale) {
    const UpdateChunk c = chunks[blockIdx.x];
    const float w = c.decay ? wd : 0.0f;
    for (size_t i = c.offset + threadIdx.x; i < c.offset + c.size; i += blockDim.x) {
        const float pi = sgd_element(p, __fmul_rn(g[i], gscale), buf, i, lr, momentum, w);
        if (p16) p16[i] = bf16_bits(pi);
    }
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t, cudaStream_t stream) {
    if (n == 0) return;
    const float inv_c1 = 1.0f / (1.0f - std::pow(beta1, (float)t));
    const float inv_c2 = 1.0f / (1.0f - std::pow(beta2, (float)t));
    const float decay = 1.0f - lr * wd;
    adamw_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, decay, inv_c1,
                                                            inv_c2);
    CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd,
                         cudaStream_t stream) {
    if (n == 0) return;
    sgd_momentum_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(p, g, buf, n, lr, momentum, wd);
    CUDA_CHECK(cudaGetLastError());
}

std::vector<UpdateChunk> update_chunks(const std::vector<UpdateChunk>& views) {
    std::vector<UpdateChunk> chunks;
    for (const UpdateChunk& v : views)
        for (size_t o = 0; o < v.size; o += kUpdateChunk)
            chunks.push_back({v.offset + o, std::min<size_t>(kUpdateChunk, v.size - o), v.decay});
    return chunks;
}

void adamw_update_chunks(float* p, const float* g, float* m, float* v, const UpdateChunk* chunks, int n_chunks,
                         float lr, float beta1, float beta2, float eps, float wd, long t, float gscale,
                         cudaStream_t stream, bf16* p16) {
    if (n_chunks <= 0) return;
    // The per-view update's scalars, computed the same way (bias corrections as the CPU's).
    const float inv_c1 = 1.0f / (1.0f - std::pow(beta1, (float)t));
    const float inv_c2 = 1.0f / (1.0f - std::pow(beta2, (float)t));
    const float decay = 1.0f - lr * wd, no_wd = 0.0f, decay_off = 1.0f - lr * no_wd;
    adamw_chunks_kernel<<<n_chunks, 256, 0, stream>>>(p, p16, g, m, v, chunks, lr, beta1, beta2, eps, decay,
                                                     decay_off, inv_c1, inv_c2, gscale);
    CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_update_chunks(float* p, const float* g, float* buf, const UpdateChunk* chunks, int n_chunks,
                                float lr, float momentum, float wd, float gscale, cudaStream_t stream, bf16* p16) {
    if (n_chunks <= 0) return;
    sgd_momentum_chunks_kernel<<<n_chunks, 256, 0, stream>>>(p, p16, g, buf, chunks, lr, momentum, wd, gscale);
    CUDA_CHECK(cudaGetLastError());
}

// kNormBlocks blocks, each over a contiguous chunk of `per` values (a multiple of 8, so chunks stay
// 16-byte aligned where x is), read in 16-byte pieces, four loads in flight, summed in double by a
// fixed tree; then sum_partials likewise. The order depends on n and x's alignment alone.
// Why so many blocks: docs/GPU.md, "Where the state lives".
constexpr int kNormThreads = 256;

// A fixed tree over the block's values; every thread gets the sum. Once per kernel (part is
// rewritten without a barrier before it).
__device__ double block_tree_sum(double x, double* part) {
    part[threadIdx.x] = x;
    __syncthreads();
    for (int s = kNormThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    return part[0];
}

__global__ void __launch_bounds__(kNormThreads) sum_squares_chunks(double* partial, const float* x, size_t n,
                                                                   size_t per, bool whole) {
    __shared__ double part[kNormThreads];
    const size_t begin = min(n, (size_t)blockIdx.x * per), end = min(n, begin + per);
    double acc = 0.0;
    size_t rest = begin;  // where the value-by-value loop starts
    if (whole) {
        const float4* x4 = reinterpret_cast<const float4*>(x + begin);
        const size_t pieces = (end - begin) / 4;
        // Pieces i, i + 256, ... in order, four loads at a time (a piece past the end adds 0).
        for (size_t i = threadIdx.x; i < pieces; i += 4 * kNormThreads) {
            float4 v[4];
            for (int k = 0; k < 4; ++k) {
                const size_t j = i + (size_t)k * kNormThreads;
                v[k] = j < pieces ? x4[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            for (int k = 0; k < 4; ++k) {
                acc += (double)v[k].x * v[k].x;
                acc += (double)v[k].y * v[k].y;
                acc += (double)v[k].z * v[k].z;
                acc += (double)v[k].w * v[k].w;
            }
        }
        rest = begin + pieces * 4;
    }
    for (size_t i = rest + threadIdx.x; i < end; i += kNormThreads) {
        const double v = (double)x[i];
        acc += v * v;
    }
    const double s = block_tree_sum(acc, part);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kNormThreads) sum_partials(double* out, const double* partial, int chunks) {
    __shared__ double part[kNormThreads];
    double acc = 0.0;
    for (int b = threadIdx.x; b < chunks; b += kNormThreads) acc += partial[b];
    const double s = block_tree_sum(acc, part);
    if (threadIdx.x == 0) *out = s;
}

__global__ void scale_kernel(float* x, float s, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = __fmul_rn(x[i], s);
}

void sum_squares(double* out, double* partial, const float* x, size_t n, cudaStream_t stream) {
    size_t per = (n + kNormBlocks - 1) / kNormBlocks;
    per = (per + 7) / 8 * 8;
    sum_squares_chunks<<<kNormBlocks, kNormThreads, 0, stream>>>(partial, x, n, per, aligned16(x));
    CUDA_CHECK(cudaGetLastError());
    sum_partials<<<1, kNormThreads, 0, stream>>>(out, partial, kNormBlocks);
    CUDA_CHECK(cudaGetLastError());
}

void scale(float* x, float s, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    scale_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(x, s, n);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
