// Bulk bf16 conversions, written branch-free over 32-bit words so the compiler vectorizes them
// (a per-element NaN branch kept the loop scalar and made bf16 all-reduce slower than float32).
#include "dptrain/core/bf16.h"

namespace dptrain {

static inline uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

void to_bf16(bf16* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = bits(src[i]);
        uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet_nan = (u >> 16) | 0x40u;
        dst[i] = (bf16)((u & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
    }
}

void from_bf16(float* __restrict dst, const bf16* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = (uint32_t)src[i] << 16;
        std::memcpy(dst + i, &u, 4);
    }
}

void add_bf16(float* __restrict dst, const bf16* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        uint32_t u = (uint32_t)src[i] << 16;
        float f;
        std::memcpy(&f, &u, 4);
        dst[i] += f;
    }
}

} // namespace dptrain
