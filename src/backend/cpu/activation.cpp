// ReLU, GELU (tanh approximation) and the residual add, forward and backward, elementwise with OpenMP.
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/fastmath.h"

#include <cmath>
#include <cstring>

namespace dptrain::cpu {

void relu_forward(float* out, const float* inp, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* inp, const float* dout, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

static constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

void gelu_forward(float* out, const float* inp, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanh_approx(kGeluScale * (x + cube)));
    }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float t = tanh_approx(kGeluScale * (x + cube));
        float sech2 = 1.0f - t * t;
        float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

void residual_forward(float* out, const float* a, const float* b, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, long N) {
#pragma omp parallel for simd schedule(static)
    for (long i = 0; i < N; ++i) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

} // namespace dptrain::cpu
