// Causal multi-head self-attention with the two products of each (batch, head) as sgemm calls:
// scores = Q K^T / sqrt(hs) over the full T x T (twice the causal work, at sgemm speed, which
// beat per-position dot-product loops ~3x), a causal softmax per row (entries past t set to 0,
// so the second product is causal too), out = att V. OpenMP over (batch, head); the small
// products run single-threaded inside. Backward mirrors it.
#include "dptrain/backend.h"
#include "dptrain/fastmath.h"

#include <cblas.h>

#include <cmath>
#include <cstring>

namespace dptrain::cpu {

void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const float* q = inp + (long)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + ((long)b * NH + h) * T * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a, T);
            for (int t = 0; t < T; ++t) {
                float* row = a + (long)t * T;
                float maxv = row[0];
                for (int t2 = 1; t2 <= t; ++t2) maxv = row[t2] > maxv ? row[t2] : maxv;
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) {
                    float e = std::exp(row[t2] - maxv);
                    row[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
                for (int t2 = t + 1; t2 < T; ++t2) row[t2] = 0.0f;
            }
            float* o = out + (long)b * T * C + h * hs;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, v, C3, 0.0f, o, C);
        }
}

void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const float* q = inp + (long)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* dq = dinp + (long)b * T * C3 + h * hs;
            float* dk = dq + C;
            float* dv = dq + 2 * C;
            const float* a = att + ((long)b * NH + h) * T * T;
            float* da = datt + ((long)b * NH + h) * T * T;
            const float* d = dout + (long)b * T * C + h * hs;
            // out = att V:  datt = dout V^T,  dV = att^T dout
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, C3, 0.0f, da, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a, T, d, C, 0.0f, dv, C3);
            // softmax: dpre = att * (datt - sum_t2 att * datt) * scale (zero past t: att is zero there)
            for (int t = 0; t < T; ++t) {
                const float* ar = a + (long)t * T;
                float* dr = da + (long)t * T;
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) dot += ar[t2] * dr[t2];
                for (int t2 = 0; t2 <= t; ++t2) dr[t2] = ar[t2] * (dr[t2] - dot) * scale;
                for (int t2 = t + 1; t2 < T; ++t2) dr[t2] = 0.0f;
            }
            // scores = Q K^T:  dQ = dpre K,  dK = dpre^T Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, k, C3, 0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, da, T, q, C3, 0.0f, dk, C3);
        }
}

} // namespace dptrain::cpu
