// bfloat16 on the wire: conversions only, since sums always accumulate in float32.
// Not for: arithmetic in bf16.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace dptrain {

using bf16 = uint16_t;

inline bf16 float_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return (bf16)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7FFFu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (bf16)(u >> 16);
}

inline float bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

void to_bf16(bf16* __restrict dst, const float* __restrict src, size_t n);
void from_bf16(float* __restrict dst, const bf16* __restrict src, size_t n);
// dst[i] += src[i] (float accumulator, bf16 addend).
void add_bf16(float* __restrict dst, const bf16* __restrict src, size_t n);

} // namespace dptrain
