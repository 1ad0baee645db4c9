// Softmax + cross-entropy over rows of logits, the CUDA twin of src/cpu/crossentropy.cpp: one
// block per row, max subtracted, exponentials summed in double as the CPU does (a 50k-entry
// vocabulary summed in float would differ from it by ~1e-6 relative). The probabilities are never
// stored: at GPT-2 124M with B = 8 that is 1.65 GB of device memory and four of its passes less
// per step (forward reads the logits once, taking the max and the sum together, and writes two
// floats a row; backward reads them once and writes the gradient). The bf16 forms read the logits as bf16 (the classifier
// matmul's output, rounded as it was stored: half the bytes on every pass) and widen them exactly,
// so they compute what the fp32 forms compute on the widened values.
// Not for: fusing with the classifier matmul.
#include "dptrain/cuda_backend.h"

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

// One block per row and one read of it: each thread keeps the max of its entries (and where it
// is) and the sum of exp(z - that max) in double, rescaled when its max grows; then the block's
// max, and each thread's sum rescaled to it and summed. The CPU sums exp(z - max) against the
// row's max in a second pass: the same sum in other roundings (see the [cuda] test). An entry of
// -inf adds nothing (exp(-inf - max) = 0 for any finite max); a NaN makes the sum NaN, as there,
// and so does a row of -inf only (exp(-inf + inf) there).
// Nothing (B, V) is written. In: float, or uint16_t (bf16 bits).
template <class In>
__global__ void softmax_crossentropy_forward_kernel(float* losses, float* stats, int* argmax, const In* logits,
                                                    const int* targets, int V, int stride) {
    __shared__ float fscratch[32];
    __shared__ int iscratch[32];
    __shared__ double dscratch[32];
    const long b = blockIdx.x;
    const In* z = logits + b * stride;
    // As the CPU: the scan starts from entry 0 (so a row of -inf still names index 0, and a NaN
    // there is the max); every other entry replaces the pair only when strictly larger (never a NaN).
    float maxv = -INFINITY;
    int arg = INT_MAX;
    double sum = 0.0;  // of exp(z - maxv) over this thread's entries
    if (threadIdx.x == 0) {
        maxv = as_float(z[0]);
        arg = 0;
        sum = maxv != -INFINITY ? expf(maxv - maxv) : 0.0;  // 1, or NaN for a NaN
    }
    for (int v = threadIdx.x == 0 ? (int)blockDim.x : (int)threadIdx.x; v < V; v += blockDim.x) {
        const float x = as_float(z[v]);
        if (x > maxv) {
            // exp(-inf) = 0 for the first entry; x's own term is 1, or NaN for +inf (as the CPU's)
            sum = sum * exp((double)maxv - (double)x) + expf(x - x);
            maxv = x;
            arg = v;
        } else if (x != -INFINITY) {
            sum += expf(x - maxv);
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

// One block per row. The probability is the forward's, expf(z - max) * (1 / sum), recomputed;
// __fmul_rn keeps each product rounded on its own (no fused multiply-subtract), as the CPU: p *
// scale, then minus scale at the target. Each element reads its own logit before writing, so
// dlogits may be logits. Out and In: float, or uint16_t for the bf16 form (rounded as it is
// stored; widened as it is read).
template <class Out, class In>
__global__ void softmax_crossentropy_backward_kernel(Out* dlogits, const In* logits, const float* stats,
                                                     const int* targets, float scale, int V, int stride) {
    const long b = blockIdx.x;
    const In* z = logits + b * stride;
    Out* d = dlogits + b * stride;
    const float maxv = stats[2 * b], inv = stats[2 * b + 1];
    const int t = targets[b];
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        float g = __fmul_rn(__fmul_rn(expf(as_float(z[v]) - maxv), inv), scale);
        if (v == t) g -= scale;
        store_out(&d[v], g);
    }
}

// One launcher for each direction's forms (In, Out: float, or bf16 bits; rows `stride` apart).
template <class In>
static void forward_launch(float* losses, float* stats, int* argmax, const In* logits, const int* targets, int B,
                           int V, int stride, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return;
    CUDA_REQUIRE(stride >= V);
    softmax_crossentropy_forward_kernel<<<B, kRowThreads, 0, stream>>>(losses, stats, argmax, logits, targets, V,
                                                                         stride);
    CUDA_CHECK(cudaGetLastError());
}

template <class Out, class In>
static void backward_launch(Out* dlogits, const In* logits, const float* stats, const int* targets, float scale,
                            int B, int V, int stride, cudaStream_t stream) {
    if (B <= 0 || V <= 0) return;
    CUDA_REQUIRE(stride >= V);
    softmax_crossentropy_backward_kernel<<<B, kRowThreads, 0, stream>>>(dlogits, logits, stats, targets, scale, V,
                                                                          stride);
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
