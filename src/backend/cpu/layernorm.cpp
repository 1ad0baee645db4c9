// LayerNorm forward/backward (row-wise over C), rows over the OpenMP threads (core/parallel.h); the
// weight and bias gradients sum rows in order, columns over the threads: deterministic.
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"

#include <cmath>
#include <vector>

namespace dptrain::cpu {

// Rows [first, last) of the forward: each row's mean and 1 / std, and its normalised output.
static void layernorm_forward_rows(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                   const float* bias, int C, long first, long last) {
    const float eps = 1e-5f;
    for (long i = first; i < last; ++i) {
        const float* x = inp + i * C;
        float m = 0.0f;
        for (int c = 0; c < C; ++c) m += x[c];
        m /= C;
        float v = 0.0f;
        for (int c = 0; c < C; ++c) {
            float d = x[c] - m;
            v += d * d;
        }
        v /= C;
        float s = 1.0f / std::sqrt(v + eps);
        float* o = out + i * C;
        for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

// Rows [first, last) of the input gradient, added to dinp.
static void layernorm_backward_rows(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* mean, const float* rstd, int C, long first, long last) {
    for (long i = first; i < last; ++i) {
        const float* dy = dout + i * C;
        const float* x = inp + i * C;
        float m = mean[i], s = rstd[i];
        // dnorm = dy * weight; dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm))
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; ++c) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * dy[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float* dx = dinp + i * C;
        for (int c = 0; c < C; ++c) {
            float norm = (x[c] - m) * s;
            float dnorm = weight[c] * dy[c];
            dx[c] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
        }
    }
}

// Columns [first, last) of the weight and bias gradients, rows summed in order.
static void layernorm_param_grads(float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* mean, const float* rstd, long N, int C, long first, long last) {
    for (long c = first; c < last; ++c) {
        float dw = 0.0f, db = 0.0f;
        for (long i = 0; i < N; ++i) {
            float norm = (inp[i * C + c] - mean[i]) * rstd[i];
            dw += norm * dout[i * C + c];
            db += dout[i * C + c];
        }
        dweight[c] += dw;
        dbias[c] += db;
    }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C) {
    parallel_for(N, 8L * C, [=](long first, long last) {
        layernorm_forward_rows(out, mean, rstd, inp, weight, bias, C, first, last);
    });
}

void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C) {
    residual_forward(res, a, b, N * C);
    layernorm_forward(out, mean, rstd, res, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C) {
    parallel_for(N, 12L * C, [=](long first, long last) {
        layernorm_backward_rows(dinp, dout, inp, weight, mean, rstd, C, first, last);
    });
    parallel_for(C, 6 * N, [=](long first, long last) {
        layernorm_param_grads(dweight, dbias, dout, inp, mean, rstd, N, C, first, last);
    });
}

} // namespace dptrain::cpu
