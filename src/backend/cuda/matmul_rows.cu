// matmul_forward_rows, the CUDA twin of src/backend/cpu/matmul_rows.cpp: each output's additions
// in an order fixed by C (and whether the matrix starts on 16 bytes) alone, so a row's bits do not
// depend on the call's other rows (cuBLAS picks kernel and split by row count); bf16 weights
// widened as read. Why: docs/GPU.md, "Note [matmul_rows order]". Not for: training or prompts.
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

namespace dptrain::cuda {

namespace {

// Four warps a block: a 768-wide output still spreads over 192 blocks, more than an H200's SMs.
constexpr int kWarps = 4;       // warps a block, one output column each
constexpr int kRowsAtOnce = 8;  // rows a warp sums side by side: each weight value read once for 8

// Eight consecutive weights of one row, widened: two float4 loads, or one 16-byte load of bf16.
__device__ inline void load8(float (&w)[8], const float* p) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}
__device__ inline void load8(float (&w)[8], const uint16_t* p) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {  // the earlier element in the lower half (little-endian)
        w[2 * e] = __uint_as_float(u[e] << 16);
        w[2 * e + 1] = __uint_as_float(u[e] & 0xFFFF0000u);
    }
}

// Warp w of block b computes column b * kWarps + w for every row, kRowsAtOnce rows side by side,
// then warp_sum's fixed butterfly adds the lanes, then the bias: the same operations for a row
// whatever B and its group of rows. Each lane's sum is one FMA chain in order of c:
// - narrow: lane l adds elements l, l + 32, ...; a warp's load is one 128-byte line of fp32;
// - Wide (C a multiple of 8, rows and weights aligned: rows()): lane l adds the eight elements
//   from 8 (l + 32 j), j = 0, 1, ..., in order; each weight load is 16 bytes a lane, a warp's 512
//   bytes of bf16 (64 as 2-byte loads).
// Either way a row's order is fixed by C and the form, and the same for fp32 and bf16 weights (bf16
// is the fp32 form's bits on the widened weights).
template <bool Wide, class W>
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
        if constexpr (Wide) {
#pragma unroll 2
            for (int c = 8 * lane; c < C; c += 256) {
                float wv[8];
                load8(wv, w + c);
#pragma unroll
                for (int r = 0; r < kRowsAtOnce; ++r) {
                    if (r >= rows) continue;
                    float xv[8];
                    load8(xv, x + (long)r * C + c);
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[r] = fmaf(xv[e], wv[e], acc[r]);
                }
            }
        } else {
            // Unrolled so several loads of w are in flight (decoding waits on memory).
#pragma unroll 4
            for (int c = lane; c < C; c += 32) {
                const float wv = as_float(w[c]);
#pragma unroll
                for (int r = 0; r < kRowsAtOnce; ++r)
                    if (r < rows) acc[r] = fmaf(x[(long)r * C + c], wv, acc[r]);
            }
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
    // Fixed for a matrix and width: a row's path, and so its bits, do not change between calls.
    // The weights start on eight elements' bytes, so that fp32 and bf16 weights at one offset of a
    // (256-byte aligned) buffer take the same path, and the same order.
    if (C % 8 == 0 && aligned16(inp) && (uintptr_t)weight % (8 * sizeof(W)) == 0)
        matmul_forward_rows_kernel<true><<<blocks, kWarps * 32, 0, stream>>>(out, inp, weight, bias, B, C, OC);
    else
        matmul_forward_rows_kernel<false><<<blocks, kWarps * 32, 0, stream>>>(out, inp, weight, bias, B, C, OC);
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
