// Throughput of cuda::matmul_forward_bf16 at GPT-2 124M's projection shapes (B*T = 8192 tokens,
// C = 768): TFLOP/s and the share of the H200's dense bf16 peak (~989 TFLOP/s, datasheet), plus
// the fp32 matmul_forward on one shape for contrast, and each shape's time with the bias as a
// separate pass instead of in cuBLASLt's epilogue, qkv's with a bf16 output, each
// projection's bf16 backward with the bias gradient in the weight-gradient GEMM's epilogue and as
// column sums, and the MLP's GELU forward and backward inside fc's and fcproj's GEMMs and as passes
// of their own (the paths bf16 training takes), and the loss over the logits of GPT-2's
// vocabulary in GB/s (bf16 in 16-byte chunks and loaded value by value; fp32), and the optimizer
// step's passes over GPT-2 124M's parameters in GB/s (the gradient norm's sum of squares, the AdamW
// update over chunks writing the bf16 copy, and the rounding pass that copy saves), LayerNorm forward
// and backward and the token embedding's forward and backward. With "attention" as
// the second argument: cuda::attention_forward + attention_backward at the same shape (B = 8,
// T = 1024, 12 heads),
// with fp32 products and with TF32 ones (--precision bf16), and flash_attention_forward +
// flash_attention_backward (--attention flash), their bf16 forms also forward and backward apart.
// With "decode": decoding's products, matmul_forward_rows against cuBLAS (bench_decode).
// Run by tests/gpu/run.sh on a GPU.
// Not for: correctness (tests/cuda) or whole training steps. Built standalone with nvcc from the
// few sources it needs (no MPI on a bare GPU machine), with a fatal() of its own below.
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/core/error.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// Named as bench_ops (the library's fatal() speaks as dptrain); a plain exit.
[[noreturn]] void dptrain::fatal(const std::string& what, int code) {
    std::fprintf(stderr, "bench_ops: error: %s\n", what.c_str());
    std::exit(code);
}

#define BENCH_CHECK(call)                                                                     \
    do {                                                                                      \
        cudaError_t rc_ = (call);                                                             \
        if (rc_ != cudaSuccess) dptrain::fatal(std::string(#call) + ": " + cudaGetErrorString(rc_)); \
    } while (0)

// TFLOP/s, H100/H200 SXM datasheet (dense).
static constexpr double kPeakBf16 = 989.0, kPeakFp32 = 67.0;

// Values in [-0.5, 0.5) from a hash of the index: no host arrays of hundreds of MB to copy.
__global__ void fill_kernel(float* x, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = (h & 0xFFFFu) / 65536.0f - 0.5f;
    }
}

__global__ void square_kernel(float* x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= x[i];
}

static float* device_random(size_t n, unsigned seed) {
    float* p = nullptr;
    BENCH_CHECK(cudaMalloc(&p, n * sizeof(float)));
    fill_kernel<<<1024, 256>>>(p, n, seed);
    BENCH_CHECK(cudaGetLastError());
    BENCH_CHECK(cudaDeviceSynchronize());  // the ops run on a non-blocking stream, unordered with this one
    return p;
}

struct Shape {
    const char* name;
    int C, OC;
};

// Mean milliseconds of `reps` back-to-back launch() calls on stream s after `warmup` more, timed
// by CUDA events.
template <class Launch>
static double mean_ms(cudaStream_t s, int warmup, int reps, Launch&& launch) {
    cudaEvent_t start, stop;
    BENCH_CHECK(cudaEventCreate(&start));
    BENCH_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < warmup; ++i) launch();
    BENCH_CHECK(cudaEventRecord(start, s));
    for (int i = 0; i < reps; ++i) launch();
    BENCH_CHECK(cudaEventRecord(stop, s));
    BENCH_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return (double)ms / reps;
}

// What the tensor cores do to fp32 operands under CUBLAS_COMPUTE_32F_FAST_TF32: A (64 x 64, every
// mantissa bit random) times the identity gives the converted A back exactly; it is compared bit
// for bit with truncation, rounding to nearest even, to nearest away from zero, and no conversion.
static const char* tf32_conversion(dptrain::cuda::Context& ctx) {
    const int n = 64;
    std::vector<float> a((size_t)n * n), id((size_t)n * n, 0.0f), c((size_t)n * n);
    for (int i = 0; i < n * n; ++i) {
        uint32_t h = (uint32_t)i * 2654435761u;
        h ^= h >> 13;
        h *= 2246822519u;
        uint32_t u = 0x3F800000u | (h & 0x7FFFFFu);  // in [1, 2), low bits random
        std::memcpy(&a[i], &u, sizeof u);
    }
    for (int i = 0; i < n; ++i) id[(size_t)i * n + i] = 1.0f;
    float *da = nullptr, *di = nullptr, *dc = nullptr;
    BENCH_CHECK(cudaMalloc(&da, a.size() * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&di, id.size() * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dc, c.size() * sizeof(float)));
    BENCH_CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    BENCH_CHECK(cudaMemcpy(di, id.data(), id.size() * sizeof(float), cudaMemcpyHostToDevice));
    ctx.bind_blas(ctx.stream());
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st = cublasGemmEx(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, CUDA_R_32F, n, di,
                                     CUDA_R_32F, n, &zero, dc, CUDA_R_32F, n, CUBLAS_COMPUTE_32F_FAST_TF32,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) dptrain::fatal(std::string("cublasGemmEx (TF32 probe): ") + cublasGetStatusString(st));
    BENCH_CHECK(cudaStreamSynchronize(ctx.stream()));
    BENCH_CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
    for (float* p : {da, di, dc}) cudaFree(p);
    auto bits = [](float f) {
        uint32_t u;
        std::memcpy(&u, &f, sizeof u);
        return u;
    };
    long trunc = 0, even = 0, away = 0, none = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        const uint32_t u = bits(a[i]), got = bits(c[i]);
        trunc += got == (u & ~0x1FFFu);
        even += got == ((u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu);
        away += got == ((u + 0x1000u) & ~0x1FFFu);
        none += got == u;
    }
    const long all = (long)a.size();
    return none == all ? "none (fp32 products: TF32 is off, e.g. NVIDIA_TF32_OVERRIDE=0)"
           : trunc == all ? "truncation (the low 13 mantissa bits dropped)"
           : even == all  ? "round to nearest even (as the CPU twin)"
           : away == all  ? "round to nearest, ties away from zero"
                          : "none of truncation, nearest even or nearest away";
}

// Attention forward + backward at GPT-2 124M's shape, fp32 products against TF32 ones.
static int bench_attention(int reps) {
    const int B = 8, T = 1024, C = 768, NH = 12, hs = C / NH, warmup = 2;
    const size_t n_inp = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    dptrain::cuda::Context ctx(0);
    cudaStream_t s = ctx.stream();
    float *inp = device_random(n_inp, 11), *dout = device_random(n_out, 12), *out = nullptr, *att = nullptr,
          *datt = nullptr, *dinp = nullptr;
    BENCH_CHECK(cudaMalloc(&out, n_out * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&att, n_att * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&datt, n_att * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&dinp, n_inp * sizeof(float)));
    // Six products of 2 B NH T^2 hs FLOP each (two forward, four backward), counted in full
    // (the causal half is computed too, as the model counts it).
    const double flop = 6.0 * 2.0 * B * NH * (double)T * T * hs;
    std::printf("attention forward + backward, B=%d T=%d C=%d NH=%d, %d reps after %d warm-up\n", B, T, C, NH, reps,
                warmup);
    double ms_of[2] = {0, 0};
    for (int tf32 = 0; tf32 < 2; ++tf32) {
        ms_of[tf32] = mean_ms(s, warmup, reps, [&] {
            dptrain::cuda::attention_forward(out, att, inp, B, T, C, NH, tf32 != 0, ctx, s);
            dptrain::cuda::attention_backward(dinp, datt, dout, inp, att, B, T, C, NH, tf32 != 0, ctx, s);
        });
        std::printf("%-6s %10.3f ms %10.1f TFLOP/s\n", tf32 ? "tf32" : "fp32", ms_of[tf32],
                    flop / (ms_of[tf32] * 1e-3) / 1e12);
    }
    // Flash attention (--attention flash): bf16 operands, the causal half only, nothing T x T;
    // its rate counted with the same full-T x T FLOPs, so the ms compare directly.
    float *lse = nullptr, *delta = nullptr;
    BENCH_CHECK(cudaMalloc(&lse, (size_t)B * NH * T * sizeof(float)));
    BENCH_CHECK(cudaMalloc(&delta, (size_t)B * NH * T * sizeof(float)));
    const double ms_flash = mean_ms(s, warmup, reps, [&] {
        dptrain::cuda::flash_attention_forward(out, lse, inp, B, T, C, NH, s);
        dptrain::cuda::flash_attention_backward(dinp, delta, dout, inp, out, lse, B, T, C, NH, s);
    });
    std::printf("%-6s %10.3f ms %10.1f TFLOP/s (full T x T count; %.0f KiB of shared memory per block)\n", "flash",
                ms_flash, flop / (ms_flash * 1e-3) / 1e12,
                dptrain::cuda::flash_attention_shared_bytes(C, NH) / 1024.0);
    // The forms bf16 training runs: q, k, v and dout read as bf16, only the output's bf16 copy
    // written (and read back by backward), dinp written as bf16.
    dptrain::bf16 *inp16 = nullptr, *out16 = nullptr, *dout16 = nullptr, *dinp16 = nullptr;
    BENCH_CHECK(cudaMalloc(&inp16, n_inp * sizeof(dptrain::bf16)));
    BENCH_CHECK(cudaMalloc(&out16, n_out * sizeof(dptrain::bf16)));
    BENCH_CHECK(cudaMalloc(&dout16, n_out * sizeof(dptrain::bf16)));
    BENCH_CHECK(cudaMalloc(&dinp16, n_inp * sizeof(dptrain::bf16)));
    dptrain::cuda::to_bf16(inp16, inp, n_inp, s);
    dptrain::cuda::to_bf16(dout16, dout, n_out, s);
    const double ms_flash16 = mean_ms(s, warmup, reps, [&] {
        dptrain::cuda::flash_attention_forward_bf16(nullptr, out16, lse, inp16, B, T, C, NH, s);
        dptrain::cuda::flash_attention_backward_bf16(dinp16, delta, dout16, inp16, out16, lse, B, T, C, NH, s);
    });
    std::printf("%-6s %10.3f ms %10.1f TFLOP/s (bf16 q, k, v and dout in; the output and dinp in bf16 out)\n",
                "flash16", ms_flash16, flop / (ms_flash16 * 1e-3) / 1e12);
    // The same forms' forward and backward apart, each also at the rate of the products its kernels
    // take: the tiles of 64 up to the diagonal (136 of 256 at T = 1024), two products forward, seven
    // backward (S and dP in each of its two kernels, then dV, dK and dQ), against the bf16 peak.
    const int tiles = T / 64;
    const double tile_products = (double)B * NH * (tiles * (tiles + 1) / 2) * 2.0 * 64 * 64 * hs;
    const double ms_fwd16 = mean_ms(s, warmup, reps, [&] {
        dptrain::cuda::flash_attention_forward_bf16(nullptr, out16, lse, inp16, B, T, C, NH, s);
    });
    const double ms_bwd16 = mean_ms(s, warmup, reps, [&] {
        dptrain::cuda::flash_attention_backward_bf16(dinp16, delta, dout16, inp16, out16, lse, B, T, C, NH, s);
    });
    for (int pass = 0; pass < 2; ++pass) {
        const double ms = pass ? ms_bwd16 : ms_fwd16, computed = (pass ? 7.0 : 2.0) * tile_products;
        std::printf("%-6s %10.3f ms %10.1f TFLOP/s computed (%.1f%% of the bf16 peak)\n",
                    pass ? "flash16 bwd" : "flash16 fwd", ms, computed / (ms * 1e-3) / 1e12,
                    100.0 * computed / (ms * 1e-3) / 1e12 / kPeakBf16);
    }
    for (dptrain::bf16* p : {inp16, out16, dout16, dinp16}) cudaFree(p);
    std::printf("TF32 conversion of fp32 operands on this GPU: %s\n", tf32_conversion(ctx));
    std::printf("RESULT attention fwd+bwd (B=8, T=1024): fp32 %.2f ms, TF32 %.2f ms (%.2fx), flash %.2f ms (%.2fx of "
                "TF32), its bf16 forms %.2f ms (forward %.2f, backward %.2f)\n",
                ms_of[0], ms_of[1], ms_of[0] / ms_of[1], ms_flash, ms_of[1] / ms_flash, ms_flash16, ms_fwd16, ms_bwd16);
    for (float* p : {inp, dout, out, att, datt, dinp, lse, delta}) cudaFree(p);
    return 0;
}

// Decoding's products at GPT-2 124M's shapes and its logits over 50,257 tokens: matmul_forward_rows
// (each row summed in an order fixed by C, so a request's bits are the same alone or batched)
// against cuBLAS's matmul_forward, at 1, 8 and 32 rows, and its form on bf16 weights (--precision
// bf16: half the bytes). GB/s counts the weights' bytes once (what a row must read at least)
// against the H200's 4.8 TB/s (datasheet); the RESULT lines add the products of one decoding
// call: 12 layers' four and the logits.
static int bench_decode(int reps) {
    const int warmup = 5, V = 50257, max_rows = 32, layers = 12;
    const Shape shapes[] = {{"qkv     (C -> 3C)", 768, 2304},
                            {"attproj (C -> C) ", 768, 768},
                            {"fc      (C -> 4C)", 768, 3072},
                            {"fcproj  (4C -> C)", 3072, 768},
                            {"logits  (C -> V) ", 768, V}};
    dptrain::cuda::Context ctx(0);
    cudaStream_t s = ctx.stream();
    float *inp = device_random((size_t)max_rows * 3072, 21), *w = device_random((size_t)768 * V, 22),
          *bias = device_random(3072, 23), *out = nullptr;
    BENCH_CHECK(cudaMalloc(&out, (size_t)max_rows * V * sizeof(float)));
    dptrain::bf16* w16 = nullptr;
    BENCH_CHECK(cudaMalloc(&w16, (size_t)768 * V * sizeof(dptrain::bf16)));
    dptrain::cuda::to_bf16(w16, w, (size_t)768 * V, s);
    std::printf("decoding's products, %d reps after %d warm-up; GB/s of weights read once\n", reps, warmup);
    std::printf("%-18s %5s %10s %8s %10s %8s %8s %10s %8s\n", "op", "rows", "rows ms", "GB/s", "cuBLAS ms", "GB/s",
                "ratio", "bf16 ms", "GB/s");
    for (int rows : {1, 8, max_rows}) {
        double call_rows = 0, call_blas = 0, call_16 = 0;
        for (const Shape& sh : shapes) {
            const float* b = sh.OC == V ? nullptr : bias;  // the logits have no bias
            // Each launch reads the next of the copies of the weight that fit in w (16 or more for
            // a layer's, 38-154 MB in all: past the 50 MB L2), as decoding reads each layer's
            // weights from HBM; the logits' weight alone is 154 MB.
            const size_t size = (size_t)sh.C * sh.OC, copies = (size_t)768 * V / size;
            size_t next = 0;
            auto weight = [&] { return w + (next++ % copies) * size; };
            auto weight16 = [&] { return w16 + (next++ % copies) * size; };
            const double ms_rows = mean_ms(s, warmup, reps, [&] {
                dptrain::cuda::matmul_forward_rows(out, inp, weight(), b, rows, sh.C, sh.OC, s);
            });
            const double ms_blas = mean_ms(s, warmup, reps, [&] {
                dptrain::cuda::matmul_forward(out, inp, weight(), b, rows, sh.C, sh.OC, ctx, s);
            });
            const double ms_16 = mean_ms(s, warmup, reps, [&] {
                dptrain::cuda::matmul_forward_rows(out, inp, weight16(), b, rows, sh.C, sh.OC, s);
            });
            const double bytes = 4.0 * sh.C * sh.OC;
            std::printf("%-18s %5d %10.4f %8.0f %10.4f %8.0f %8.2f %10.4f %8.0f\n", sh.name, rows, ms_rows,
                        bytes / (ms_rows * 1e6), ms_blas, bytes / (ms_blas * 1e6), ms_rows / ms_blas, ms_16,
                        bytes / 2 / (ms_16 * 1e6));
            const int times = sh.OC == V ? 1 : layers;
            call_rows += times * ms_rows;
            call_blas += times * ms_blas;
            call_16 += times * ms_16;
        }
        std::printf("RESULT decode products, %d row%s a call: matmul_forward_rows %.3f ms, cuBLAS %.3f ms (%.2fx), "
                    "bf16 weights %.3f ms\n",
                    rows, rows == 1 ? "" : "s", call_rows, call_blas, call_rows / call_blas, call_16);
    }
    cudaFree(w16);
    for (float* p : {inp, w, bias, out}) cudaFree(p);
    return 0;
}

int main(int argc, char** argv) {
    const int BT = 8192, warmup = 5, reps = argc > 1 ? std::atoi(argv[1]) : 50;
    std::string why;
    int gpus = dptrain::cuda::device_count(&why);
    if (gpus == 0) {
        std::printf("bench_ops: no GPU (%s)\n", why.c_str());
        return 2;
    }
    cudaDeviceProp prop;
    BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
    if (argc > 2 && std::string(argv[2]) == "attention") {
        std::printf("bench_ops on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
        return bench_attention(reps);
    }
    if (argc > 2 && std::string(argv[2]) == "decode") {
        std::printf("bench_ops on %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
        return bench_decode(reps);
    }
    std::printf("bench_ops on %s (%d SMs): B*T = %d, %d reps after %d warm-up\n", prop.name,
                prop.multiProcessorCount, BT, reps, warmup);
    dptrain::cuda::Context ctx(0);
    cudaStream_t s = ctx.stream();

    const Shape shapes[] = {{"qkv     (C -> 3C)", 768, 2304},
                            {"attproj (C -> C) ", 768, 768},
                            {"fc      (C -> 4C)", 768, 3072},
                            {"fcproj  (4C -> C)", 3072, 768}};
    const int max_c = 3072, max_oc = 3072;
    float* inp = device_random((size_t)BT * max_c, 1);
    float* w = device_random((size_t)max_oc * max_c, 2);
    float* bias = device_random(max_oc, 3);
    float* out = nullptr;
    BENCH_CHECK(cudaMalloc(&out, (size_t)BT * max_oc * sizeof(float)));
    dptrain::bf16 *inp16 = nullptr, *w16 = nullptr;
    BENCH_CHECK(cudaMalloc(&inp16, (size_t)BT * max_c * sizeof(dptrain::bf16)));
    BENCH_CHECK(cudaMalloc(&w16, (size_t)max_oc * max_c * sizeof(dptrain::bf16)));
    dptrain::cuda::to_bf16(inp16, inp, (size_t)BT * max_c, s);
    dptrain::cuda::to_bf16(w16, w, (size_t)max_oc * max_c, s);
    auto time_ms = [&](auto&& launch) { return mean_ms(s, warmup, reps, launch); };

    std::printf("%-22s %-18s %10s %10s %8s %s\n", "op", "shape", "ms", "TFLOP/s", "of peak",
                "  (bias as a separate pass: ms)");
    double best = 0, total_flop = 0, total_ms = 0, total_ms_unfused = 0;
    int n_bias = 0, n_out16 = 0, n_bgrad = 0;  // shapes whose cuBLASLt epilogue path ran, for the summary
    for (const Shape& sh : shapes) {
        auto launch = [&] { dptrain::cuda::matmul_forward_bf16(out, inp16, w16, bias, BT, sh.C, sh.OC, ctx, s); };
        ctx.set_epilogues(false);
        double ms_unfused = time_ms(launch);
        ctx.set_epilogues(true);
        const long fused0 = ctx.fused_bias_gemms();
        double ms = time_ms(launch);
        const bool fused = ctx.fused_bias_gemms() > fused0;
        n_bias += fused;
        double flop = 2.0 * BT * sh.C * sh.OC, tflops = flop / (ms * 1e-3) / 1e12;
        best = tflops > best ? tflops : best;
        total_flop += flop;
        total_ms += ms;
        total_ms_unfused += ms_unfused;
        std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   %.4f ms%s\n", "matmul_forward_bf16", sh.name, ms, tflops,
                    100.0 * tflops / kPeakBf16, ms_unfused, fused ? "" : " (no cuBLASLt bias epilogue: both separate)");
    }
    // qkv (--attention flash in bf16) with its output rounded to bf16, against the fp32 output above.
    dptrain::bf16* out16 = nullptr;
    BENCH_CHECK(cudaMalloc(&out16, (size_t)BT * max_oc * sizeof(dptrain::bf16)));
    float* staging = out;  // only where cuBLASLt has no bf16-output algorithm
    {
        const Shape* sh = &shapes[0];
        auto launch = [&] {
            dptrain::cuda::matmul_forward_bf16_out(out16, inp16, w16, bias, BT, sh->C, sh->OC, staging, ctx, s);
        };
        const long direct_before = ctx.direct_out16_gemms();
        launch();
        BENCH_CHECK(cudaStreamSynchronize(s));
        const bool direct = ctx.direct_out16_gemms() > direct_before;
        n_out16 += direct;
        const char* path = direct ? "cuBLASLt's bf16 output" : "fp32 staging and a rounding pass";
        const double ms16 = time_ms(launch), tflops16 = 2.0 * BT * sh->C * sh->OC / (ms16 * 1e-3) / 1e12;
        std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   (bf16 output, through %s)\n", "matmul_forward_bf16_out",
                    sh->name, ms16, tflops16, 100.0 * tflops16 / kPeakBf16, path);
    }
    cudaFree(out16);
    // The classifier (C -> V = 50257, no bias), the largest GEMM of a step: its logits as bf16
    // in rows padded to 50304 values (what bf16 training writes, CudaGpt::logits_stride), in rows
    // of V values (odd: 2-byte aligned), and as fp32; and its backward from padded and packed rows.
    double head_gain_fwd = 0, head_gain_bwd = 0;  // packed rows' time over padded rows'
    {
        const int V = 50257, Vs = (V + 63) / 64 * 64, C = 768;
        float* wv = device_random((size_t)V * C, 4);
        dptrain::bf16 *wv16 = nullptr, *logits16 = nullptr;
        float *logits32 = nullptr, *dinp = nullptr, *dw = nullptr;
        BENCH_CHECK(cudaMalloc(&wv16, (size_t)V * C * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&logits16, (size_t)BT * Vs * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&logits32, (size_t)BT * V * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&dinp, (size_t)BT * C * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&dw, (size_t)V * C * sizeof(float)));
        BENCH_CHECK(cudaMemsetAsync(dw, 0, (size_t)V * C * sizeof(float), s));
        dptrain::cuda::to_bf16(wv16, wv, (size_t)V * C, s);
        const double flop = 2.0 * BT * C * V;
        auto forward16 = [&](int ld) {
            return time_ms([&] {
                dptrain::cuda::matmul_forward_bf16_out(logits16, inp16, wv16, nullptr, BT, C, V, nullptr, ctx, s, ld);
            });
        };
        const double ms_padded = forward16(Vs), ms_packed = forward16(V);
        const double ms_f = time_ms(
            [&] { dptrain::cuda::matmul_forward_bf16(logits32, inp16, wv16, nullptr, BT, C, V, ctx, s); });
        // Backward from the logits' buffer (any bf16 values will do), rows padded and packed, dinp
        // in bf16 as bf16 training writes it (for the final LayerNorm's backward).
        auto backward16 = [&](int ld) {
            return time_ms([&] {
                dptrain::cuda::matmul_backward_bf16_out(reinterpret_cast<dptrain::bf16*>(dinp), dw, nullptr, logits16,
                                                        inp16, wv16, BT, C, V, ctx, s, ld);
            });
        };
        const double ms_bwd = backward16(Vs), ms_bwd_packed = backward16(V);
        head_gain_fwd = ms_packed / ms_padded;
        head_gain_bwd = ms_bwd_packed / ms_bwd;
        const double tflops16 = flop / (ms_padded * 1e-3) / 1e12, tflops_bwd = 2.0 * flop / (ms_bwd * 1e-3) / 1e12;
        std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   %.4f ms with rows of V values, %.4f ms fp32 logits\n",
                    "matmul_forward_bf16_out", "head    (C -> V) ", ms_padded, tflops16, 100.0 * tflops16 / kPeakBf16,
                    ms_packed, ms_f);
        std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   %.4f ms with rows of V values\n",
                    "matmul_backward_bf16_out", "head    (C -> V) ", ms_bwd, tflops_bwd, 100.0 * tflops_bwd / kPeakBf16,
                    ms_bwd_packed);
        for (void* p : {(void*)wv, (void*)wv16, (void*)logits16, (void*)logits32, (void*)dinp, (void*)dw}) cudaFree(p);
    }
    double ms32 = time_ms([&] { dptrain::cuda::matmul_forward(out, inp, w, bias, BT, 768, 2304, ctx, s); });
    double tf32 = 2.0 * BT * 768 * 2304 / (ms32 * 1e-3) / 1e12;
    std::printf("%-22s %-18s %10.4f %10.1f %7.1f%% (of the %.0f TFLOP/s fp32 peak)\n", "matmul_forward fp32",
                shapes[0].name, ms32, tf32, 100.0 * tf32 / kPeakFp32, kPeakFp32);
    double overall = total_flop / (total_ms * 1e-3) / 1e12;
    std::printf("bias epilogue: the 4 projections take %.3f ms with the bias in cuBLASLt's epilogue, %.3f ms "
                "with it as a separate pass (%.2fx)\n",
                total_ms, total_ms_unfused, total_ms_unfused / total_ms);
    // Each projection's backward (dinp, dweight and the bias gradient: twice the forward's FLOPs),
    // with the bias gradient in the weight-gradient GEMM's epilogue and as column sums.
    {
        float *dinp = nullptr, *dw = nullptr, *db = nullptr;
        dptrain::bf16* dout16 = nullptr;
        BENCH_CHECK(cudaMalloc(&dinp, (size_t)BT * max_c * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&dw, (size_t)max_oc * max_c * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&db, max_oc * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&dout16, (size_t)BT * max_oc * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMemsetAsync(dw, 0, (size_t)max_oc * max_c * sizeof(float), s));
        BENCH_CHECK(cudaMemsetAsync(db, 0, max_oc * sizeof(float), s));
        // Any bf16 values will do: inp's first BT * max_oc (inp holds BT * max_c, and max_c == max_oc).
        dptrain::cuda::to_bf16(dout16, inp, (size_t)BT * max_oc, s);
        double fused_ms = 0, unfused_ms = 0;
        for (const Shape& sh : shapes) {
            auto launch = [&] {
                dptrain::cuda::matmul_backward_bf16(dinp, dw, db, dout16, inp16, w16, BT, sh.C, sh.OC, ctx, s);
            };
            ctx.set_epilogues(false);
            const double ms_cols = time_ms(launch);
            ctx.set_epilogues(true);
            const long fused0 = ctx.fused_bias_grads();
            const double ms = time_ms(launch);
            const bool fused = ctx.fused_bias_grads() > fused0;
            n_bgrad += fused;
            fused_ms += ms;
            unfused_ms += ms_cols;
            // With dinp in bf16 (matmul_backward_bf16_out), as bf16 training writes the input
            // gradients LayerNorm's and flash attention's backward read (qkv's and fc's, and the
            // attention projection's with flash attention; fcproj's goes through GELU's backward).
            const double ms_out16 = time_ms([&] {
                dptrain::cuda::matmul_backward_bf16_out(reinterpret_cast<dptrain::bf16*>(dinp), dw, db, dout16, inp16,
                                                        w16, BT, sh.C, sh.OC, ctx, s);
            });
            const double tflops = 4.0 * BT * sh.C * sh.OC / (ms * 1e-3) / 1e12;
            const char* note = fused ? " (bias gradient as column sums)"
                                     : " (no cuBLASLt bias-gradient epilogue: both as column sums)";
            std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   %.4f ms%s; %.4f ms with dinp in bf16\n",
                        "matmul_backward_bf16", sh.name, ms, tflops, 100.0 * tflops / kPeakBf16, ms_cols, note,
                        ms_out16);
        }
        std::printf("bias-gradient epilogue: the 4 projections' backward take %.3f ms with it, %.3f ms with column "
                    "sums (%.2fx)\n",
                    fused_ms, unfused_ms, unfused_ms / fused_ms);
        cudaFree(dinp);
        cudaFree(dw);
        cudaFree(db);
        cudaFree(dout16);
    }
    // The MLP's GELU in bf16: fc with GELU after it, and fcproj's backward with GELU's, each in one
    // GEMM with cuBLASLt's epilogue (GELU_AUX_BIAS, DGELU) and as a GEMM and a pass of its own.
    int n_gelu = 0, n_dgelu = 0;
    {
        const int C = 768, H = 3072;
        dptrain::bf16 *pre = nullptr, *act = nullptr, *dpre = nullptr, *dout16 = nullptr;
        float *dw = nullptr, *db = nullptr;
        for (dptrain::bf16** p : {&pre, &act, &dpre})
            BENCH_CHECK(cudaMalloc(p, (size_t)BT * H * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&dout16, (size_t)BT * C * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&dw, (size_t)H * C * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&db, C * sizeof(float)));
        BENCH_CHECK(cudaMemsetAsync(dw, 0, (size_t)H * C * sizeof(float), s));
        BENCH_CHECK(cudaMemsetAsync(db, 0, C * sizeof(float), s));
        dptrain::cuda::to_bf16(dout16, inp, (size_t)BT * C, s);
        float* staging = out;  // BT * max_oc floats: BT * H
        auto fwd = [&] {
            dptrain::cuda::matmul_forward_bf16_gelu(pre, act, inp16, w16, bias, BT, C, H, staging, ctx, s);
        };
        auto bwd = [&] {
            dptrain::cuda::matmul_backward_bf16_gelu(dpre, dw, db, dout16, act, w16, pre, BT, H, C, staging, ctx, s);
        };
        struct Timed {
            const char* op;
            const char* shape;
            double flop;
        };
        const Timed ops[2] = {{"matmul_fwd_bf16_gelu", "fc      (C -> 4C)", 2.0 * BT * C * H},
                              {"matmul_bwd_bf16_gelu", "fcproj  (4C -> C)", 4.0 * BT * C * H}};
        for (int i = 0; i < 2; ++i) {
            auto launch = [&] { i == 0 ? fwd() : bwd(); };
            ctx.set_epilogues(false);
            const double ms_passes = time_ms(launch);
            ctx.set_epilogues(true);
            const long fused0 = i == 0 ? ctx.fused_gelu_gemms() : ctx.fused_dgelu_gemms();
            const double ms = time_ms(launch);
            const bool fused = (i == 0 ? ctx.fused_gelu_gemms() : ctx.fused_dgelu_gemms()) > fused0;
            (i == 0 ? n_gelu : n_dgelu) += fused;
            const double tflops = ops[i].flop / (ms * 1e-3) / 1e12;
            std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%   %.4f ms%s\n", ops[i].op, ops[i].shape, ms, tflops,
                        100.0 * tflops / kPeakBf16, ms_passes,
                        fused ? " (GELU as a pass of its own)" : " (no cuBLASLt GELU epilogue: both as passes)");
        }
        for (void* p : {(void*)pre, (void*)act, (void*)dpre, (void*)dout16, (void*)dw, (void*)db}) cudaFree(p);
    }
    // The loss over the logits of GPT-2's vocabulary: forward reads them once, backward reads them
    // and writes their gradient. bf16 in rows of a multiple of 64 values, as the GPT keeps them
    // (chunks of 8 in 16-byte loads and stores), and in rows of V values (a chunk's 8 values loaded
    // one by one); fp32 in rows of V values, as the fp32 GPT keeps them (one by one too), in place.
    double ms_loss = 0, ms_loss_scalar = 0;
    {
        const int V = 50257, stride_padded = (V + 63) / 64 * 64;
        const size_t n = (size_t)BT * stride_padded;
        float* wide = device_random(n, 7);
        dptrain::bf16 *logits16 = nullptr, *dlogits16 = nullptr;
        float *losses = nullptr, *stats = nullptr;
        int* targets = nullptr;
        BENCH_CHECK(cudaMalloc(&logits16, n * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&dlogits16, n * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&losses, BT * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&stats, 2 * (size_t)BT * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&targets, BT * sizeof(int)));
        dptrain::cuda::to_bf16(logits16, wide, n, s);
        std::vector<int> host_targets(BT);
        for (int i = 0; i < BT; ++i) host_targets[i] = (int)((i * 7919L) % V);
        BENCH_CHECK(cudaMemcpyAsync(targets, host_targets.data(), BT * sizeof(int), cudaMemcpyHostToDevice, s));
        BENCH_CHECK(cudaStreamSynchronize(s));
        const double bytes_fwd = 2.0 * BT * V, bytes_bwd = 4.0 * BT * V, hbm = 4.8e12;  // H200: 4.8 TB/s
        for (const int stride : {stride_padded, V}) {
            const double ms_f = time_ms([&] {
                dptrain::cuda::softmax_crossentropy_forward_bf16(losses, stats, nullptr, logits16, targets, BT, V,
                                                                 stride, s);
            });
            const double ms_b = time_ms([&] {
                dptrain::cuda::softmax_crossentropy_backward_bf16(dlogits16, logits16, stats, targets, 1.0f / BT, BT,
                                                                  V, stride, s);
            });
            for (int pass = 0; pass < 2; ++pass) {
                const double ms = pass ? ms_b : ms_f, gbs = (pass ? bytes_bwd : bytes_fwd) / (ms * 1e-3) / 1e9;
                std::printf("%-22s %-18s %10.4f %8.0f GB/s %5.1f%% of 4.8 TB/s%s\n",
                            pass ? "softmax_xent_bwd_bf16" : "softmax_xent_fwd_bf16", "8192 x 50257", ms, gbs,
                            100.0 * gbs * 1e9 / hbm,
                            stride == V ? " (rows of V values: a chunk's values loaded one by one)" : "");
            }
            (stride == V ? ms_loss_scalar : ms_loss) = ms_f + ms_b;
        }
        const double ms_f32 = time_ms([&] {
            dptrain::cuda::softmax_crossentropy_forward(losses, stats, nullptr, wide, targets, BT, V, s);
        });
        const double ms_b32 = time_ms([&] {
            dptrain::cuda::softmax_crossentropy_backward(wide, wide, stats, targets, 1.0f / BT, BT, V, s);
        });
        for (int pass = 0; pass < 2; ++pass) {
            const double ms = pass ? ms_b32 : ms_f32, gbs = 2.0 * (pass ? bytes_bwd : bytes_fwd) / (ms * 1e-3) / 1e9;
            std::printf("%-22s %-18s %10.4f %8.0f GB/s %5.1f%% of 4.8 TB/s (fp32 logits, rows of V values)\n",
                        pass ? "softmax_xent_bwd" : "softmax_xent_fwd", "8192 x 50257", ms, gbs,
                        100.0 * gbs * 1e9 / hbm);
        }
        for (void* p : {(void*)wide, (void*)logits16, (void*)dlogits16, (void*)losses, (void*)stats, (void*)targets})
            cudaFree(p);
    }
    // The optimizer step of a GPU-resident GPT-2 124M (DeviceStep): the norm's sum of squares reads
    // the gradient (4 bytes a parameter); AdamW over chunks reads the parameter, gradient and both
    // moments and writes them back but the gradient, plus the bf16 copy (30 bytes); to_bf16 is the
    // rounding pass forward would make without that copy (6 bytes).
    double ms_norm = 0, ms_adamw = 0;
    {
        const size_t P = 124439808;  // GPT-2 124M's parameters (tied embeddings, V = 50257)
        const double hbm = 4.8e12;
        float *p = device_random(P, 11), *g = device_random(P, 12), *m = device_random(P, 13);
        float* v = device_random(P, 14);
        square_kernel<<<1024, 256>>>(v, P);  // a second moment is never negative
        BENCH_CHECK(cudaGetLastError());
        dptrain::bf16* p16 = nullptr;
        double *norm = nullptr, *partial = nullptr;
        dptrain::cuda::UpdateChunk* chunks = nullptr;
        BENCH_CHECK(cudaMalloc(&p16, P * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&norm, sizeof(double)));
        BENCH_CHECK(cudaMalloc(&partial, dptrain::cuda::kNormBlocks * sizeof(double)));
        const std::vector<dptrain::cuda::UpdateChunk> host_chunks = dptrain::cuda::update_chunks({{0, P, 1}});
        BENCH_CHECK(cudaMalloc(&chunks, host_chunks.size() * sizeof(dptrain::cuda::UpdateChunk)));
        BENCH_CHECK(cudaMemcpy(chunks, host_chunks.data(), host_chunks.size() * sizeof(dptrain::cuda::UpdateChunk),
                               cudaMemcpyHostToDevice));
        BENCH_CHECK(cudaDeviceSynchronize());
        ms_norm = time_ms([&] { dptrain::cuda::sum_squares(norm, partial, g, P, s); });
        ms_adamw = time_ms([&] {
            dptrain::cuda::adamw_update_chunks(p, g, m, v, chunks, (int)host_chunks.size(), 1e-4f, 0.9f, 0.95f, 1e-8f,
                                               0.1f, 10, 1.0f, s, p16);
        });
        const double ms_round = time_ms([&] { dptrain::cuda::to_bf16(p16, p, P, s); });
        const struct {
            const char* name;
            double ms, bytes;
        } rows[] = {{"gradient norm", ms_norm, 4.0 * P},
                    {"adamw_update_chunks", ms_adamw, 30.0 * P},
                    {"to_bf16 (saved pass)", ms_round, 6.0 * P}};
        for (const auto& r : rows) {
            const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
            std::printf("%-22s %-18s %10.4f %8.0f GB/s %5.1f%% of 4.8 TB/s\n", r.name, "124439808", r.ms, gbs,
                        100.0 * gbs * 1e9 / hbm);
        }
        for (void* q : {(void*)p, (void*)g, (void*)m, (void*)v, (void*)p16, (void*)norm, (void*)partial, (void*)chunks})
            cudaFree(q);
    }
    // LayerNorm and the embedding at GPT-2 124M's shapes, B T = 8192 rows of C = 768 (25 LayerNorms
    // a step each way). Forward as training runs it, with the residual add before it and a bf16
    // output: a and b read, their sum and the bf16 output written, 14 C bytes a row. Backward from
    // a bf16 dout, with dinp's bf16 copy and the gradients written: its row pass reads dout, the
    // input and dinp and writes dinp and the copy (16 C), the weight and bias gradients' column
    // sums read dout and the input again (6 C): 22 C a row counted. The encoder at B = 8, T = 1024
    // with token ids drawn log-uniformly (many repeats of a few ids, as text has: the backward sums
    // each id's rows in one block, so the most frequent id's count sets its longest block): ms only.
    double ms_lnf = 0, ms_lnb = 0, ms_encb = 0;
    {
        const int C = 768, B = 8, T = 1024, V = 50257;
        const size_t n = (size_t)BT * C;
        const double hbm = 4.8e12;
        float *a = device_random(n, 21), *b = device_random(n, 22), *dinp = device_random(n, 23);
        float *wln = device_random(C, 24), *bln = device_random(C, 25), *dout = device_random(n, 26);
        float *wte = device_random((size_t)V * C, 27), *wpe = device_random((size_t)T * C, 28);
        float *res = nullptr, *mean = nullptr, *rstd = nullptr, *dw = nullptr, *db = nullptr, *enc = nullptr;
        dptrain::bf16 *out16 = nullptr, *dout16 = nullptr, *dinp16 = nullptr;
        int* tokens = nullptr;
        float *dwte = nullptr, *dwpe = nullptr;
        for (float** q : {&res, &enc}) BENCH_CHECK(cudaMalloc(q, n * sizeof(float)));
        for (float** q : {&mean, &rstd}) BENCH_CHECK(cudaMalloc(q, BT * sizeof(float)));
        for (float** q : {&dw, &db}) BENCH_CHECK(cudaMalloc(q, C * sizeof(float)));
        for (dptrain::bf16** q : {&out16, &dout16, &dinp16}) BENCH_CHECK(cudaMalloc(q, n * sizeof(dptrain::bf16)));
        BENCH_CHECK(cudaMalloc(&dwte, (size_t)V * C * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&dwpe, (size_t)T * C * sizeof(float)));
        BENCH_CHECK(cudaMalloc(&tokens, (size_t)B * (T + 1) * sizeof(int)));
        std::vector<int> host_tokens((size_t)B * (T + 1));
        unsigned h = 12345;
        for (int& t : host_tokens) {
            h = h * 1664525u + 1013904223u;
            t = std::min(V - 1, (int)std::pow((double)V, (h >> 8) / 16777216.0) - 1);
        }
        BENCH_CHECK(cudaMemcpy(tokens, host_tokens.data(), host_tokens.size() * sizeof(int), cudaMemcpyHostToDevice));
        dptrain::cuda::to_bf16(dout16, dout, n, s);
        BENCH_CHECK(cudaStreamSynchronize(s));
        ms_lnf = time_ms([&] {
            dptrain::cuda::residual_layernorm_forward_bf16(res, out16, mean, rstd, a, b, wln, bln, BT, C, s);
        });
        ms_lnb = time_ms([&] {
            dptrain::cuda::layernorm_backward_bf16(dinp, dinp16, dw, db, dout16, res, wln, mean, rstd, BT, C, ctx, s,
                                                   false);
        });
        const double ms_encf =
            time_ms([&] { dptrain::cuda::encoder_forward(enc, tokens, T + 1, wte, wpe, B, T, C, s); });
        ms_encb = time_ms([&] { dptrain::cuda::encoder_backward(dwte, dwpe, dout, tokens, T + 1, B, T, C, ctx, s); });
        const struct {
            const char* name;
            double ms, bytes;
        } rows[] = {{"layernorm fwd (+res)", ms_lnf, 14.0 * C * BT}, {"layernorm bwd (bf16)", ms_lnb, 22.0 * C * BT},
                    {"encoder fwd", ms_encf, 12.0 * C * BT}, {"encoder bwd", ms_encb, 0.0}};
        for (const auto& r : rows) {
            if (r.bytes == 0.0) {
                std::printf("%-22s %-18s %10.4f\n", r.name, "8192 x 768", r.ms);
                continue;
            }
            const double gbs = r.bytes / (r.ms * 1e-3) / 1e9;
            std::printf("%-22s %-18s %10.4f %8.0f GB/s %5.1f%% of 4.8 TB/s\n", r.name, "8192 x 768", r.ms, gbs,
                        100.0 * gbs * 1e9 / hbm);
        }
        for (void* q : {(void*)a, (void*)b, (void*)dinp, (void*)wln, (void*)bln, (void*)dout, (void*)wte, (void*)wpe,
                        (void*)res, (void*)mean, (void*)rstd, (void*)dw, (void*)db, (void*)enc, (void*)out16,
                        (void*)dout16, (void*)dinp16, (void*)tokens, (void*)dwte, (void*)dwpe})
            cudaFree(q);
    }
    // One line for run.sh's summary (its last RESULT line, of which the summary shows the first 90
    // characters; the step's log keeps it whole), with how many shapes had each of cuBLASLt's
    // epilogue paths (a fallback costs memory traffic the counts in docs/GPU.md assume saved).
    std::printf("RESULT bf16 matmul: %.1f TFLOP/s over the 4 projections (best %.1f), %.1f%% of the %.0f TFLOP/s "
                "dense bf16 peak; cuBLASLt epilogues: bias %d/4, bf16 output %d/1, bias gradient %d/4, GELU %d/1, "
                "GELU backward %d/1; classifier rows padded: %.2fx forward, %.2fx backward; loss %.3f ms (%.2fx "
                "with its values loaded one by one); optimizer at 124M: norm %.3f ms, AdamW %.3f ms; LayerNorm "
                "%.3f ms forward, %.3f ms backward; encoder backward %.3f ms\n",
                overall, best, 100.0 * overall / kPeakBf16, kPeakBf16, n_bias, n_out16, n_bgrad, n_gelu, n_dgelu,
                head_gain_fwd, head_gain_bwd, ms_loss, ms_loss_scalar / ms_loss, ms_norm, ms_adamw, ms_lnf, ms_lnb,
                ms_encb);

    cudaFree(inp);
    cudaFree(w);
    cudaFree(bias);
    cudaFree(out);
    cudaFree(inp16);
    cudaFree(w16);
    return 0;
}
