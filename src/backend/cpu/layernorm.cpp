// LayerNorm forward/backward (row-wise over C), OpenMP over rows; the weight and bias gradients
// are column sums, done column-block by column-block with rows in order (deterministic).
#include "dptrain/backend/cpu/ops.h"

#include <cmath>
#include <vector>

namespace dptrain::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C) {
    const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; ++i) {
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

void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C) {
    residual_forward(res, a, b, N * C);
    layernorm_forward(out, mean, rstd, res, weight, bias, N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; ++i) {
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
    // Parameter gradients: columns in parallel, rows summed in order.
#pragma omp parallel for schedule(static)
    for (int c = 0; c < C; ++c) {
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

} // namespace dptrain::cpu
