// RMSNorm forward/backward (row-wise over C, no mean, no bias: Llama's), rows over the OpenMP
// threads; the weight gradient sums rows in order, columns over the threads: deterministic.
// Not for: LayerNorm (layernorm.cpp).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"

#include <cmath>

namespace dptrain::cpu {

// Rows [first, last): 1 / rms kept, out = x * rstd * weight (Hugging Face's order: normalised, then scaled).
static void rmsnorm_forward_rows(float* out, float* rstd, const float* inp, const float* weight, int C, float eps,
                                 long first, long last) {
    for (long i = first; i < last; ++i) {
        const float* x = inp + i * C;
        float ss = 0.0f;
        for (int c = 0; c < C; ++c) ss += x[c] * x[c];
        const float s = 1.0f / std::sqrt(ss / C + eps);
        float* o = out + i * C;
        for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
        rstd[i] = s;
    }
}

// Rows [first, last) of the input gradient, added: dx = s * (g - x * s^2 * mean(g * x)), g = dy * weight.
static void rmsnorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                                  const float* rstd, int C, long first, long last) {
    for (long i = first; i < last; ++i) {
        const float* dy = dout + i * C;
        const float* x = inp + i * C;
        const float s = rstd[i];
        float gx = 0.0f;
        for (int c = 0; c < C; ++c) gx += dy[c] * weight[c] * x[c];
        const float k = gx / C * s * s;
        float* dx = dinp + i * C;
        for (int c = 0; c < C; ++c) dx[c] += s * (dy[c] * weight[c] - x[c] * k);
    }
}

// Columns [first, last) of the weight gradient, rows summed in order.
static void rmsnorm_weight_grads(float* dweight, const float* dout, const float* inp, const float* rstd, long N,
                                 int C, long first, long last) {
    for (long c = first; c < last; ++c) {
        float dw = 0.0f;
        for (long i = 0; i < N; ++i) dw += inp[i * C + c] * rstd[i] * dout[i * C + c];
        dweight[c] += dw;
    }
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C, float eps) {
    parallel_for(N, 5L * C, [=](long first, long last) {
        rmsnorm_forward_rows(out, rstd, inp, weight, C, eps, first, last);
    });
}

void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                              const float* weight, long N, int C, float eps) {
    residual_forward(res, a, b, N * C);
    rmsnorm_forward(out, rstd, res, weight, N, C, eps);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C) {
    parallel_for(N, 8L * C, [=](long first, long last) {
        rmsnorm_backward_rows(dinp, dout, inp, weight, rstd, C, first, last);
    });
    parallel_for(C, 4 * N, [=](long first, long last) {
        rmsnorm_weight_grads(dweight, dout, inp, rstd, N, C, first, last);
    });
}

} // namespace dptrain::cpu
