// Private to src/backend/cuda: what the kernels share (library headers for CUDA_CHECK, launch
// preconditions and sizes, warp reductions, bf16 bits). Not for: user-facing errors (UserError).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include "cublas_library.h"
#include <cuda_runtime.h>

#include <cstdint>

// A launcher's precondition on its arguments: a caller bug, not a user error (options are
// validated before any op runs), so fatal.
#define CUDA_REQUIRE(cond)                                                                          \
    do {                                                                                            \
        if (!(cond))                                                                                \
            ::dptrain::fatal(                                                                       \
                ::dptrain::strfmt("CUDA op precondition %s failed at %s:%d", #cond, __FILE__, __LINE__)); \
    } while (0)

namespace dptrain::cuda {

// Context's cuBLASLt algorithm cache (matmul.cu).
LtPlans* lt_plans_create();
void lt_plans_destroy(LtPlans* plans);

// Blocks for a grid-stride loop over n: enough to fill the device, capped (the loop does the rest).
inline unsigned grid_for(long n, int threads) {
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 32) blocks = 65535L * 32;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

// Whether p may be read and written in 16-byte pieces (uint4, float4).
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

#ifdef __CUDACC__
// Over the 32 lanes, every lane gets the result; the butterfly order is fixed: same on every run.
__device__ inline float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ inline float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Rounded to bf16 as dptrain::to_bf16 does, on the bits rather than __float2bfloat16_rn so that
// NaN payloads match too.
__device__ inline uint16_t bf16_bits(float x) {
    uint32_t u = __float_as_uint(x);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
// Stores of an op's result in the output's type: fp32 as it is, bf16 rounded.
__device__ inline void store_out(float* p, float x) { *p = x; }
__device__ inline void store_out(uint16_t* p, float x) { *p = bf16_bits(x); }
// An input's value as float: fp32 as it is, bf16 widened (exact).
__device__ inline float as_float(float x) { return x; }
__device__ inline float as_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
#endif

} // namespace dptrain::cuda
