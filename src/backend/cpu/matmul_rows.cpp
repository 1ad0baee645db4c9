// matmul_forward_rows: out = inp @ weight^T + bias, each output a dot product in an order fixed by
// C alone, so a row's result does not depend on the call's other rows (decoding); fp32 or bf16
// weights. Choices measured: docs/GPU.md, "Note [matmul_rows order]". Not for training (sgemm).
#include "dptrain/backend/cpu/ops.h"

#include "dptrain/core/parallel.h"

#include <algorithm>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace dptrain::cpu {

namespace {

// A weight's value: fp32 as it is, bf16 widened (exact).
inline float value(float w) { return w; }
inline float value(bf16 w) { return bf16_to_float(w); }

// Eight running sums a dot product (lane l: elements c % 8 == l, in order of c), added in one
// fixed tree, then the C % 8 tail, then the bias: the same sequence in a tile of eight or alone.
#if defined(__AVX2__) && defined(__FMA__)
using Lanes = __m256;
inline Lanes zero() { return _mm256_setzero_ps(); }
inline Lanes load(const float* p) { return _mm256_loadu_ps(p); }
// Eight bf16 values widened: each one's 16 bits moved to the top of a 32-bit lane.
inline Lanes load(const bf16* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
inline Lanes fma(Lanes a, Lanes b, Lanes acc) { return _mm256_fmadd_ps(a, b, acc); }
inline void store(float* p, Lanes v) { _mm256_storeu_ps(p, v); }
#else
struct Lanes {
    float v[8];
};
inline Lanes zero() { return Lanes{}; }
template <class W>
inline Lanes load(const W* p) {
    Lanes r;
    for (int l = 0; l < 8; ++l) r.v[l] = value(p[l]);
    return r;
}
inline Lanes fma(Lanes a, Lanes b, Lanes acc) {  // a multiply and an add (no FMA in this build)
    for (int l = 0; l < 8; ++l) acc.v[l] += a.v[l] * b.v[l];
    return acc;
}
inline void store(float* p, Lanes v) {
    for (int l = 0; l < 8; ++l) p[l] = v.v[l];
}
#endif

template <class W>
inline float finish(Lanes acc, const float* x, const W* w, int c, int C, float bias) {
    float l[8];
    store(l, acc);
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; c < C; ++c) s += x[c] * value(w[c]);
    return s + bias;
}

#if defined(__AVX2__) && defined(__FMA__)
// finish() for eight outputs with C % 8 == 0, the same additions: two hadd rounds then the 128-bit
// halves' sum is finish's tree. One store instead of eight round trips through memory.
inline void finish8(float* out, const Lanes* acc, const float* bias) {
    const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    s = _mm256_add_ps(s, bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps());
    _mm256_storeu_ps(out, s);
}
#endif

// One row of inp against NO weight rows: NO sums in registers, each input load used NO times.
// With `next` (bf16 only), the next tile's rows are prefetched at this tile's pace: read as NO short
// streams they outrun the hardware prefetchers (docs/GPU.md, "Note [matmul_rows order]").
template <int NO, class W>
void tile(float* out, const float* x, const W* w, const float* bias, int C, const W* next = nullptr) {
    Lanes acc[NO];
    for (int o = 0; o < NO; ++o) acc[o] = zero();
    int c = 0;
    for (; c + 8 <= C; c += 8) {
        if constexpr (sizeof(W) == 2) {  // the fp32 form's loop as it was, without the test
            constexpr int kStep = NO * 8 * (int)sizeof(W);  // bytes of weight an iteration reads
            if (next)
                for (int k = 0; k < kStep; k += 64)
                    __builtin_prefetch(reinterpret_cast<const char*>(next) + (long)c * NO * sizeof(W) + k, 0, 3);
        }
        const Lanes xv = load(x + c);
        for (int o = 0; o < NO; ++o) acc[o] = fma(xv, load(w + (long)o * C + c), acc[o]);
    }
#if defined(__AVX2__) && defined(__FMA__)
    if constexpr (NO == 8) {
        if (c == C) {  // no tail: the eight outputs finished at once
            finish8(out, acc, bias);
            return;
        }
    }
#endif
    for (int o = 0; o < NO; ++o) out[o] = finish(acc[o], x, w + (long)o * C, c, C, bias ? bias[o] : 0.0f);
}

// Every row against outputs [o0, o1): eight weight rows at a time (cache-resident while the input
// rows pass), the last (o1 - o0) % 8 one at a time.
template <class W>
void outputs(float* out, const float* inp, const W* weight, const float* bias, int B, int C, int OC, long o0,
             long o1) {
    long o = o0;
    for (; o + 8 <= o1; o += 8)
        for (int b = 0; b < B; ++b)  // the next tile fetched while the first row passes
            tile<8>(out + (long)b * OC + o, inp + (long)b * C, weight + o * C, bias ? bias + o : nullptr, C,
                    sizeof(W) == 2 && b == 0 && o + 16 <= o1 ? weight + (o + 8) * C : nullptr);
    for (; o < o1; ++o)
        for (int b = 0; b < B; ++b)
            tile<1>(out + (long)b * OC + o, inp + (long)b * C, weight + o * C, bias ? bias + o : nullptr, C);
}

template <class W>
void rows(float* out, const float* inp, const W* weight, const float* bias, int B, int C, int OC) {
    if (B <= 0 || OC <= 0) return;
    // Blocks of 64 outputs, each one thread's, whole. The cost weight (one 8-lane FMA per simple
    // operation) is tuned so one narrow row stays on one thread: Note [matmul_rows order].
    constexpr long kOutBlock = 64;
    const long blocks = (OC + kOutBlock - 1) / kOutBlock;
    parallel_for(blocks, (long)B * C * kOutBlock / 8, [=](long first, long last) {
        outputs(out, inp, weight, bias, B, C, OC, first * kOutBlock, std::min(last * kOutBlock, (long)OC));
    });
}

} // namespace

void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                         int OC) {
    rows(out, inp, weight, bias, B, C, OC);
}

void matmul_forward_rows(float* out, const float* inp, const bf16* weight, const float* bias, int B, int C, int OC) {
    rows(out, inp, weight, bias, B, C, OC);
}

} // namespace dptrain::cpu
