// Softmax + cross-entropy over rows of logits, computed stably (max subtracted, log-sum-exp).
#include "dptrain/backend.h"

#include <cmath>

namespace dptrain::cpu {

void softmax_crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets,
                                  int B, int V) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
        const float* z = logits + (long)b * V;
        float* p = probs + (long)b * V;
        float maxv = z[0];
        for (int v = 1; v < V; ++v) maxv = z[v] > maxv ? z[v] : maxv;
        double sum = 0.0;
        for (int v = 0; v < V; ++v) {
            p[v] = std::exp(z[v] - maxv);
            sum += p[v];
        }
        float inv = (float)(1.0 / sum);
        for (int v = 0; v < V; ++v) p[v] *= inv;
        losses[b] = (float)(std::log(sum) + maxv - z[targets[b]]);
    }
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale,
                                   int B, int V) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
        const float* p = probs + (long)b * V;
        float* d = dlogits + (long)b * V;
        for (int v = 0; v < V; ++v) d[v] = p[v] * scale;
        d[targets[b]] -= scale;
    }
}

} // namespace dptrain::cpu
