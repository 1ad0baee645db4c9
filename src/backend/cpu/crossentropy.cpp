// Softmax + cross-entropy over rows of logits, computed stably (max subtracted, log-sum-exp),
// without keeping the probabilities: forward keeps two floats a row (the max and 1 / sum) and
// backward recomputes each probability from them, in place over the logits if asked. At GPT-2's
// vocabulary that saves a (B*T, V) buffer and three of its passes per step.
#include "dptrain/backend/cpu/ops.h"

#include <cmath>

namespace dptrain::cpu {

void softmax_crossentropy_forward(float* losses, float* stats, int* argmax, const float* logits, const int* targets,
                                  int B, int V) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
        const float* z = logits + (long)b * V;
        float maxv = z[0];
        int arg = 0;
        for (int v = 1; v < V; ++v)
            if (z[v] > maxv) {  // strictly: the first of equal maxima wins
                maxv = z[v];
                arg = v;
            }
        double sum = 0.0;
        for (int v = 0; v < V; ++v) sum += std::exp(z[v] - maxv);
        stats[2 * b] = maxv;
        stats[2 * b + 1] = (float)(1.0 / sum);
        if (argmax) argmax[b] = arg;
        losses[b] = (float)(std::log(sum) + maxv - z[targets[b]]);
    }
}

void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* stats, const int* targets,
                                   float scale, int B, int V) {
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; ++b) {
        const float* z = logits + (long)b * V;
        float* d = dlogits + (long)b * V;
        const float maxv = stats[2 * b], inv = stats[2 * b + 1];
        for (int v = 0; v < V; ++v) {
            float p = std::exp(z[v] - maxv) * inv;  // the forward's probability, bit for bit
            d[v] = p * scale;
        }
        d[targets[b]] -= scale;
    }
}

} // namespace dptrain::cpu
