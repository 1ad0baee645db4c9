// Causal self-attention in key tiles of 64 with a running softmax: the CPU twin of
// src/backend/cuda/flash_attention.cu, tile for tile, one sgemm per tile pair on bf16-rounded
// operands, with the kernels' fmas (std::fma). Differences: docs/GPU.md, "Flash attention".
#include "dptrain/backend/cpu/ops.h"
#include "dptrain/core/bf16.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace dptrain::cpu {

namespace {

constexpr int kTile = 64;  // keys per tile, as the CUDA kernels

// This thread's scratch, kept and grown when a larger shape comes.
float* scratch(size_t n) {
    thread_local std::vector<float> s;
    if (s.size() < n) s.resize(n);
    return s.data();
}

// x rounded to bf16 (round_bf16's bits), inline: the loops here run inside the (batch, head)
// threads, where round_bf16's own parallel loop would start a nested region per call.
inline float bf(float x) { return bf16_to_float(float_to_bf16(x)); }

// T rows of hs values, `ld` apart in src, rounded to bf16 and packed into dst (T x hs).
void pack_bf16(float* dst, const float* src, int T, int hs, long ld) {
    for (int t = 0; t < T; ++t)
        for (int c = 0; c < hs; ++c) dst[(long)t * hs + c] = bf(src[(long)t * ld + c]);
}

} // namespace

void flash_attention_forward(float* out, float* lse, const float* inp, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const size_t TH = (size_t)T * hs, TT = (size_t)kTile * kTile, TO = (size_t)kTile * hs;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            float* q = scratch(3 * TH + 2 * TT + 2 * TO + 3 * kTile);
            float* k = q + TH;
            float* v = k + TH;
            float* s = v + TH;        // a tile's scores (64 x 64)
            float* p = s + TT;        // bf16(P)
            float* o = p + TT;        // running output of the query tile (64 x hs)
            float* pv = o + TO;       // this key tile's bf16(P) v
            float* m = pv + TO;       // running maximum per query
            float* l = m + kTile;     // running sum per query
            float* alpha = l + kTile; // this tile's rescaling per query
            const float* src = inp + (long)b * T * C3 + (long)h * hs;
            pack_bf16(q, src, T, hs, C3);
            pack_bf16(k, src + C, T, hs, C3);
            pack_bf16(v, src + 2 * C, T, hs, C3);
            for (int q0 = 0; q0 < T; q0 += kTile) {
                const int nr = std::min(kTile, T - q0);
                std::fill(o, o + TO, 0.0f);
                std::fill(m, m + kTile, -INFINITY);
                std::fill(l, l + kTile, 0.0f);
                for (int k0 = 0; k0 <= q0; k0 += kTile) {
                    const int nc = std::min(kTile, T - k0);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, q + (long)q0 * hs, hs,
                                k + (long)k0 * hs, hs, 0.0f, s, kTile);
                    for (int i = 0; i < nr; ++i) {
                        const int row = q0 + i;
                        float* si = s + (long)i * kTile;
                        float* pi = p + (long)i * kTile;
                        float mx = -INFINITY;
                        for (int j = 0; j < nc && k0 + j <= row; ++j) mx = std::max(mx, si[j] * scale);
                        const float mnew = std::max(m[i], mx);
                        float sum = 0.0f;
                        for (int j = 0; j < nc; ++j) {
                            const float e = k0 + j <= row ? std::exp(std::fma(si[j], scale, -mnew)) : 0.0f;
                            sum += e;
                            pi[j] = bf(e);
                        }
                        alpha[i] = std::exp(m[i] - mnew);  // 0 on the first tile
                        l[i] = std::fma(l[i], alpha[i], sum);
                        m[i] = mnew;
                    }
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, p, kTile,
                                v + (long)k0 * hs, hs, 0.0f, pv, hs);
                    for (int i = 0; i < nr; ++i)
                        for (int c = 0; c < hs; ++c) {
                            const long x = (long)i * hs + c;
                            o[x] = std::fma(o[x], alpha[i], pv[x]);
                        }
                }
                for (int i = 0; i < nr; ++i) {
                    const int row = q0 + i;
                    const float inv = 1.0f / l[i];
                    float* dst = out + ((long)b * T + row) * C + (long)h * hs;
                    for (int c = 0; c < hs; ++c) dst[c] = o[(long)i * hs + c] * inv;
                    lse[((long)b * NH + h) * T + row] = m[i] + std::log(l[i]);
                }
            }
        }
}

void flash_attention_backward(float* dinp, float* delta, const float* dout, const float* inp, const float* out,
                              const float* lse, int B, int T, int C, int NH) {
    const int C3 = 3 * C, hs = C / NH;
    const float scale = 1.0f / std::sqrt((float)hs);
    const size_t TH = (size_t)T * hs, TT = (size_t)kTile * kTile;
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            float* q = scratch(7 * TH + 4 * TT);
            float* k = q + TH;
            float* v = k + TH;
            float* d = v + TH;    // bf16(dout)
            float* dq = d + TH;   // sums, scaled at the end
            float* dk = dq + TH;
            float* dv = dk + TH;
            float* s = dv + TH;   // a tile pair's scores, then P
            float* dp = s + TT;   // dP, then dS
            float* pr = dp + TT;  // bf16(P)
            float* dsr = pr + TT; // bf16(dS)
            const float* src = inp + (long)b * T * C3 + (long)h * hs;
            const float* dsrc = dout + (long)b * T * C + (long)h * hs;
            const float* osrc = out + (long)b * T * C + (long)h * hs;
            const float* lse_bh = lse + ((long)b * NH + h) * T;
            float* delta_bh = delta + ((long)b * NH + h) * T;
            for (int t = 0; t < T; ++t) {
                float sum = 0.0f;
                for (int c = 0; c < hs; ++c) sum += dsrc[(long)t * C + c] * osrc[(long)t * C + c];
                delta_bh[t] = sum;
            }
            pack_bf16(q, src, T, hs, C3);
            pack_bf16(k, src + C, T, hs, C3);
            pack_bf16(v, src + 2 * C, T, hs, C3);
            pack_bf16(d, dsrc, T, hs, C);
            std::fill(dq, dq + 3 * TH, 0.0f);
            for (int q0 = 0; q0 < T; q0 += kTile) {
                const int nr = std::min(kTile, T - q0);
                for (int k0 = 0; k0 <= q0; k0 += kTile) {
                    const int nc = std::min(kTile, T - k0);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, q + (long)q0 * hs, hs,
                                k + (long)k0 * hs, hs, 0.0f, s, kTile);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, d + (long)q0 * hs, hs,
                                v + (long)k0 * hs, hs, 0.0f, dp, kTile);
                    for (int i = 0; i < nr; ++i) {
                        const int row = q0 + i;
                        for (int j = 0; j < nc; ++j) {
                            const long x = (long)i * kTile + j;
                            float pij = 0.0f, dsij = 0.0f;
                            if (k0 + j <= row) {
                                pij = std::exp(std::fma(s[x], scale, -lse_bh[row]));
                                dsij = pij * (dp[x] - delta_bh[row]);
                            }
                            pr[x] = bf(pij);
                            dsr[x] = bf(dsij);
                        }
                    }
                    // dV += P^T dO, dK += dS^T Q, dQ += dS K
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, pr, kTile,
                                d + (long)q0 * hs, hs, 1.0f, dv + (long)k0 * hs, hs);
                    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, dsr, kTile,
                                q + (long)q0 * hs, hs, 1.0f, dk + (long)k0 * hs, hs);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, dsr, kTile,
                                k + (long)k0 * hs, hs, 1.0f, dq + (long)q0 * hs, hs);
                }
            }
            float* dst = dinp + (long)b * T * C3 + (long)h * hs;
            for (int t = 0; t < T; ++t)
                for (int c = 0; c < hs; ++c) {
                    dst[(long)t * C3 + c] = dq[(long)t * hs + c] * scale;
                    dst[(long)t * C3 + C + c] = dk[(long)t * hs + c] * scale;
                    dst[(long)t * C3 + 2 * C + c] = dv[(long)t * hs + c];
                }
        }
}

} // namespace dptrain::cpu
