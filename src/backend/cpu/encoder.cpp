// Token + position embedding (a null position table: token rows alone, as a Llama's), forward and backward. The backward scatters into the token table:
// rows are visited in order on one thread per channel block, so repeated tokens add up
// deterministically.
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"

namespace dptrain::cpu {

// Rows [first, last) of the (B*T, C) output: token row plus position row.
static void encoder_forward_rows(float* out, const int* inp, int stride, const float* wte, const float* wpe, int T,
                                 int C, long first, long last) {
    for (long r = first; r < last; ++r) {
        const long b = r / T, t = r % T;
        float* o = out + r * C;
        const float* te = wte + (long)inp[b * stride + t] * C;
        if (!wpe) {
            for (int c = 0; c < C; ++c) o[c] = te[c];
            continue;
        }
        const float* pe = wpe + t * C;
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
}

// Channel blocks [first, last) of the backward: all rows in order, into the token and position rows.
static constexpr int kBlock = 64;
static void encoder_backward_blocks(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B,
                                    int T, int C, long first, long last) {
    for (long blk = first; blk < last; ++blk) {
        int c0 = (int)blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                const float* d = dout + ((long)b * T + t) * C;
                float* te = dwte + (long)inp[(long)b * stride + t] * C;
                if (!dwpe) {
                    for (int c = c0; c < c1; ++c) te[c] += d[c];
                    continue;
                }
                float* pe = dwpe + (long)t * C;
                for (int c = c0; c < c1; ++c) {
                    te[c] += d[c];
                    pe[c] += d[c];
                }
            }
    }
}

void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C) {
    parallel_for((long)B * T, C, [=](long first, long last) {
        encoder_forward_rows(out, inp, stride, wte, wpe, T, C, first, last);
    });
}

void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C) {
    for (int i = 0; i < n; ++i) {
        float* o = out + (long)i * C;
        const float* te = wte + (long)tok[i] * C;
        if (!wpe) {
            for (int c = 0; c < C; ++c) o[c] = te[c];
            continue;
        }
        const float* pe = wpe + (long)pos[i] * C;
        for (int c = 0; c < C; ++c) o[c] = te[c] + pe[c];
    }
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C) {
    parallel_for((C + kBlock - 1) / kBlock, 2L * B * T * kBlock, [=](long first, long last) {
        encoder_backward_blocks(dwte, dwpe, dout, inp, stride, B, T, C, first, last);
    });
}

} // namespace dptrain::cpu
