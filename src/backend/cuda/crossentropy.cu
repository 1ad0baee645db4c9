// Softmax + cross-entropy over rows of logits, the CUDA twin of src/cpu/crossentropy.cpp: one
// block per row, max subtracted, exponentials summed in double as the CPU does (a 50k-entry
// vocabulary summed in float would differ from it by ~1e-6 relative). The probabilities are never
// stored: at GPT-2 124M with B = 8 that is 1.65 GB of device memory and four of its passes less
// per step (forward reads the logits once, taking the max and the sum together, and writes two
// floats a row; backward reads them once and writes the gradient). The bf16 forms read the logits
// as bf16 (the classifier matmul's output, rounded as it was stored: half the bytes on every pass)
// and widen them exactly, so they compute what the fp32 forms compute on the widened values. Each
// thread reads chunks of 8 entries, in 16-byte loads where the rows are aligned (below).
// Not for: fusing with the classifier matmul.
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

// Block-wide sum (blockDim.x a multiple of 32): warps reduce, then warp results in warp order.
// Every thread gets the result; the trailing barrier lets the caller reuse `scratch`.
__device__ double block_sum(double x, double* scratch) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    x = warp_sum_double(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = warp_sum_double(lane < warps ? scratch[lane] : 0.0);
    __syncthreads();
    return x;
}

// (value, index) pairs as the CPU's scan finds them: the larger value wins, and of equal values
// the smaller index (the first maximum). The CPU never takes a NaN, except at index 0 where its
// scan starts (then the row's max is that NaN): only thread 0 can hold a NaN, and it wins.
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

// A row is read in chunks of 8 consecutive entries, chunk k by thread k mod blockDim.x, in the
// same order in every form (so the bf16 forms compute what the fp32 forms compute on the widened
// values, bit for bit). Where the rows are 16-byte aligned and `stride` is a multiple of 8 (the
// bf16 logits GPT trains with: rows of a multiple of 64 values), a chunk below V is one or two
// 16-byte loads and stores; a row's last chunk, when V is not a multiple of 8, and every chunk
// elsewhere, is read and written value by value (so nothing at V or past it is touched).
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

// Entries v0 .. v0 + 7 of row d (stored rounded for bf16): a whole chunk below V in 16-byte
// stores where the rows allow, else one by one, never at V or past it (the padding stays as it is).
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

// One block per row and one read of it: each thread keeps the max of its entries (and where it
// is) and the sum of exp(z - that max) in double, rescaled when its max grows; then the block's
// max, and each thread's sum rescaled to it and summed. The CPU sums exp(z - max) against the
// row's max in a second pass: the same sum in other roundings (see the [cuda] test). An entry of
// -inf adds nothing (exp(-inf - max) = 0 for any finite max); a NaN makes the sum NaN, as there,
// and so does a row of -inf only (exp(-inf + inf) there).
// Nothing (B, V) is written. In: float, or uint16_t (bf16 bits).
template <class In>
__global__ void softmax_crossentropy_forward_kernel(float* losses, float* stats, int* argmax, const In* logits,
                                                    const int* targets, int V, int stride, bool whole) {
    __shared__ float fscratch[32];
    __shared__ int iscratch[32];
    __shared__ double dscratch[32];
    const long b = blockIdx.x;
    const In* z = logits + b * stride;
    // As the CPU: the scan starts from entry 0 (thread 0's first), so a row of -inf still names
    // index 0 and a NaN there is the max; every other entry replaces the pair only when strictly
    // larger (never a NaN).
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
    // Each thread's sum against the row's max (exact in double: both maxima are floats); a thread
    // with nothing to add (no entries, or only -inf) adds 0.
    sum = block_sum(sum != 0.0 ? sum * exp((double)own - (double)maxv) : 0.0, dscratch);
    if (maxv == -INFINITY) sum = NAN;  // every entry -inf
    if (threadIdx.x == 0) {
        stats[2 * b] = maxv;
        stats[2 * b + 1] = (float)(1.0 / sum);
        if (argmax) argmax[b] = arg;
        losses[b] = (float)(log(sum) + maxv - as_float(z[targets[b]]));
    }
}

// One block per row, in the forward's chunks. The probability is the forward's, expf(z - max) *
// (1 / sum), recomputed; __fmul_rn keeps each product rounded on its own (no fused
// multiply-subtract), as the CPU: p * scale, then minus scale at the target. A chunk is read whole
// before it is written, so dlogits may be logits. Out and In: float, or uint16_t for the bf16
// form (rounded as it is stored; widened as it is read).
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

// One launcher for each direction's forms (In, Out: float, or bf16 bits; rows `stride` apart).
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
