// matmul_forward / matmul_backward through OpenBLAS sgemm (row-major), and the bf16 rounding of
// their operands. The bias gradient sums
// rows in order, so results do not depend on the thread count.
#include "dptrain/backend/cpu/ops.h"

#include "dptrain/core/bf16.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace dptrain::cpu {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC) {
    if (B <= 0) return;
    float beta = 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int b = 0; b < B; ++b)
            for (int o = 0; o < OC; ++o) out[(long)b * OC + o] = bias[o];
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int C, int OC) {
    if (B <= 0) return;
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, C, OC, 1.0f, dout, OC, weight, C, 0.0f,
                    dinp, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, B, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
        // Column sums, rows in order (deterministic): blocks of 64 columns per thread, each row's
        // block added at once so the inner loop runs along memory and vectorizes.
        constexpr int kBlock = 64;
        int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
        for (int blk = 0; blk < blocks; ++blk) {
            int o0 = blk * kBlock, n = OC - o0 < kBlock ? OC - o0 : kBlock;
            float acc[kBlock] = {0};
            for (int b = 0; b < B; ++b) {
                const float* row = dout + (long)b * OC + o0;
                for (int j = 0; j < n; ++j) acc[j] += row[j];
            }
            for (int j = 0; j < n; ++j) dbias[o0 + j] += acc[j];
        }
    }
}

void round_bf16(float* dst, const float* src, long N) {
#pragma omp parallel for schedule(static)
    for (long i = 0; i < N; ++i) dst[i] = bf16_to_float(float_to_bf16(src[i]));
}

double measure_sgemm_gflops(int n, double seconds) {
    std::vector<float> a((size_t)n * n, 0.5f), b((size_t)n * n, 0.25f), c((size_t)n * n, 0.0f);
    auto now = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    // The fastest of many short calls: an average would count the time the cores spent on
    // anything else meanwhile, and a low peak makes MFU read above 100%.
    double best = 0, t0 = now(), t = t0;
    while (t - t0 < seconds) {
        const double before = t;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
        t = now();
        best = std::max(best, 2.0 * n * n * (double)n / (t - before) / 1e9);
    }
    return best;
}

} // namespace dptrain::cpu
