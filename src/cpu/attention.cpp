// Causal multi-head self-attention (llm.c's CPU formulation): for each (b, t, h) the scores of
// positions t2 <= t, a softmax, and the weighted sum of values. Loops run over the head size, so
// the inner loops vectorize; OpenMP over (b, t, h). Scores and softmax are kept for backward.
#include "dptrain/backend.h"

#include <cmath>
#include <cstring>

namespace dptrain::cpu {

void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for collapse(3) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < NH; ++h) {
                const float* q = inp + ((long)b * T + t) * C3 + h * hs;
                float* a = att + (((long)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float* k = inp + ((long)b * T + t2) * C3 + C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; ++i) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) {
                    float e = std::exp(a[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; ++t2) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; ++t2) a[t2] = 0.0f;
                float* o = out + ((long)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; ++i) o[i] = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float* v = inp + ((long)b * T + t2) * C3 + 2 * C + h * hs;
                    float w = a[t2];
                    for (int i = 0; i < hs; ++i) o[i] += w * v[i];
                }
            }
}

void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    std::memset(dinp, 0, sizeof(float) * (size_t)B * T * C3);
    // dq of (b,t,h) is written by its (t) iteration alone, but dk and dv of position t2 receive
    // from every t >= t2: parallel over (b, h) only, t sequential, so the sums keep their order.
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const float* a = att + (((long)b * NH + h) * T + t) * T;
                float* da = datt + (((long)b * NH + h) * T + t) * T;
                const float* q = inp + ((long)b * T + t) * C3 + h * hs;
                float* dq = dinp + ((long)b * T + t) * C3 + h * hs;
                const float* d = dout + ((long)b * T + t) * C + h * hs;
                // out = sum att * v: datt = d . v, dv += att * d
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float* v = inp + ((long)b * T + t2) * C3 + 2 * C + h * hs;
                    float* dv = dinp + ((long)b * T + t2) * C3 + 2 * C + h * hs;
                    float s = 0.0f;
                    for (int i = 0; i < hs; ++i) {
                        s += v[i] * d[i];
                        dv[i] += a[t2] * d[i];
                    }
                    da[t2] = s;
                }
                // softmax backward: dpre = att * (datt - sum(att * datt))
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) dot += a[t2] * da[t2];
                for (int t2 = 0; t2 <= t; ++t2) {
                    float dpre = a[t2] * (da[t2] - dot) * scale;
                    const float* k = inp + ((long)b * T + t2) * C3 + C + h * hs;
                    float* dk = dinp + ((long)b * T + t2) * C3 + C + h * hs;
                    for (int i = 0; i < hs; ++i) {
                        dq[i] += dpre * k[i];
                        dk[i] += dpre * q[i];
                    }
                }
            }
}

} // namespace dptrain::cpu
