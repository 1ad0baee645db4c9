// matmul_forward / matmul_backward through OpenBLAS (row-major), and the bf16 rounding of their
// operands. The bias gradient sums rows in order: results independent of the thread count.
#include "dptrain/backend/cpu/ops.h"

#include "dptrain/core/bf16.h"
#include "dptrain/core/parallel.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace dptrain::cpu {

// Rows [begin, end) of out (B, OC) set to the bias.
static void fill_bias_rows(float* out, const float* bias, int OC, long begin, long end) {
    for (long b = begin; b < end; ++b)
        for (int o = 0; o < OC; ++o) out[b * OC + o] = bias[o];
}

// Column sums of dout (B, OC) added to dbias, for blocks [first, last) of kBlock columns: each
// row's block added at once so the inner loop runs along memory and vectorizes; rows in order.
static constexpr int kBlock = 64;
static void add_column_sums(float* dbias, const float* dout, int B, int OC, long first, long last) {
    for (long blk = first; blk < last; ++blk) {
        int o0 = (int)blk * kBlock, n = OC - o0 < kBlock ? OC - o0 : kBlock;
        float acc[kBlock] = {0};
        for (int b = 0; b < B; ++b) {
            const float* row = dout + (long)b * OC + o0;
            for (int j = 0; j < n; ++j) acc[j] += row[j];
        }
        for (int j = 0; j < n; ++j) dbias[o0 + j] += acc[j];
    }
}

static void round_bf16_range(float* dst, const float* src, long begin, long end) {
    for (long i = begin; i < end; ++i) dst[i] = bf16_to_float(float_to_bf16(src[i]));
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int C,
                    int OC) {
    if (B <= 0) return;
    float beta = 0.0f;
    if (bias) {
        parallel_for(B, OC, [=](long first, long last) { fill_bias_rows(out, bias, OC, first, last); });
        beta = 1.0f;
    }
    // One or two rows: sgemv a row, since sgemm packs the whole weight every call (several times
    // slower; docs/GPU.md, "Note [CPU twin choices]").
    if (B <= 2) {
        for (int b = 0; b < B; ++b)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, OC, C, 1.0f, weight, C, inp + (long)b * C, 1, beta,
                        out + (long)b * OC, 1);
        return;
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
        // Column sums, rows in order (deterministic), blocks of columns over the threads.
        parallel_for((OC + kBlock - 1) / kBlock, (long)B * kBlock,
                     [=](long first, long last) { add_column_sums(dbias, dout, B, OC, first, last); });
    }
}

void round_bf16(float* dst, const float* src, long N) {
    parallel_for(N, 4, [=](long first, long last) { round_bf16_range(dst, src, first, last); });
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
