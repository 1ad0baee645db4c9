// Token + position embedding, forward and backward. The backward scatters into the token table:
// rows are visited in order on one thread per channel block, so repeated tokens add up
// deterministically.
#include "dptrain/backend/cpu/ops.h"

namespace dptrain::cpu {

void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            float* o = out + ((long)b * T + t) * C;
            const float* te = wte + (long)inp[(long)b * stride + t] * C;
            const float* pe = wpe + (long)t * C;
            for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
        }
}

void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C) {
    for (int i = 0; i < n; ++i) {
        float* o = out + (long)i * C;
        const float* te = wte + (long)tok[i] * C;
        const float* pe = wpe + (long)pos[i] * C;
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C) {
    constexpr int kBlock = 64;
    int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
        int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                const float* d = dout + ((long)b * T + t) * C;
                float* te = dwte + (long)inp[(long)b * stride + t] * C;
                float* pe = dwpe + (long)t * C;
                for (int c = c0; c < c1; ++c) {
                    te[c] += d[c];
                    pe[c] += d[c];
                }
            }
    }
}

} // namespace dptrain::cpu
