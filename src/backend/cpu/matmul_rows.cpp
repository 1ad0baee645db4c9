// matmul_forward_rows: out = inp @ weight^T + bias with each output a dot product of its own, in
// an order fixed by C alone, so a row's result is the same whatever rows share the call (decoding).
// Not for training's products, which OpenBLAS's sgemm computes faster at every size used there.
#include "dptrain/backend/cpu/ops.h"

#include "dptrain/core/parallel.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace dptrain::cpu {

namespace {

// Eight running sums a dot product: lane l adds the products of elements c with c % 8 == l, in
// order of c; the lanes are then added in one fixed tree, the last C % 8 products after them, and
// the bias last. Every output is computed by this sequence whichever tile (below) it falls in.
#if defined(__AVX2__) && defined(__FMA__)
using Lanes = __m256;
inline Lanes zero() { return _mm256_setzero_ps(); }
inline Lanes load(const float* p) { return _mm256_loadu_ps(p); }
inline Lanes fma(Lanes a, Lanes b, Lanes acc) { return _mm256_fmadd_ps(a, b, acc); }
inline void store(float* p, Lanes v) { _mm256_storeu_ps(p, v); }
#else
struct Lanes {
    float v[8];
};
inline Lanes zero() { return Lanes{}; }
inline Lanes load(const float* p) {
    Lanes r;
    for (int l = 0; l < 8; ++l) r.v[l] = p[l];
    return r;
}
inline Lanes fma(Lanes a, Lanes b, Lanes acc) {
    for (int l = 0; l < 8; ++l) acc.v[l] += a.v[l] * b.v[l];
    return acc;
}
inline void store(float* p, Lanes v) {
    for (int l = 0; l < 8; ++l) p[l] = v.v[l];
}
#endif

inline float finish(Lanes acc, const float* x, const float* w, int c, int C, float bias) {
    float l[8];
    store(l, acc);
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; c < C; ++c) s += x[c] * w[c];
    return s + bias;
}

// NB rows of inp against NO rows of weight: NB x NO sums in registers, each weight load used NB
// times and each input load NO times. Each output's sequence is the same in every tile shape.
template <int NB, int NO>
void tile(float* out, int OC, const float* x, const float* w, const float* bias, int C) {
    Lanes acc[NB][NO];
    for (int b = 0; b < NB; ++b)
        for (int o = 0; o < NO; ++o) acc[b][o] = zero();
    int c = 0;
    for (; c + 8 <= C; c += 8) {
        Lanes xv[NB], wv[NO];
        for (int b = 0; b < NB; ++b) xv[b] = load(x + (long)b * C + c);
        for (int o = 0; o < NO; ++o) wv[o] = load(w + (long)o * C + c);
        for (int b = 0; b < NB; ++b)
            for (int o = 0; o < NO; ++o) acc[b][o] = fma(xv[b], wv[o], acc[b][o]);
    }
    for (int b = 0; b < NB; ++b)
        for (int o = 0; o < NO; ++o)
            out[(long)b * OC + o] = finish(acc[b][o], x + (long)b * C, w + (long)o * C, c, C, bias ? bias[o] : 0.0f);
}

// Input rows [b0, b1), a multiple of NB of them, against weight rows [o, o + NO).
template <int NB, int NO>
void rows_against(float* out, const float* inp, const float* weight, const float* bias, int b0, int b1, int C, int OC,
                  long o) {
    const float* w = weight + o * C;
    const float* bo = bias ? bias + o : nullptr;
    for (int b = b0; b < b1; b += NB) tile<NB, NO>(out + (long)b * OC + o, OC, inp + (long)b * C, w, bo, C);
}

// Input rows [b0, b1) against outputs [o0, o1), NO weight rows at a time (held in L1 while the
// input rows pass by), the last (o1 - o0) % NO one at a time.
template <int NB, int NO>
void outputs(float* out, const float* inp, const float* weight, const float* bias, int b0, int b1, int C, int OC,
             long o0, long o1) {
    long o = o0;
    for (; o + NO <= o1; o += NO) rows_against<NB, NO>(out, inp, weight, bias, b0, b1, C, OC, o);
    for (; o < o1; ++o) rows_against<NB, 1>(out, inp, weight, bias, b0, b1, C, OC, o);
}

} // namespace

void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                         int OC) {
    if (B <= 0 || OC <= 0) return;
    // Blocks of 64 outputs over the threads: each output is one thread's, whole. Six input rows
    // against two weight rows make 12 independent sums in registers, enough to keep both FMA
    // units busy through their latency (the best of 2x4, 3x4, 4x2, 4x3, 5x2, 6x2 and 8x1 at 32
    // rows in dptrain-bench matmul, 0.57-0.87x sgemm's speed there); the rows left over, and a
    // single row, go against eight weight rows at a time (as fast as sgemv a row).
    constexpr long kOutBlock = 64;
    constexpr int kRows = 6, kOuts = 2;
    const long blocks = (OC + kOutBlock - 1) / kOutBlock;
    parallel_for(blocks, 2L * B * C * kOutBlock, [=](long first, long last) {
        const long o0 = first * kOutBlock, o1 = last * kOutBlock < OC ? last * kOutBlock : OC;
        const int full = B / kRows * kRows;
        if (full > 0) outputs<kRows, kOuts>(out, inp, weight, bias, 0, full, C, OC, o0, o1);
        if (full < B) outputs<1, 8>(out, inp, weight, bias, full, B, C, OC, o0, o1);
    });
}

} // namespace dptrain::cpu
