// ReLU, GELU (tanh approximation), SwiGLU and the residual add, forward and backward, elementwise: SIMD,
// and OpenMP threads on loops long enough for a team (core/parallel.h).
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/fastmath.h"
#include "dptrain/core/parallel.h"

#include <cmath>
#include <cstring>

namespace dptrain::cpu {

// Each op's loop over [begin, end), for parallel_for (core/parallel.h).
static void relu_forward_range(float* out, const float* inp, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

static void relu_backward_range(float* dinp, const float* inp, const float* dout, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

static constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

static void gelu_forward_range(float* out, const float* inp, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanh_approx(kGeluScale * (x + cube)));
    }
}

static void gelu_backward_range(float* dinp, const float* inp, const float* dout, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float t = tanh_approx(kGeluScale * (x + cube));
        float sech2 = 1.0f - t * t;
        float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

// SwiGLU over rows [first, last) of (N, 2F): gate in columns [0, F), up in [F, 2F).
static void swiglu_forward_rows(float* out, const float* inp, int F, long first, long last) {
    for (long r = first; r < last; ++r) {
        const float *g = inp + r * 2 * F, *u = g + F;
        float* o = out + r * F;
#pragma omp simd
        for (int i = 0; i < F; ++i) o[i] = g[i] / (1.0f + exp_approx(-g[i])) * u[i];
    }
}

// d gate = dout * up * sig * (1 + gate * (1 - sig)), d up = dout * silu(gate); written (=).
static void swiglu_backward_rows(float* dinp, const float* inp, const float* dout, int F, long first, long last) {
    for (long r = first; r < last; ++r) {
        const float *g = inp + r * 2 * F, *u = g + F, *d = dout + r * F;
        float *dg = dinp + r * 2 * F, *du = dg + F;
#pragma omp simd
        for (int i = 0; i < F; ++i) {
            const float sig = 1.0f / (1.0f + exp_approx(-g[i]));
            du[i] = d[i] * g[i] * sig;
            dg[i] = d[i] * u[i] * sig * (1.0f + g[i] * (1.0f - sig));
        }
    }
}

static void residual_forward_range(float* out, const float* a, const float* b, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

static void residual_backward_range(float* da, float* db, const float* dout, long begin, long end) {
#pragma omp simd
    for (long i = begin; i < end; ++i) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

// The cost arguments: the work of one element, in simple float operations (GELU's tanh ~16).
void relu_forward(float* out, const float* inp, long N) {
    parallel_for(N, 1, [=](long b, long e) { relu_forward_range(out, inp, b, e); });
}

void relu_backward(float* dinp, const float* inp, const float* dout, long N) {
    parallel_for(N, 1, [=](long b, long e) { relu_backward_range(dinp, inp, dout, b, e); });
}

void gelu_forward(float* out, const float* inp, long N) {
    parallel_for(N, 16, [=](long b, long e) { gelu_forward_range(out, inp, b, e); });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long N) {
    parallel_for(N, 24, [=](long b, long e) { gelu_backward_range(dinp, inp, dout, b, e); });
}

void swiglu_forward(float* out, const float* inp, long N, int F) {
    parallel_for(N, 24L * F, [=](long b, long e) { swiglu_forward_rows(out, inp, F, b, e); });
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, long N, int F) {
    parallel_for(N, 32L * F, [=](long b, long e) { swiglu_backward_rows(dinp, inp, dout, F, b, e); });
}

void residual_forward(float* out, const float* a, const float* b, long N) {
    parallel_for(N, 1, [=](long first, long last) { residual_forward_range(out, a, b, first, last); });
}

void residual_backward(float* da, float* db, const float* dout, long N) {
    parallel_for(N, 2, [=](long b, long e) { residual_backward_range(da, db, dout, b, e); });
}

} // namespace dptrain::cpu
