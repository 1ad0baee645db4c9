// Softmax cross-entropy over rows of logits, the CUDA twin of src/backend/cpu/crossentropy.cpp:
// one block per row, one read, exp sums in double as the CPU (float would miss it by ~1e-6 at 50k).
// Why this shape: docs/GPU.md, "The loss keeps no probabilities". Not for: fusing with the matmul.
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <climits>
#include <cmath>

namespace dptrain::cuda {

constexpr int kRowThreads = 256;

__device__ inline double warp_sum_double(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Block-wide sum (blockDim.x a multiple of 32) in warp order; every thread gets it, and the
// trailing barrier lets the caller reuse `scratch`.
__device__ double block_sum(double x, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    x = warp_sum_double(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = warp_sum_double(lane < warps ? scratch[lane] : 0.0);
    __syncthreads();
    return x;
}

// (value, index) pairs as the CPU's scan finds them: larger value wins, ties to the smaller index.
// The CPU takes a NaN only at index 0, where its scan starts: only thread 0 can hold one, and it wins.
__device__ inline void arg_max_merge(float& m, int& i, float om, int oi) {
    if (i == 0 && m != m) return;
    if ((oi == 0 && om != om) || om > m || (om == m && oi < i)) {
        m = om;
        i = oi;
    }
}

// Block-wide argmax (blockDim.x a multiple of 32): every thread gets the row's pair.
__device__ void block_arg_max(float& m, int& i, float* fscratch, int* iscratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1)
        arg_max_merge(m, i, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, i, o));
    if (lane == 0) {
        fscratch[warp] = m;
        iscratch[warp] = i;
    }
    __syncthreads();
    m = lane < warps ? fscratch[lane] : -INFINITY;
    i = lane < warps ? iscratch[lane] : INT_MAX;
    for (int o = 16; o > 0; o >>= 1)
        arg_max_merge(m, i, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, i, o));
    __syncthreads();
}

// Chunk k of 8 entries is read by thread k mod blockDim.x in every form, so the bf16 forms are
// the fp32 forms' bits. 16-byte loads and stores where rows are aligned and `stride` % 8 == 0;
// otherwise, and in a row's partial last chunk, value by value: nothing at V or past it is touched.
constexpr int kChunk = 8;

inline bool chunks_load_whole(const void* rows, int stride) {
    return aligned16(rows) && stride % kChunk == 0;
}

// 16 bytes as 4 floats, or as 8 bf16 values widened (each word's lower half first).
__device__ inline void unpack_floats(const uint4& u, float* x) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; ++i) x[i] = __uint_as_float(w[i]);
}
__device__ inline void unpack_bf16(const uint4& u, float* x) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int i = 0; i < 4; ++i) {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

// Entries v0 .. v0 + 7 of row z as floats (0 at V and past it, which are not read).
template <class In>
__device__ inline void load_chunk(float* x, const In* z, int v0, int V, bool whole) {
    if (whole && v0 + kChunk <= V) {
        if constexpr (sizeof(In) == 2) {
            unpack_bf16(*reinterpret_cast<const uint4*>(z + v0), x);
        } else {
            unpack_floats(*reinterpret_cast<const uint4*>(z + v0), x);
            unpack_floats(*reinterpret_cast<const uint4*>(z + v0 + 4), x + 4);
        }
    } else {
        for (int i = 0; i < kChunk; ++i) x[i] = v0 + i < V ? as_float(z[v0 + i]) : 0.0f;
    }
}

// Entries v0 .. v0 + 7 of row d, rounded for bf16; never at V or past it (padding stays).
template <class Out>
__device__ inline void store_chunk(Out* d, const float* g, int v0, int V, bool whole) {
    if (whole && v0 + kChunk <= V) {
        if constexpr (sizeof(Out) == 2) {
            uint32_t w[4];
            for (int i = 0; i < 4; ++i)
                w[i] = (uint32_t)bf16_bits(g[2 * i]) | ((uint32_t)bf16_bits(g[2 * i + 1]) << 16);
            *reinterpret_cast<uint4*>(d + v0) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            *reinterpret_cast<float4*>(d + v0) = make_float4(g[0], g[1], g[2], g[3]);
            *reinterpret_cast<float4*>(d + v0 + 4) = make_float4(g[4], g[5], g[6], g[7]);
        }
    } else {
        for (int i = 0; i < kChunk; ++i)
            if (v0 + i < V) store_out(&d[v0 + i], g[i]);
    }
}

// Each thread keeps its max (and where) and sum of exp(z - max) in double, rescaled when its max
// grows; the block then rescales each sum to the row's max: the CPU's sum in other roundings.
// -inf adds nothing; a NaN, or a row of only -inf, makes the sum NaN, as on the CPU.
template <class In>
__global__ void softmax_crossentropy_forward_kernel(float* losses, float* stats, int* argmax, const In* logits,
                                                    const int* targets, int V, int stride, bool whole) {
    __shared__ float fscratch[32];
    __shared__ int iscratch[32];
    __shared__ double dscratch[32];
    const long b = blockIdx.x;
    const In* z = logits + b * stride;
    // As the CPU: the scan starts at entry 0 (thread 0's), so a row of -inf names index 0 and a NaN
    // there is the max; any other entry wins only when strictly larger (never a NaN).
    float maxv = -INFINITY;
    int arg = INT_MAX;
    double sum = 0.0;  // of exp(z - maxv) over this thread's entries
    for (int v0 = threadIdx.x * kChunk; v0 < V; v0 += blockDim.x * kChunk) {
        float x8[kChunk];
        load_chunk(x8, z, v0, V, whole);
        for (int i = 0; i < kChunk && v0 + i < V; ++i) {
            const float x = x8[i];
            if (v0 + i == 0) {
                maxv = x;
                arg = 0;
                sum = maxv != -INFINITY ? expf(maxv - maxv) : 0.0;  // 1, or NaN for a NaN
            } else if (x > maxv) {
                // exp(-inf) = 0 for the first entry; x's own term is 1, or NaN for +inf (as the CPU's)
                sum = sum * exp((double)maxv - (double)x) + expf(x - x);
                maxv = x;
                arg = v0 + i;
            } else if (x != -INFINITY) {
                sum += expf(x - maxv);
            }
        }
    }
    const float own = maxv;
    block_arg_max(maxv, arg, fscratch, iscratch);
    // Each thread's sum against the row's max (exact in double: both maxima are floats); 0 if empty.
    sum = block_sum(sum != 0.0 ? sum * exp((double)own - (double)maxv) : 0.0, dscratch);
    if (maxv == -INFINITY) sum = NAN;  // every entry -inf
    if (threadIdx.x == 0) {
        stats[2 * b] = maxv;
        stats[2 * b + 1] = (float)(1.0 / sum);
        if (argmax) argmax[b] = arg;
        losses[b] = (float)(log(sum) + maxv - as_float(z[targets[b]]));
    }
}

// One block per row, in the forward's chunks. p = expf(z - max) * (1 / sum), each product rounded
// on its own (__fmul_rn: no fused multiply-subtract), as the CPU. A chunk is read whole before it
// is written, so dlogits may be logits.
template <class Out, class In>
__global__ void softmax_crossentropy_backward_kernel(Out* dlogits, const In* logits, const float* stats,
                                                     const int* targets, float scale, int V, int stride, bool whole) {
    const long b = blockIdx.x;
    const In* z = logits + b * stride;
    Out* d = dlogits + b * stride;
    const float maxv = stats[2 * b], inv = stats[2 * b + 1];
    const int t = targets[b];
    for (int v0 = threadIdx.x * kChunk; v0 < V; v0 += blockDim.x * kChunk) {
        float g[kChunk];
        load_chunk(g, z, v0, V, whole);
        for (int i = 0; i < kChunk; ++i) {
            g[i] = __fmul_rn(__fmul_rn(expf(g[i] - maxv), inv), scale);
            if (v0 + i == t) g[i] -= scale;
        }
        store_chunk(d, g, v0, V, whole);
    }
}

template <class In>
static void forward_launch(float* losses, float* stats, int* argmax, const In* logits, const int* targets, int B,
                           int V, int stride, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return;
    CUDA_REQUIRE(stride >= V);
    softmax_crossentropy_forward_kernel<<<B, kRowThreads, 0, stream>>>(losses, stats, argmax, logits, targets, V,
                                                                         stride, chunks_load_whole(logits, stride));
    CUDA_CHECK(cudaGetLastError());
}

template <class Out, class In>
static void backward_launch(Out* dlogits, const In* logits, const float* stats, const int* targets, float scale,
                            int B, int V, int stride, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return;
    CUDA_REQUIRE(stride >= V);
    const bool whole = chunks_load_whole(logits, stride) && chunks_load_whole(dlogits, stride);
    softmax_crossentropy_backward_kernel<<<B, kRowThreads, 0, stream>>>(dlogits, logits, stats, targets, scale, V,
                                                                          stride, whole);
    CUDA_CHECK(cudaGetLastError());
}

void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V, cudaStream_t stream) {
    forward_launch(losses, stats, argmax, logits, targets, B, V, V, stream);
}

void softmax_crossentropy_forward_bf16(float* losses, float* stats, int* argmax, const bf16* logits,
                                       const int* targets, int B, int V, int stride, cudaStream_t stream) {
    forward_launch(losses, stats, argmax, logits, targets, B, V, stride, stream);
}

void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V, cudaStream_t stream) {
    backward_launch(dlogits, logits, stats, targets, scale, B, V, V, stream);
}

void softmax_crossentropy_backward_bf16(bf16* dlogits, const bf16* logits, const float* stats, const int* targets,
                                        float scale, int B, int V, int stride, cudaStream_t stream) {
    backward_launch(dlogits, logits, stats, targets, scale, B, V, stride, stream);
}

} // namespace dptrain::cuda
