// Causal self-attention without the T x T matrices (FlashAttention-2's schedule) on bf16 tensor
// cores through WMMA, fp32 sums and softmax: the twin of src/backend/cpu/flash_attention.cpp, tile
// for tile; this file the forward, flash_attention_backward.cu the backward. Design and rounding:
// docs/GPU.md, "Flash attention" and "Note [flash attention kernels]".
// Not for: head sizes other than 16, 32, 64 or 128 (the launchers refuse them).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "flash_attention.cuh"

#include <algorithm>
#include <cmath>

namespace dptrain::cuda {

namespace {

using namespace flash;

// A warp's end of the forward: lse = m + log l for its rows, then out = O / l (fp32 and/or bf16
// bits) by way of its scratch S, 1 / l kept where P was. Lanes as in the kernel.
template <int HS>
__device__ __forceinline__ void finish_rows(float* out, uint16_t* out16, float* lse, FragAcc* o, float* S, bf16_t* P,
                                            const float* m, const float* l, int qt, int b, int h, int T, int C, int NH) {
    using D = Dims<HS>;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const int j = lane >> 2, quad = lane & 3;
    const int row0 = qt * kTile + warp * 16 + j;  // and row0 + 8
    __syncwarp();  // every lane is done with the last tile's factors and P
    float* inv_l = reinterpret_cast<float*>(P);
    if (quad == 0)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            inv_l[j + 8 * e] = 1.0f / l[e];
            if (row0 + 8 * e < T) lse[((long)b * NH + h) * T + row0 + 8 * e] = m[e] + logf(l[e]);
        }
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) wm::store_matrix_sync(S + n * 16, o[n], D::LDF, wm::mem_row_major);
    __syncwarp();
    const int t0 = qt * kTile + warp * 16;
    const long first = ((long)b * T + t0) * C + (long)h * HS;
    for (int i = lane; i < 16 * HS; i += 32) {
        const int rr = i / HS, c = i % HS;
        if (t0 + rr >= T) continue;
        const float v = S[rr * D::LDF + c] * inv_l[rr];
        if (out) out[first + (long)rr * C + c] = v;
        if (out16) out16[first + (long)rr * C + c] = bf16_bits(v);
    }
}

template <int HS, class In>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(Dims<HS>::forward_bytes))
    flash_forward_kernel(float* out, uint16_t* out16, float* lse, const In* inp, int T, int C, int NH, float scale) {
    using D = Dims<HS>;
    static_assert(FragAcc::num_elements * 32 == 16 * 16, "every element of an accumulator in one lane");
    extern __shared__ __align__(128) unsigned char smem[];
    bf16_t* Qs = reinterpret_cast<bf16_t*>(smem);
    bf16_t* Ks = Qs + kTile * D::LDB;
    bf16_t* Vs = Ks + kTile * D::LDB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    unsigned char* scratch = smem + 3 * D::tile_bytes;  // per warp: S (and the factors), then P
    float* S = reinterpret_cast<float*>(scratch + warp * D::f_bytes);
    bf16_t* P = reinterpret_cast<bf16_t*>(scratch + kWarps * D::f_bytes + warp * D::p_bytes);

    const int nq = (T + kTile - 1) / kTile;
    const int qt = nq - 1 - (int)blockIdx.x;  // the longest rows start first
    const int h = blockIdx.y, b = blockIdx.z;
    const long C3 = 3L * C;
    const In* q = inp + (long)b * T * C3 + (long)h * HS;
    load_tile<HS, In>(Qs, q, qt * kTile, T, C3);
    __syncthreads();
    FragA qf[HS / 16];  // this warp's 16 queries, for every key tile
    load_rows<HS>(qf, Qs + warp * 16 * D::LDB, D::LDB);

    // Lanes 4j..4j+3 own rows j and j+8 (j = lane / 4), columns lane % 4 + 4i: with LDF = 4 mod 32,
    // a warp's 32 reads of S hit 32 banks. Each lane keeps its two rows' m and l.
    const int j = lane >> 2, quad = lane & 3;
    const int row0 = qt * kTile + warp * 16 + j;  // and row0 + 8
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    FragAcc o[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) wm::fill_fragment(o[n], 0.0f);

    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads();  // every warp is done with the last tile's K and V
        load_tile<HS, In>(Ks, q + C, kt * kTile, T, C3);
        load_tile<HS, In>(Vs, q + 2 * C, kt * kTile, T, C3);
        __syncthreads();
        rows_times_tile_t<HS>(S, qf, Ks);
        __syncwarp();
        // Every row sees a key per tile, so the max is finite (no exp(-inf - -inf)). The fmas are
        // written out as the twin's std::fma: docs/GPU.md, "Note [flash attention kernels]".
        float alpha[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {  // m, l and alpha stay in registers (e unrolled)
            const int rl = j + 8 * e, row = row0 + 8 * e;
            float mx = -INFINITY;
#pragma unroll 4
            for (int i = 0; i < kTile / 4; ++i) {
                const int c = quad + 4 * i, col = kt * kTile + c;
                if (col <= row && col < T) mx = fmaxf(mx, S[rl * D::LDF + c] * scale);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float mnew = fmaxf(m[e], mx);
            float sum = 0.0f;
#pragma unroll 4
            for (int i = 0; i < kTile / 4; ++i) {
                const int c = quad + 4 * i, col = kt * kTile + c;
                const float p = col <= row && col < T ? expf(__fmaf_rn(S[rl * D::LDF + c], scale, -mnew)) : 0.0f;
                sum += p;
                P[rl * D::LDP + c] = __float2bfloat16(p);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            alpha[e] = expf(m[e] - mnew);  // 0 on the first tile (m = -inf)
            l[e] = __fmaf_rn(l[e], alpha[e], sum);
            m[e] = mnew;
        }
        // The rows' factors as a 16 x 16 column-major matrix over S (read by now), so each element
        // meets its row's factor whatever WMMA's layout: lane k writes row R = k % 16's, from lane
        // 4 (R % 8), which holds it as its row R / 8.
        const int R = lane & 15;
        const float a0 = __shfl_sync(0xffffffffu, alpha[0], 4 * (R & 7));
        const float a1 = __shfl_sync(0xffffffffu, alpha[1], 4 * (R & 7));
        const float alpha_R = R < 8 ? a0 : a1;
        __syncwarp();
        for (int i = lane; i < 16 * 16; i += 32) S[i] = alpha_R;
        __syncwarp();
        FragAcc scale_rows;
        wm::load_matrix_sync(scale_rows, S, 16, wm::mem_col_major);
        FragAcc pv[HS / 16];
#pragma unroll
        for (int n = 0; n < HS / 16; ++n) wm::fill_fragment(pv[n], 0.0f);
        p_times_tile<HS>(pv, P, Vs);
#pragma unroll
        for (int n = 0; n < HS / 16; ++n)
#pragma unroll
            for (int i = 0; i < FragAcc::num_elements; ++i)
                o[n].x[i] = __fmaf_rn(o[n].x[i], scale_rows.x[i], pv[n].x[i]);
    }
    finish_rows<HS>(out, out16, lse, o, S, P, m, l, qt, b, h, T, C, NH);
}

template <int HS> size_t shared_bytes() {
    return std::max(Dims<HS>::forward_bytes, Dims<HS>::backward_bytes);
}

template <int HS, class In>
void forward_hs(float* out, bf16* out16, float* lse, const In* inp, int B, int T, int C, int NH,
                cudaStream_t stream) {
    allow_smem(flash_forward_kernel<HS, In>, Dims<HS>::forward_bytes);
    const dim3 grid((T + kTile - 1) / kTile, NH, B);
    const float scale = 1.0f / sqrtf((float)HS);
    flash_forward_kernel<HS, In><<<grid, kThreads, Dims<HS>::forward_bytes, stream>>>(out, out16, lse, inp, T, C, NH,
                                                                                   scale);
    CUDA_CHECK(cudaGetLastError());
}

template <class In>
void forward_any(float* out, bf16* out16, float* lse, const In* inp, int B, int T, int C, int NH,
                 cudaStream_t stream) {
    CUDA_REQUIRE(cpu::flash_attention_supported(C, NH) && B > 0 && T > 0);
    CUDA_REQUIRE((!std::is_same<In, uint16_t>::value || aligned16(inp)));
    switch (C / NH) {
        case 16: forward_hs<16>(out, out16, lse, inp, B, T, C, NH, stream); break;
        case 32: forward_hs<32>(out, out16, lse, inp, B, T, C, NH, stream); break;
        case 64: forward_hs<64>(out, out16, lse, inp, B, T, C, NH, stream); break;
        default: forward_hs<128>(out, out16, lse, inp, B, T, C, NH, stream); break;
    }
}

} // namespace

size_t flash_attention_shared_bytes(int C, int NH) {
    CUDA_REQUIRE(cpu::flash_attention_supported(C, NH));
    switch (C / NH) {
        case 16: return shared_bytes<16>();
        case 32: return shared_bytes<32>();
        case 64: return shared_bytes<64>();
        default: return shared_bytes<128>();
    }
}

void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH,
                             cudaStream_t stream) {
    forward_any(out, nullptr, lse, inp, B, T, C, NH, stream);
}

void flash_attention_forward_bf16(float* out, bf16* out16, float* lse, const bf16* inp, int B, int T, int C, int NH,
                                  cudaStream_t stream) {  // out may be null
    CUDA_REQUIRE(out16 != nullptr);
    forward_any(out, out16, lse, inp, B, T, C, NH, stream);
}

} // namespace dptrain::cuda
