// Flash attention's backward: delta = rowsum(dout * out), then dK and dV per key tile and dQ per
// query tile, each recomputing P from the forward's lse (two kernels, no atomics: the same bits on
// every run). The forward and the design: flash_attention.cu, docs/GPU.md.
// Not for: head sizes other than 16, 32, 64 or 128 (the launchers refuse them).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "flash_attention.cuh"

#include <cmath>

namespace dptrain::cuda {

namespace {

using namespace flash;

// Backward's shared memory: the two tiles loaded every step, a query tile's lse and delta, and per
// warp S, dP (fp32), P, dS (bf16). The two tiles loaded once lie where the warps' scratch goes:
// each warp takes its rows into fragments, and the block syncs, before any warp writes scratch.
template <int HS> struct BackwardSmem {
    bf16_t *step0, *step1, *fixed0, *fixed1, *P, *dS;
    float *lse, *delta, *S, *dP;
    __device__ BackwardSmem(unsigned char* smem, int warp) {
        using D = Dims<HS>;
        step0 = reinterpret_cast<bf16_t*>(smem);
        step1 = step0 + kTile * D::LDB;
        lse = reinterpret_cast<float*>(step1 + kTile * D::LDB);
        delta = lse + kTile;
        unsigned char* scratch = reinterpret_cast<unsigned char*>(delta + kTile);
        fixed0 = reinterpret_cast<bf16_t*>(scratch);
        fixed1 = fixed0 + kTile * D::LDB;
        unsigned char* mine = scratch + warp * 2 * (D::f_bytes + D::p_bytes);
        S = reinterpret_cast<float*>(mine);
        dP = S + 16 * D::LDF;
        P = reinterpret_cast<bf16_t*>(dP + 16 * D::LDF);
        dS = P + 16 * D::LDP;
    }
};

// Fragments (16 x HS) via the scratch to rows t0.. of dst, times mul; rows past T skipped.
template <int HS, class Out>
__device__ void store_rows(Out* dst, long ld, int t0, int T, FragAcc* acc, float* S, float mul) {
    constexpr int LDF = Dims<HS>::LDF;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) wm::store_matrix_sync(S + n * 16, acc[n], LDF, wm::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * HS; i += 32) {
        const int r = i / HS, c = i % HS;
        if (t0 + r < T) store_out(&dst[(long)(t0 + r) * ld + c], S[r * LDF + c] * mul);
    }
    __syncwarp();
}

// delta[b, h, t] = sum of dout * out over the head: a warp per (b, t, h). Dy: float or bf16 bits.
template <class Dy>
__global__ void flash_delta_kernel(float* delta, const Dy* dout, const Dy* out, int B, int T, int C, int NH) {
    const int hs = C / NH, lane = threadIdx.x & 31;
    const long rows = (long)B * T * NH;
    const long warps = (long)gridDim.x * (blockDim.x / 32);
    for (long w = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < rows; w += warps) {
        const long bt = w / NH;
        const int h = (int)(w % NH);
        const Dy* d = dout + bt * C + (long)h * hs;
        const Dy* o = out + bt * C + (long)h * hs;
        float s = 0.0f;
        for (int c = lane; c < hs; c += 32) s += as_float(d[c]) * as_float(o[c]);
        s = warp_sum(s);
        const long b = bt / T, t = bt % T;
        if (lane == 0) delta[(b * NH + h) * T + t] = s;
    }
}

// dK and dV of 64 keys, 16 a warp, over the query tiles from the diagonal on.
template <int HS, class In, class Out, class Dy>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(Dims<HS>::backward_bytes))
    flash_dkv_kernel(Out* dinp, const Dy* dout, const In* inp, const float* lse, const float* delta, int T,
                     int C, int NH, float scale) {
    using D = Dims<HS>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const BackwardSmem<HS> sm(smem, warp);
    // K and V only until the first step's __syncthreads (the warps' scratch then takes their place).
    bf16_t *Ks = sm.fixed0, *Vs = sm.fixed1, *Qs = sm.step0, *dOs = sm.step1, *P = sm.P, *dS = sm.dS;
    float *lse_s = sm.lse, *delta_s = sm.delta, *S = sm.S, *dP = sm.dP;

    const int nq = (T + kTile - 1) / kTile;
    const int kt = blockIdx.x;  // the most query tiles start first
    const int h = blockIdx.y, b = blockIdx.z;
    const long C3 = 3L * C;
    const In* q = inp + (long)b * T * C3 + (long)h * HS;
    const Dy* d = dout + (long)b * T * C + (long)h * HS;
    const float* lse_bh = lse + ((long)b * NH + h) * T;
    const float* delta_bh = delta + ((long)b * NH + h) * T;
    load_tile<HS, In>(Ks, q + C, kt * kTile, T, C3);
    load_tile<HS, In>(Vs, q + 2 * C, kt * kTile, T, C3);
    __syncthreads();
    FragA kf[HS / 16], vf[HS / 16];  // this warp's 16 keys and their values, for every query tile
    load_rows<HS>(kf, Ks + warp * 16 * D::LDB, D::LDB);
    load_rows<HS>(vf, Vs + warp * 16 * D::LDB, D::LDB);

    FragAcc dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) {
        wm::fill_fragment(dk[n], 0.0f);
        wm::fill_fragment(dv[n], 0.0f);
    }
    // Lane layout as in the forward; rows here are keys.
    const int j = lane >> 2, quad = lane & 3;
    const int key0 = kt * kTile + warp * 16 + j;  // and key0 + 8
    for (int qt = kt; qt < nq; ++qt) {
        __syncthreads();  // every warp is done with the last query tile
        load_tile<HS, In>(Qs, q, qt * kTile, T, C3);
        load_tile<HS, Dy>(dOs, d, qt * kTile, T, C);
        for (int i = threadIdx.x; i < kTile; i += kThreads) {
            const int t = qt * kTile + i;
            lse_s[i] = t < T ? lse_bh[t] : 0.0f;
            delta_s[i] = t < T ? delta_bh[t] : 0.0f;
        }
        __syncthreads();
        // Transposed: rows are this warp's keys, columns the tile's queries.
        rows_times_tile_t<HS>(S, kf, Qs);    // S^T = K Q^T
        rows_times_tile_t<HS>(dP, vf, dOs);  // dP^T = V dO^T
        __syncwarp();
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll 1  // unrolled, it spills within 3 blocks' registers
            for (int i = 0; i < kTile / 4; ++i) {
                const int rl = j + 8 * e, c = quad + 4 * i, query = qt * kTile + c;
                float p = 0.0f, ds = 0.0f;
                if (key0 + 8 * e <= query && query < T) {
                    p = expf(__fmaf_rn(S[rl * D::LDF + c], scale, -lse_s[c]));
                    ds = p * (dP[rl * D::LDF + c] - delta_s[c]);
                }
                P[rl * D::LDP + c] = __float2bfloat16(p);
                dS[rl * D::LDP + c] = __float2bfloat16(ds);
            }
        __syncwarp();
        p_times_tile<HS>(dv, P, dOs);  // dV += P^T dO
        p_times_tile<HS>(dk, dS, Qs);  // dK += dS^T Q (times scale at the end)
    }
    const int t0 = kt * kTile + warp * 16;
    Out* dk_out = dinp + (long)b * T * C3 + C + (long)h * HS;
    store_rows<HS>(dk_out, C3, t0, T, dk, S, scale);
    store_rows<HS>(dk_out + C, C3, t0, T, dv, S, 1.0f);
}

// dQ of 64 queries, 16 a warp, over the key tiles up to the diagonal.
template <int HS, class In, class Out, class Dy>
__global__ void __launch_bounds__(kThreads, blocks_per_sm(Dims<HS>::backward_bytes))
    flash_dq_kernel(Out* dinp, const Dy* dout, const In* inp, const float* lse, const float* delta, int T,
                    int C, int NH, float scale) {
    using D = Dims<HS>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    const BackwardSmem<HS> sm(smem, warp);  // its lse, delta and P unused here
    // Q and dO only until the first step's __syncthreads (the warps' scratch then takes their place).
    bf16_t *Ks = sm.step0, *Vs = sm.step1, *Qs = sm.fixed0, *dOs = sm.fixed1, *dS = sm.dS;
    float *S = sm.S, *dP = sm.dP;

    const int nq = (T + kTile - 1) / kTile;
    const int qt = nq - 1 - (int)blockIdx.x;  // the most key tiles start first
    const int h = blockIdx.y, b = blockIdx.z;
    const long C3 = 3L * C;
    const In* q = inp + (long)b * T * C3 + (long)h * HS;
    const Dy* d = dout + (long)b * T * C + (long)h * HS;
    load_tile<HS, In>(Qs, q, qt * kTile, T, C3);
    load_tile<HS, Dy>(dOs, d, qt * kTile, T, C);
    __syncthreads();
    FragA qf[HS / 16], df[HS / 16];  // this warp's 16 queries and their output gradients
    load_rows<HS>(qf, Qs + warp * 16 * D::LDB, D::LDB);
    load_rows<HS>(df, dOs + warp * 16 * D::LDB, D::LDB);

    // Lane layout as in the forward.
    const int j = lane >> 2, quad = lane & 3;
    const int query0 = qt * kTile + warp * 16 + j;  // and query0 + 8
    float lse_r[2], delta_r[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int query = query0 + 8 * e;
        const long stat = ((long)b * NH + h) * T + query;
        lse_r[e] = query < T ? lse[stat] : 0.0f;
        delta_r[e] = query < T ? delta[stat] : 0.0f;
    }
    FragAcc dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) wm::fill_fragment(dq[n], 0.0f);
    for (int kt = 0; kt <= qt; ++kt) {
        __syncthreads();  // every warp is done with the last key tile
        load_tile<HS, In>(Ks, q + C, kt * kTile, T, C3);
        load_tile<HS, In>(Vs, q + 2 * C, kt * kTile, T, C3);
        __syncthreads();
        rows_times_tile_t<HS>(S, qf, Ks);   // S = Q K^T
        rows_times_tile_t<HS>(dP, df, Vs);  // dP = dO V^T
        __syncwarp();
#pragma unroll
        for (int e = 0; e < 2; ++e)
#pragma unroll 1  // unrolled, it spills within 3 blocks' registers
            for (int i = 0; i < kTile / 4; ++i) {
                const int rl = j + 8 * e, c = quad + 4 * i, key = kt * kTile + c, query = query0 + 8 * e;
                float ds = 0.0f;
                if (key <= query && query < T) {
                    const float p = expf(__fmaf_rn(S[rl * D::LDF + c], scale, -lse_r[e]));
                    ds = p * (dP[rl * D::LDF + c] - delta_r[e]);
                }
                dS[rl * D::LDP + c] = __float2bfloat16(ds);
            }
        __syncwarp();
        p_times_tile<HS>(dq, dS, Ks);  // dQ += dS K (times scale at the end)
    }
    store_rows<HS>(dinp + (long)b * T * C3 + (long)h * HS, C3, qt * kTile + warp * 16, T, dq, S, scale);
}

template <int HS, class In, class Out, class Dy>
void backward_hs(Out* dinp, const Dy* dout, const In* inp, const float* lse, const float* delta, int B, int T,
                 int C, int NH, cudaStream_t stream) {
    allow_smem(flash_dkv_kernel<HS, In, Out, Dy>, Dims<HS>::backward_bytes);
    allow_smem(flash_dq_kernel<HS, In, Out, Dy>, Dims<HS>::backward_bytes);
    const dim3 grid((T + kTile - 1) / kTile, NH, B);
    const float scale = 1.0f / sqrtf((float)HS);
    const size_t bytes = Dims<HS>::backward_bytes;
    flash_dkv_kernel<HS, In, Out, Dy><<<grid, kThreads, bytes, stream>>>(dinp, dout, inp, lse, delta, T, C, NH,
                                                                       scale);
    CUDA_CHECK(cudaGetLastError());
    flash_dq_kernel<HS, In, Out, Dy><<<grid, kThreads, bytes, stream>>>(dinp, dout, inp, lse, delta, T, C, NH,
                                                                      scale);
    CUDA_CHECK(cudaGetLastError());
}

template <class In, class Out, class Dy>
void backward_any(Out* dinp, float* delta, const Dy* dout, const In* inp, const Dy* out, const float* lse, int B,
                  int T, int C, int NH, cudaStream_t stream) {
    CUDA_REQUIRE(cpu::flash_attention_supported(C, NH) && B > 0 && T > 0);
    CUDA_REQUIRE((!std::is_same<In, uint16_t>::value || aligned16(inp)));
    CUDA_REQUIRE((!std::is_same<Dy, uint16_t>::value || aligned16(dout)));
    flash_delta_kernel<<<grid_for((long)B * T * NH * 32, 256), 256, 0, stream>>>(delta, dout, out, B, T, C, NH);
    CUDA_CHECK(cudaGetLastError());
    switch (C / NH) {
        case 16: backward_hs<16>(dinp, dout, inp, lse, delta, B, T, C, NH, stream); break;
        case 32: backward_hs<32>(dinp, dout, inp, lse, delta, B, T, C, NH, stream); break;
        case 64: backward_hs<64>(dinp, dout, inp, lse, delta, B, T, C, NH, stream); break;
        default: backward_hs<128>(dinp, dout, inp, lse, delta, B, T, C, NH, stream); break;
    }
}

} // namespace

void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    backward_any(dinp, delta, dout, inp, out, lse, B, T, C, NH, stream);
}

void flash_attention_backward_bf16(bf16* dinp, float* delta, const bf16* dout, const bf16* inp, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    backward_any(dinp, delta, dout, inp, out, lse, B, T, C, NH, stream);
}

} // namespace dptrain::cuda
