// Throughput of cuda::matmul_forward_bf16 at GPT-2 124M's projection shapes (B*T = 8192 tokens,
// C = 768): TFLOP/s and the share of the H200's dense bf16 peak (~989 TFLOP/s, datasheet), plus
// the fp32 matmul_forward on one shape for contrast. Run by tests/gpu/run.sh on a GPU machine.
// Not for: correctness (tests/cuda) or whole training steps. Built standalone with nvcc from the
// few sources it needs (no MPI on a bare GPU machine), so it brings its own fatal() below.
#include "dptrain/cuda_backend.h"
#include "dptrain/error.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

// The library's fatal() ends an MPI job (fatal.cpp needs mpi.h); here a plain exit is right.
[[noreturn]] void dptrain::fatal(const std::string& what, int code) {
    std::fprintf(stderr, "bench_ops: error: %s\n", what.c_str());
    std::exit(code);
}

#define BENCH_CHECK(call)                                                                     \
    do {                                                                                      \
        cudaError_t rc_ = (call);                                                             \
        if (rc_ != cudaSuccess) dptrain::fatal(std::string(#call) + ": " + cudaGetErrorString(rc_)); \
    } while (0)

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

int main(int argc, char** argv) {
    const int BT = 8192, warmup = 5, reps = argc > 1 ? std::atoi(argv[1]) : 50;
    const double peak_bf16 = 989.0, peak_fp32 = 67.0;  // TFLOP/s, H100/H200 SXM datasheet (dense)
    std::string why;
    int gpus = dptrain::cuda::device_count(&why);
    if (gpus == 0) {
        std::printf("bench_ops: no GPU (%s)\n", why.c_str());
        return 2;
    }
    cudaDeviceProp prop;
    BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
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
    cudaEvent_t start, stop;
    BENCH_CHECK(cudaEventCreate(&start));
    BENCH_CHECK(cudaEventCreate(&stop));

    // Mean time of `reps` back-to-back launches on the context's stream, by CUDA events.
    auto time_ms = [&](auto&& launch) {
        for (int i = 0; i < warmup; ++i) launch();
        BENCH_CHECK(cudaEventRecord(start, s));
        for (int i = 0; i < reps; ++i) launch();
        BENCH_CHECK(cudaEventRecord(stop, s));
        BENCH_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        BENCH_CHECK(cudaEventElapsedTime(&ms, start, stop));
        return (double)ms / reps;
    };

    std::printf("%-22s %-18s %10s %10s %8s\n", "op", "shape", "ms", "TFLOP/s", "of peak");
    double best = 0, total_flop = 0, total_ms = 0;
    for (const Shape& sh : shapes) {
        auto launch = [&] { dptrain::cuda::matmul_forward_bf16(out, inp16, w16, bias, BT, sh.C, sh.OC, ctx, s); };
        double ms = time_ms(launch);
        double flop = 2.0 * BT * sh.C * sh.OC, tflops = flop / (ms * 1e-3) / 1e12;
        best = tflops > best ? tflops : best;
        total_flop += flop;
        total_ms += ms;
        std::printf("%-22s %-18s %10.4f %10.1f %7.1f%%\n", "matmul_forward_bf16", sh.name, ms, tflops,
                    100.0 * tflops / peak_bf16);
    }
    double ms32 = time_ms([&] { dptrain::cuda::matmul_forward(out, inp, w, bias, BT, 768, 2304, ctx, s); });
    double tf32 = 2.0 * BT * 768 * 2304 / (ms32 * 1e-3) / 1e12;
    std::printf("%-22s %-18s %10.4f %10.1f %7.1f%% (of the %.0f TFLOP/s fp32 peak)\n", "matmul_forward fp32",
                shapes[0].name, ms32, tf32, 100.0 * tf32 / peak_fp32, peak_fp32);
    double overall = total_flop / (total_ms * 1e-3) / 1e12;
    // One line for run.sh's summary.
    std::printf("RESULT bf16 matmul: %.1f TFLOP/s over the 4 projections (best %.1f), %.1f%% of the %.0f TFLOP/s "
                "dense bf16 peak\n",
                overall, best, 100.0 * overall / peak_bf16, peak_bf16);

    cudaFree(inp);
    cudaFree(w);
    cudaFree(bias);
    cudaFree(out);
    cudaFree(inp16);
    cudaFree(w16);
    return 0;
}
