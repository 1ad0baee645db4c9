// Private to src/backend/cuda: the library headers that CUDA_CHECK / CUBLAS_CHECK (core/check.h)
// need, the launch-precondition check, the launch-size helper and the warp reduction the kernels
// share. Not for: user-facing errors (UserError).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include "cublas_library.h"
#include <cuda_runtime.h>

#include <cstdint>

// CUDA_REQUIRE(C % NH == 0): a launcher's precondition on its arguments. A caller bug, not a user
// error (options are validated before any op runs), so fatal like the checks above.
#define CUDA_REQUIRE(cond)                                                                          \
    do {                                                                                            \
        if (!(cond))                                                                                \
            ::dptrain::fatal(                                                                       \
                ::dptrain::strfmt("CUDA op precondition %s failed at %s:%d", #cond, __FILE__, __LINE__)); \
    } while (0)

namespace dptrain::cuda {

// Context's cuBLASLt algorithm cache (src/cuda/matmul.cu): made and freed with the Context.
LtPlans* lt_plans_create();
void lt_plans_destroy(LtPlans* plans);

// Blocks for a grid-stride loop over n elements: enough to fill the device several times over,
// never more than the grid allows (the loop covers the rest).
inline unsigned grid_for(long n, int threads) {
    long blocks = (n + threads - 1) / threads;
    if (blocks > 65535L * 32) blocks = 65535L * 32;
    return (unsigned)(blocks > 0 ? blocks : 1);
}

// Whether p may be read and written in 16-byte pieces (uint4, float4).
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15u) == 0; }

#ifdef __CUDACC__
// Sum / max over the 32 lanes of a warp; every lane gets the result. The butterfly order is
// fixed, so the result is the same on every run.
__device__ inline float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ inline float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// A float rounded to bf16, nearest even, as dptrain::to_bf16 (bf16.cpp) rounds it; written on the
// bits rather than with __float2bfloat16_rn so that NaN payloads come out identical too.
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
