// Softmax cross-entropy over rows of logits, stably (max subtracted, log-sum-exp), keeping two
// floats a row instead of the probabilities, which backward recomputes (in place if asked). SIMD
// loops over V with fastmath.h's exp (docs/GPU.md, "Note [CPU twin choices]").
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/fastmath.h"
#include "dptrain/core/parallel.h"

#include <cmath>

namespace dptrain::cpu {

// The first v with z[v] == maxv: of equal maxima the first wins (0 when the row's max is NaN).
static int first_of(const float* z, int V, float maxv) {
    for (int v = 0; v < V; ++v)
        if (z[v] == maxv) return v;
    return 0;
}

// A row's max as a scan from z[0] takes it: a NaN counts only at index 0. The lanes start from
// -inf and z[0] joins last: a reduction started at z[0] loses a NaN there (GCC's lane max keeps
// the number; Note [CPU twin choices]).
static float row_max(const float* z, int V) {
    float rest = -INFINITY;
#pragma omp simd reduction(max : rest)
    for (int v = 1; v < V; ++v) rest = z[v] > rest ? z[v] : rest;
    return rest > z[0] ? rest : z[0];  // the scan's own comparison: a NaN z[0] stays
}

// Rows [first, last) of the forward: each row's max, 1 / sum of exp, argmax and loss.
static void crossentropy_forward_rows(float* losses, float* stats, int* argmax, const float* logits,
                                      const int* targets, int V, long first, long last) {
    for (long b = first; b < last; ++b) {
        const float* z = logits + b * V;
        const float maxv = row_max(z, V);
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; ++v) sum += exp_approx(z[v] - maxv);
        stats[2 * b] = maxv;
        stats[2 * b + 1] = (float)(1.0 / sum);
        if (argmax) argmax[b] = first_of(z, V, maxv);
        losses[b] = (float)(std::log(sum) + maxv - z[targets[b]]);
    }
}

static void crossentropy_backward_rows(float* dlogits, const float* logits, const float* stats, const int* targets,
                                       float scale, int V, long first, long last) {
    for (long b = first; b < last; ++b) {
        const float* z = logits + b * V;
        float* d = dlogits + b * V;
        const float maxv = stats[2 * b], inv = stats[2 * b + 1];
#pragma omp simd
        for (int v = 0; v < V; ++v) {
            float p = exp_approx(z[v] - maxv) * inv;  // the forward's probability, bit for bit
            d[v] = p * scale;
        }
        d[targets[b]] -= scale;
    }
}

// A row costs about 8 operations an element (max, exp, sum), over the threads by rows.
void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V) {
    parallel_for(B, 8L * V, [=](long first, long last) {
        crossentropy_forward_rows(losses, stats, argmax, logits, targets, V, first, last);
    });
}

void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V) {
    parallel_for(B, 8L * V, [=](long first, long last) {
        crossentropy_backward_rows(dlogits, logits, stats, targets, scale, V, first, last);
    });
}

} // namespace dptrain::cpu
