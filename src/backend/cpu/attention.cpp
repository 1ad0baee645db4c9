// Causal multi-head self-attention with each (batch, head)'s products as sgemm calls over the full
// T x T (zeros past t keep it causal; measured faster than causal loops: docs/GPU.md, "Note [CPU
// twin choices]"), OpenMP over (batch, head). tf32: operands rounded to TF32 into per-thread scratch.
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/parallel.h"
#include "dptrain/core/fastmath.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace dptrain::cpu {

// 10 mantissa bits, nearest even; NaN and infinity kept, a value past TF32's largest to infinity.
static inline float tf32(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    std::memcpy(&x, &u, sizeof u);
    return x;
}

void round_tf32(float* dst, const float* src, long N) {
    for (long i = 0; i < N; ++i) dst[i] = tf32(src[i]);
}

// rows x cols values, `ld` apart in src, rounded to TF32 and packed into dst.
static void round_rows(float* dst, const float* src, int rows, int cols, long ld) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) dst[(long)r * cols + c] = tf32(src[r * ld + c]);
}

// This thread's TF32 scratch, kept and grown, so a run allocates it once.
static float* tf32_scratch(size_t n) {
    thread_local std::vector<float> s;
    if (s.size() < n) s.resize(n);
    return s.data();
}

// Row t of the scores: softmax over its first t + 1 entries, zeros past them. SIMD max and sum
// (lane-wise partials: order differs from a scalar loop by rounding alone), fastmath.h's exp.
static void causal_softmax_row(float* row, int t, int T) {
    float maxv = row[0];
#pragma omp simd reduction(max : maxv)
    for (int t2 = 1; t2 <= t; ++t2) maxv = row[t2] > maxv ? row[t2] : maxv;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t2 = 0; t2 <= t; ++t2) {
        const float e = exp_approx(row[t2] - maxv);
        row[t2] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
    std::fill(row + t + 1, row + T, 0.0f);
}

void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH, bool tf32_products) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const size_t TH = (size_t)T * hs;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            const float* q = inp + (long)b * T * C3 + h * hs;
            const float* k = q + C;
            const float* v = q + 2 * C;
            float* a = att + ((long)b * NH + h) * T * T;
            // Each product's operands: in place (fp32), or rounded into scratch (TF32).
            const float *qo = q, *ko = k, *vo = v, *ao = a;
            int ld = C3;
            float* sc = tf32_products ? tf32_scratch(3 * TH + (size_t)T * T) : nullptr;
            if (sc) {
                round_rows(sc, q, T, hs, C3);
                round_rows(sc + TH, k, T, hs, C3);
                qo = sc;
                ko = sc + TH;
                ld = hs;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, qo, ld, ko, ld, 0.0f, a, T);
            for (int t = 0; t < T; ++t) causal_softmax_row(a + (long)t * T, t, T);
            float* o = out + (long)b * T * C + h * hs;
            if (sc) {
                round_rows(sc + 2 * TH, v, T, hs, C3);
                round_rows(sc + 3 * TH, a, T, T, T);
                vo = sc + 2 * TH;
                ao = sc + 3 * TH;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, ao, T, vo, ld, 0.0f, o, C);
        }
}

void attention_backward(float* dinp, float* datt, const float* dout, const float* inp, const float* att, int B,
                        int T, int C, int NH, bool tf32_products) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const size_t TH = (size_t)T * hs;
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
            // Each product's operands: in place (fp32), or rounded into scratch (TF32).
            const float *qo = q, *ko = k, *vo = v, *ao = a, *dao = da, *dd = d;
            int ld = C3, ldd = C;
            float* sc = tf32_products ? tf32_scratch(4 * TH + (size_t)T * T) : nullptr;
            if (sc) {
                round_rows(sc, d, T, hs, C);
                round_rows(sc + TH, v, T, hs, C3);
                round_rows(sc + 4 * TH, a, T, T, T);
                dd = sc;
                vo = sc + TH;
                ao = sc + 4 * TH;
                ld = ldd = hs;
            }
            // out = att V:  datt = dout V^T,  dV = att^T dout
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dd, ldd, vo, ld, 0.0f, da, T);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, ao, T, dd, ldd, 0.0f, dv, C3);
            // softmax: dpre = att * (datt - sum_t2 att * datt) * scale (zero past t: att is zero there)
            for (int t = 0; t < T; ++t) {
                const float* ar = a + (long)t * T;
                float* dr = da + (long)t * T;
                float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                for (int t2 = 0; t2 <= t; ++t2) dot += ar[t2] * dr[t2];
#pragma omp simd
                for (int t2 = 0; t2 <= t; ++t2) dr[t2] = ar[t2] * (dr[t2] - dot) * scale;
                std::fill(dr + t + 1, dr + T, 0.0f);
            }
            if (sc) {  // att's rounded copy is done with: dpre takes its place
                round_rows(sc + 2 * TH, q, T, hs, C3);
                round_rows(sc + 3 * TH, k, T, hs, C3);
                round_rows(sc + 4 * TH, da, T, T, T);
                qo = sc + 2 * TH;
                ko = sc + 3 * TH;
                dao = sc + 4 * TH;
            }
            // scores = Q K^T:  dQ = dpre K,  dK = dpre^T Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, dao, T, ko, ld, 0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, dao, T, qo, ld, 0.0f, dk, C3);
        }
}

// attention_decode's (row, head) pairs [first, last): scores over 0..pos[i], softmax, sum of values.
// Query head h reads key/value head h / (NH / KV) of the cache.
static void decode_heads(float* out, const float* kcache, const float* vcache, const float* qkv, const int* slot,
                         const int* pos, int T, int NH, int KV, int hs, long first, long last) {
    const float scale = 1.0f / std::sqrt((float)hs);
    const size_t W = (size_t)(NH + 2 * KV) * hs, KC = (size_t)KV * hs;
    const int group = NH / KV;
    thread_local std::vector<float> scores;
    if (scores.size() < (size_t)T) scores.resize(T);
    for (long r = first; r < last; ++r) {
        const int i = (int)(r / NH), h = (int)(r % NH), p = pos[i], g = h / group;
        const float* q = qkv + (size_t)i * W + h * hs;
        const float* k = kcache + (size_t)slot[i] * T * KC + g * hs;
        const float* v = vcache + (size_t)slot[i] * T * KC + g * hs;
        // SIMD dot products, then the training forward's causal_softmax_row over p + 1 scores.
        for (int j = 0; j <= p; ++j) {
            float d = 0.0f;
#pragma omp simd reduction(+ : d)
            for (int c = 0; c < hs; ++c) d += q[c] * k[(size_t)j * KC + c];
            scores[j] = d * scale;
        }
        causal_softmax_row(scores.data(), p, p + 1);
        float* o = out + (size_t)i * NH * hs + h * hs;
        std::memset(o, 0, hs * sizeof(float));
        for (int j = 0; j <= p; ++j) {
            const float a = scores[j];
#pragma omp simd
            for (int c = 0; c < hs; ++c) o[c] += a * v[(size_t)j * KC + c];
        }
    }
}

void attention_decode_grouped(float* out, float* kcache, float* vcache, const float* qkv, const int* slot,
                              const int* pos, int n, int T, int NH, int KV, int hs) {
    const size_t W = (size_t)(NH + 2 * KV) * hs, KC = (size_t)KV * hs;
    long positions = 0;  // keys read over all rows: a (row, head) pair costs about 4 hs a key
    for (int i = 0; i < n; ++i) {
        const size_t at = ((size_t)slot[i] * T + pos[i]) * KC;
        std::memcpy(kcache + at, qkv + (size_t)i * W + (size_t)NH * hs, KC * sizeof(float));
        std::memcpy(vcache + at, qkv + (size_t)i * W + (size_t)NH * hs + KC, KC * sizeof(float));
        positions += pos[i] + 1;
    }
    parallel_for((long)n * NH, 4 * hs * (positions / n + 1), [=](long first, long last) {
        decode_heads(out, kcache, vcache, qkv, slot, pos, T, NH, KV, hs, first, last);
    });
}

void attention_decode(float* out, float* kcache, float* vcache, const float* qkv, const int* slot, const int* pos,
                      int n, int T, int C, int NH) {
    attention_decode_grouped(out, kcache, vcache, qkv, slot, pos, n, T, NH, NH, C / NH);
}

} // namespace dptrain::cpu
