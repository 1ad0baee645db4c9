// matmul_forward_rows, the CUDA twin of src/backend/cpu/matmul_rows.cpp: each output's additions
// in an order fixed by C alone, so a row's bits do not depend on the call's other rows (cuBLAS picks
// kernel and split by row count); bf16 weights widened as read. Not for: training or prompts (cuBLAS).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

namespace dptrain::cuda {

namespace {

// Four warps a block: a 768-wide output still spreads over 192 blocks, more than an H200's SMs.
constexpr int kWarps = 4;       // warps a block, one output column each
constexpr int kRowsAtOnce = 8;  // rows a warp sums side by side: each weight value read once for 8

// Warp w of block b computes column b * kWarps + w for every row. Lane l adds elements l, l + 32,
// ... in order (one FMA chain), warp_sum's fixed butterfly adds the lanes, then the bias: the same
// operations for a row whatever B and its group of kRowsAtOnce. Loads are one 128-byte line a warp.
template <class W>
__global__ void matmul_forward_rows_kernel(float* out, const float* inp, const W* weight, const float* bias, int B,
                                           int C, int OC) {
    const long o = (long)blockIdx.x * kWarps + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (o >= OC) return;  // whole warps leave: warp_sum below stays full-warp
    const W* w = weight + o * C;
    const float b = bias ? bias[o] : 0.0f;
    for (int r0 = 0; r0 < B; r0 += kRowsAtOnce) {
        const int rows = min(kRowsAtOnce, B - r0);
        const float* x = inp + (long)r0 * C;
        float acc[kRowsAtOnce];
#pragma unroll
        for (int r = 0; r < kRowsAtOnce; ++r) acc[r] = 0.0f;
        // Unrolled so several loads of w are in flight (decoding waits on memory); each acc[r]
        // still adds in order of c.
#pragma unroll 4
        for (int c = lane; c < C; c += 32) {
            const float wv = as_float(w[c]);
#pragma unroll
            for (int r = 0; r < kRowsAtOnce; ++r)
                if (r < rows) acc[r] = fmaf(x[(long)r * C + c], wv, acc[r]);
        }
#pragma unroll
        for (int r = 0; r < kRowsAtOnce; ++r) {
            const float s = warp_sum(acc[r]);  // every lane takes part, also for rows past B
            if (lane == 0 && r < rows) out[(long)(r0 + r) * OC + o] = s + b;
        }
    }
}

template <class W>
void rows(float* out, const float* inp, const W* weight, const float* bias, int B, int C, int OC, cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && C > 0 && OC >= 0);
    if (B == 0 || OC == 0) return;
    const unsigned blocks = (unsigned)((OC + kWarps - 1) / kWarps);
    matmul_forward_rows_kernel<<<blocks, kWarps * 32, 0, stream>>>(out, inp, weight, bias, B, C, OC);
    CUDA_CHECK(cudaGetLastError());
}

__global__ void from_bf16_kernel(float* dst, const uint16_t* src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = as_float(src[i]);
}

} // namespace

void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream) {
    rows(out, inp, weight, bias, B, C, OC, stream);
}

void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC,
                         cudaStream_t stream) {
    rows(out, inp, weight, bias, B, C, OC, stream);
}

void from_bf16(float* dst, const bf16* src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    from_bf16_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(dst, src, n);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
