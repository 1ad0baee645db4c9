// Private to src/backend/cuda: what the flash attention kernels share (flash_attention.cu forward,
// flash_attention_backward.cu backward): tile sizes, shared-memory layout, tile loads and WMMA
// products. Not for: other kernels, or host code outside those two files.
#pragma once

#include "check.h"

#include <cuda_bf16.h>
#include <mma.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

namespace dptrain::cuda::flash {

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

// Blocks of `bytes` of shared memory that fit an SM (1 KiB reserved per block), at most 8: the
// launch bounds, so that registers never allow fewer blocks than shared memory does.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
constexpr size_t kSmemPerSm = 164 * 1024;  // A100 (sm_80)
#else
constexpr size_t kSmemPerSm = 228 * 1024;  // H100, H200 (sm_90)
#endif
constexpr int blocks_per_sm(size_t bytes) {
    const size_t n = kSmemPerSm / (bytes + 1024);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

// Rows t0..t0+63 of one head (HS values, `ld` apart) into a bf16 tile, zeros past T. fp32 is
// rounded; bf16 is copied in 16-byte pieces, so every source row must be 16-byte aligned (the
// launchers check the pointers; C and HS are multiples of 8).
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

// A warp's 16 rows (16 x K) as K / 16 A fragments, kept in registers for every product.
template <int K>
__device__ void load_rows(FragA* fa, const bf16_t* a, int lda) {
#pragma unroll
    for (int k = 0; k < K / 16; ++k) wm::load_matrix_sync(fa[k], a + k * 16, lda);
}

// acc += A (16 x K) . B (K x 16); B col-major (X^T of a row-major X) or row-major, per FragB.
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

// S (16 x 64, the warp's fp32 scratch) = A . X^T, X a 64 x HS bf16 tile.
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

// acc[n] += P (16 x 64 bf16) . X[:, 16n .. 16n+15]; P's fragments loaded once for every n.
template <int HS>
__device__ void p_times_tile(FragAcc* acc, const bf16_t* P, const bf16_t* X) {
    constexpr int LDB = Dims<HS>::LDB, LDP = Dims<HS>::LDP;
    FragA pf[kTile / 16];
    load_rows<kTile>(pf, P, LDP);
#pragma unroll
    for (int n = 0; n < HS / 16; ++n) mma_rows<kTile, FragBRow>(acc[n], pf, X + n * 16, LDB);
}

// Past 48 KiB of dynamic shared memory a kernel must opt in per device: once per kernel and device,
// not per launch (a device reset would clear it; dptrain never resets one). The max carveout is a
// hint so that as many blocks as shared memory allows share an SM.
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

} // namespace dptrain::cuda::flash
