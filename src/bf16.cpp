// Bulk bf16 conversions. Written as plain loops over integers so the compiler vectorizes them.
#include "dptrain/bf16.h"

namespace dptrain {

void to_bf16(bf16* __restrict dst, const float* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

void from_bf16(float* __restrict dst, const bf16* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

void add_bf16(float* __restrict dst, const bf16* __restrict src, size_t n) {
    for (size_t i = 0; i < n; ++i) dst[i] += bf16_to_float(src[i]);
}

} // namespace dptrain
