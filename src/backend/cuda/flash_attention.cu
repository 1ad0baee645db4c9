// Causal self-attention without the T x T matrices (FlashAttention-2's schedule), on bf16 tensor
// cores through WMMA, with fp32 sums and an fp32 softmax. The CUDA twin of
// src/cpu/flash_attention.cpp, which computes the same tiles in the same order of tiles.
//
// Forward: a block of 4 warps takes 64 queries of one (sequence, head), 16 per warp, and walks the
// key tiles of 64 up to the diagonal. Per tile a warp computes S = Q K^T (bf16 operands rounded
// from the fp32 activations as they are loaded into shared memory), keeps each row's running
// maximum m and sum l, rescales its output rows by exp(m_old - m_new) and adds bf16(P) V. At the
// end out = O / l and lse = m + log l (per query, kept for backward).
// Backward: delta = rowsum(dout * out) first (the bf16 form from dout and out in bf16, as
// FlashAttention-2 takes them); then one kernel per key tile accumulates dK and dV
// over the query tiles from the diagonal on, and one kernel per query tile accumulates dQ over the
// key tiles up to the diagonal, each recomputing P = exp(S * scale - lse). Two kernels instead of
// float atomics, so the gradients are the same on every run.
// Every output accumulator (O, dK, dV, dQ) stays in fragments. The forward's output rows are
// rescaled there too, by a fragment loaded from a 16 x 16 matrix whose row r is the factor of row
// r: element i of it then belongs to the same row as element i of the output's fragments, whatever
// WMMA's element-to-row mapping is (it is not specified). A warp's own 16 rows of the operand
// that stays put (Q forward, K and V for dK and dV, Q and dO for dQ) are loaded into fragments
// once; P and dS once per tile.
// Rounding points: the exp arguments S * scale - m and the rescalings O * alpha + PV and
// l * alpha + sum are fused multiply-adds, written out (__fmaf_rn) as the twin writes them
// (std::fma). What stays different: expf and logf against the host's (an ulp), the tensor cores'
// fp32 sums (another order, and they may truncate), a tile's sum of P (four lanes' partial sums
// added), and delta's sum (a warp's order, contracted to fused multiply-adds by nvcc); so a P or
// dS rounded to bf16 can land on the neighbouring value on one side. Tests allow for it.
// Not for: head sizes other than 16, 32, 64 or 128 (the launchers refuse them).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

namespace dptrain::cuda {

namespace {

namespace wm = nvcuda::wmma;
using bf16_t = __nv_bfloat16;

constexpr int kTile = 64;   // queries per block, keys per tile
constexpr int kWarps = 4;   // 16 rows each
constexpr int kThreads = 32 * kWarps;

using FragA = wm::fragment<wm::matrix_a, 16, 16, 16, bf16_t, wm::row_major>;
using FragBCol = wm::fragment<wm::matrix_b, 16, 16, 16, bf16_t, wm::col_major>;
using FragBRow = wm::fragment<wm::matrix_b, 16, 16, 16, bf16_t, wm::row_major>;
using FragAcc = wm::fragment<wm::accumulator, 16, 16, 16, float>;

// Leading dimensions in shared memory: padded against bank conflicts, multiples of 8 (bf16) and
// 4 (fp32) values as WMMA requires, and every 16-row slice starts 32-byte aligned.
template <int HS> struct Dims {
    static constexpr int LDB = HS + 8;                   // a 64 x HS bf16 tile (Q, K, V, dO)
    static constexpr int LDF = (HS > kTile ? HS : kTile) + 4;  // a warp's 16 x (64 or HS) fp32 scratch
    static constexpr int LDP = kTile + 8;                // a warp's 16 x 64 bf16 (P, dS)
    // Rows 4 banks apart: the softmax's 8 rows x 4 columns at a time fall in 32 banks.
    static_assert(LDF % 32 == 4 && (LDP / 2) % 32 == 4, "S's and P's rows 4 banks apart");
    static constexpr size_t tile_bytes = (size_t)kTile * LDB * sizeof(bf16_t);
    static constexpr size_t f_bytes = (size_t)16 * LDF * sizeof(float);
    static constexpr size_t p_bytes = (size_t)16 * LDP * sizeof(bf16_t);
    static constexpr size_t forward_bytes = 3 * tile_bytes + kWarps * (f_bytes + p_bytes);
    static constexpr size_t scratch_bytes = kWarps * 2 * (f_bytes + p_bytes);  // backward's, all warps
    static constexpr size_t backward_bytes = 2 * tile_bytes + 2 * kTile * sizeof(float) + scratch_bytes;
    static_assert(2 * tile_bytes <= scratch_bytes, "backward's fixed tiles fit where the warps' scratch goes");
};

// How many blocks of `bytes` of shared memory share an SM (1 KiB of it reserved per block), at
// most 8: each kernel's launch bounds, so that registers do not hold fewer blocks than the shared
// memory allows (on an H100 or H200 at head size 64: 4 forward, at most 128 registers a thread,
// and 3 backward, at most 168; at 128: 2 and 1).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr size_t kSmemPerSm = 164 * 1024;  // A100 (sm_80)
#else
constexpr size_t kSmemPerSm = 228 * 1024;  // H100, H200 (sm_90)
#endif
constexpr int blocks_per_sm(size_t bytes) {
    const size_t n = kSmemPerSm / (bytes + 1024);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

// Both backward kernels' shared memory: the two 64 x HS bf16 tiles loaded at every step (Q and dO
// for dK and dV, K and V for dQ), a query tile's lse and delta, and per warp S and dP (fp32) and P
// and dS (bf16). The two tiles a kernel loads once (K and V, or Q and dO) lie where the warps'
// scratch goes: each warp takes its rows of them into fragments, and the block synchronizes,
// before any warp writes its scratch. 70.5 KiB a block at head size 64 instead of 88.5: 3 blocks
// per SM on an H100 or H200, not 2.
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

// Rows t0 .. t0+63 of one head's q, k, v or dout (HS values each, `ld` apart, starting at src,
// fp32 or bf16) into a bf16 tile; rows past T are zeros. fp32 is rounded value by value; bf16 is
// copied as it is (the same values for bits that are the fp32 values rounded), in 16-byte pieces
// (8 values: a row is HS / 8 of them), so src, ld and the head's offset must keep every row
// 16-byte aligned (the launchers check the pointers; C and HS are multiples of 8), as the tile's
// rows are (LDB a multiple of 8 values).
template <int HS, class In>
__device__ void load_tile(bf16_t* dst, const In* src, int t0, int T, long ld) {
    constexpr int LDB = Dims<HS>::LDB;
    if constexpr (std::is_same<In, uint16_t>::value) {
        constexpr int kPieces = HS / 8;
        for (int i = threadIdx.x; i < kTile * kPieces; i += kThreads) {
            const int r = i / kPieces, c = (i % kPieces) * 8, t = t0 + r;
            *reinterpret_cast<uint4*>(dst + r * LDB + c) =
                t < T ? *reinterpret_cast<const uint4*>(src + (long)t * ld + c) : make_uint4(0u, 0u, 0u, 0u);
        }
    } else {
        for (int i = threadIdx.x; i < kTile * HS; i += kThreads) {
            const int r = i / HS, c = i % HS, t = t0 + r;
            dst[r * LDB + c] = __float2bfloat16(t < T ? src[(long)t * ld + c] : 0.0f);  // nearest even
        }
    }
}

// A warp's 16 rows (16 x K bf16, row-major, lda apart) as K / 16 WMMA A fragments, held in
// registers for every product they take part in.
template <int K>
__device__ void load_rows(FragA* fa, const bf16_t* a, int lda) {
#pragma unroll
    for (int k = 0; k < K / 16; ++k) wm::load_matrix_sync(fa[k], a + k * 16, lda);
}

// acc += A (16 x K, as load_rows holds it) . B (K x 16), K a multiple of 16. B is read col-major
// (column n's K values contiguous: B = X^T for a row-major X) or row-major, as FragB says.
template <int K, typename FragB>
__device__ void mma_rows(FragAcc& acc, const FragA* fa, const bf16_t* b, int ldb) {
    constexpr bool b_col = std::is_same<FragB, FragBCol>::value;
#pragma unroll
    for (int k = 0; k < K / 16; ++k) {
        FragB fb;
        wm::load_matrix_sync(fb, b_col ? b + k * 16 : b + (long)k * 16 * ldb, ldb);
        wm::mma_sync(acc, fa[k], fb, acc);
    }
}

// S (16 x 64) = A (16 x HS rows, load_rows') . X^T, X a 64 x HS bf16 tile: into a warp's fp32
// scratch.
template <int HS>
__device__ void rows_times_tile_t(float* S, const FragA* A, const bf16_t* X) {
    constexpr int LDB = Dims<HS>::LDB, LDF = Dims<HS>::LDF;
#pragma unroll
    for (int n = 0; n < kTile / 16; ++n) {
        FragAcc acc;
        wm::fill_fragment(acc, 0.0f);
        mma_rows<HS, FragBCol>(acc, A, X + n * 16 * LDB, LDB);
        wm::store_matrix_sync(S + n * 16, acc, LDF, wm::mem_row_major);
    }
}

// acc[n] += P (16 x 64, bf16, LDP apart, in the warp's scratch) . X[:, 16n .. 16n+15], X a
// 64 x HS bf16 tile. P's four fragments are loaded once for the HS / 16 products.
template <int HS>
__device__ void p_times_tile(FragAcc* acc, const bf16_t* P, const bf16_t* X) {
    constexpr int LDB = Dims<HS>::LDB, LDP = Dims<HS>::LDP;
    FragA pf[kTile / 16];
    load_rows<kTile>(pf, P, LDP);
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) mma_rows<kTile, FragBRow>(acc[n], pf, X + n * 16, LDB);
}

// One head's fragments (16 x HS) through the warp's scratch to rows t0.. of dst (`ld` apart),
// times `mul`; rows past T are not written. Out: float, or uint16_t (rounded to bf16 as stored).
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

    // Rows j and j + 8 of the warp's 16 (j = lane / 4) belong to lanes 4j .. 4j + 3, each with the
    // columns lane % 4 + 4i of S and P: with S's rows LDF = 4 (mod 32) floats apart, the 32 lanes
    // read 32 banks at once. Every lane keeps its two rows' m and l.
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
        // Every row sees at least one key per tile (key kt*64 <= its query, and < T), so the
        // maximum is finite and no exp(-inf - -inf) arises. The fused multiply-adds are written
        // out, as the CPU twin writes them (std::fma), so both round at the same points.
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
        // The rows' factors as a 16 x 16 column-major matrix over S (read by now): lane k writes
        // row R = k % 16's 8 times, taken from lane 4 (R % 8), which holds it as its row R / 8.
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
    // o through the scratch and 1 / l per row in P's place, then the warp writes its 16 rows with
    // consecutive lanes on consecutive values (and with out16, else null, each value rounded to
    // bf16 there too).
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

// delta[b, h, t] = sum over the head's HS values of dout * out: one warp per (b, t, h). Dy: float,
// or uint16_t (bf16, widened exactly: the fp32 form's sum on the widened values).
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

// dK and dV of 64 keys: the block's warps own 16 keys each and walk the query tiles from the
// diagonal on.
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
    // Lanes 4j .. 4j + 3 (j = lane / 4): keys j and j + 8 of the warp's 16, columns lane % 4 + 4i
    // (32 banks at once, as in the forward).
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

// dQ of 64 queries: the block's warps own 16 queries each and walk the key tiles up to the
// diagonal.
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

    // Lanes 4j .. 4j + 3 (j = lane / 4): queries j and j + 8 of the warp's 16, columns lane % 4 + 4i
    // (32 banks at once, as in the forward).
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

// Past 48 KiB of dynamic shared memory a kernel must opt in, per device: once for each kernel and
// device (two host-side attribute writes, kept out of every later launch; a device reset would
// clear them, and dptrain never resets one). The largest
// shared-memory carveout is asked for too (a hint to the driver), so that as many blocks as their
// shared memory allows share an SM.
template <typename Kernel> void allow_smem(Kernel k, size_t bytes) {
    static std::mutex mutex;
    static std::set<std::pair<const void*, int>> done;  // (kernel, device)
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mutex);
    if (!done.insert({reinterpret_cast<const void*>(k), device}).second) return;
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
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

void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    backward_any(dinp, delta, dout, inp, out, lse, B, T, C, NH, stream);
}

void flash_attention_backward_bf16(bf16* dinp, float* delta, const bf16* dout, const bf16* inp, const bf16* out,
                                   const float* lse, int B, int T, int C, int NH, cudaStream_t stream) {
    backward_any(dinp, delta, dout, inp, out, lse, B, T, C, NH, stream);
}

} // namespace dptrain::cuda
