// Vectorizable exp and tanh for the CPU ops: glibc's are scalar calls, and tanh took a third of a
// GPT step in GELU. Not for: arguments outside the clamped ranges (they saturate).
#pragma once

#include <cstring>

namespace dptrain::cpu {

// 2^k * p(r), ln2 split in two for accuracy, p of degree 6. Relative error ~2e-7.
inline float exp_approx(float x) {
    // One comparison per statement: GCC if-converts these, but not ?: chains or std::min/max.
    x = x > 88.0f ? 88.0f : x;
    x = x < -87.0f ? -87.0f : x;
    // floor(x / ln2 + 0.5): the offset keeps the truncated value positive
    float k = (float)(int)(x * 1.44269504f + 128.5f) - 128.0f;
    float r = x - k * 0.693145752f - k * 1.42860677e-06f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    int bits = ((int)k + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, 4);
    return p * scale;
}

// Clamped at +-10, beyond which tanh is +-1 in float. Absolute error < 3e-7 (test_ops.cpp).
inline float tanh_approx(float y) {
    y = y > 10.0f ? 10.0f : y;
    y = y < -10.0f ? -10.0f : y;
    return 1.0f - 2.0f / (exp_approx(2.0f * y) + 1.0f);
}

} // namespace dptrain::cpu
